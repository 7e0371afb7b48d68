"""The whole-model solver: ``plan(model, platform, request) -> Plan``.

``plan`` parses the request once, loads the model and the platform, runs one ``Solve``
(planning/solve.py: names, rules, the choice per phase, the page size, kernel tables) and,
where a device profile ranks the backends, prices what each explicit setting costs by solving
again without it. A valid request that cannot be planned gives ``ok=False`` and an error;
malformed input (unknown model or device, junk settings) raises ``AttnkitError``.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from attnkit.model.spec import ModelAttention
from attnkit.planning import priorities
from attnkit.planning.options import check_options
from attnkit.planning.plan import Plan
from attnkit.planning.profile_choice import ProfileChoice
from attnkit.planning.request import PlanRequest, parse_request
from attnkit.planning.solve import SETTING_FIELDS, Solve
from attnkit.planning.speed_cost import speed_costs, warning
from attnkit.planning.validate import validate_model
from attnkit.registry.capabilities import BackendDeclaration

__all__ = ["SETTING_FIELDS", "Solve", "plan"]


def plan(model: Any, platform: Any = "auto", request: Any = None, *,
         registry: Mapping[str, BackendDeclaration] | None = None, env: Mapping[str, str] | None = None,
         table: tuple[priorities.Priority, ...] = priorities.TABLE, strict: bool = False,
         label: str | None = None, profile: str | os.PathLike | bool | None = None,
         workload: Mapping[str, Mapping[str, int]] | None = None, **settings: Any) -> Plan:
    """Plan prefill and decode backends for ``model`` on ``platform``.

    ``request`` (a dict or PlanRequest) and keyword ``settings`` (``page_size=32`` ...) are the
    user's settings; an unknown one is AK306. ``registry`` (name -> declaration) defaults to
    every backend in the tree; ``env`` to ``os.environ``. ``strict=True`` raises the plan's
    error instead of returning ``ok=False``. ``label`` names the model in example command
    lines (default: the string given, or its name).
    ``profile``: a device profile file (``attnkit tune``) to rank backends by; None finds one
    (ATTNKIT_PROFILE, the user's cache, the shipped profiles; docs/profile.md); False uses
    none. ``workload`` (``{phase: {batch, new, context}}``) ranks by the nearest measured bucket
    instead of all of them.
    """
    req = parse_request(request, **settings)
    check_options(env=env, registry=registry, table=table, profile=profile)
    label = label if isinstance(label, str) and label else (model if isinstance(model, str) else None)
    spec = model if isinstance(model, ModelAttention) else _load_model(model)
    validate_model(spec)
    target = _platform(platform)
    automatic = registry is None and profile is not False   # a custom registry is not what was timed
    if registry is None:
        from attnkit.registry import declarations
        registry = declarations()
    env = os.environ if env is None else env
    named = profile if profile not in (None, True, False) else None

    def run(request: PlanRequest) -> tuple[Plan, Solve]:
        solve = Solve(spec, label or spec.name, target, request, dict(registry), table)
        solve.measured = ProfileChoice(target, path=named, env=env, automatic=automatic,
                                       enabled=profile is not False, workload=workload)
        return solve.run(env), solve

    result, solve = run(req)
    result.profile = solve.measured.info()
    result.warnings.extend(w for w in solve.measured.warnings if w not in result.warnings)
    if result.ok and solve.measured.profile is not None:    # what an explicit setting costs in speed
        def planned(request: PlanRequest) -> Solve | None:
            other, other_solve = run(request)
            return other_solve if other.ok else None

        result.speed_costs = speed_costs(solve, planned)
        result.warnings += [warning(c) for c in result.speed_costs]
    return result.raise_for_error() if strict else result


def _load_model(model: Any) -> ModelAttention:
    from attnkit.model import load_model
    return load_model(model)


def _platform(platform: Any):
    from attnkit.hardware import resolve_platform, validate_platform

    if not isinstance(platform, str) and platform is not None and all(
            hasattr(platform, a) for a in ("kind", "name", "capability", "packages")):
        validate_platform(platform)
        return platform
    return resolve_platform(platform)
