"""What an explicit setting costs in speed: a flag that moves a role to a backend the device
profile measures clearly slower than the plan without that flag says so (torch-free).

For every setting the caller set (not the backend names: naming a backend is choosing it), the
plan is solved again without that setting. Where a role (prefill, extend, decode) then runs on
another backend, and the profile measured the two for that role (the same workload: all its
buckets, or the same fresh-prefill / extend split; each at its own plan's settings, e.g. the
page size and KV dtype it runs with) with the other backend at least ``SLOWDOWN`` times
faster, the plan carries a warning naming the flag, both backends and both measured rates,
and a record of it in ``Plan.speed_costs``.
``attnkit plan --strict`` refuses such a plan (AK314, ``refuse``). Rates come from the profile
only; where either backend was not measured for the role, nothing is claimed.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from attnkit.errors import AttnkitError
from attnkit.planning.measured import rate_text
from attnkit.planning.plan import Plan

SLOWDOWN = 1.5
# settings whose value can move a role to another backend; tp_size is left out (it changes the
# per-rank shape, so its rates are not comparable with the plan without it)
FIELDS = ("page_size", "kv_cache_dtype", "dtype", "cuda_graph", "speculative_tokens", "dual_chunk", "deny")
ROLES = ("prefill", "extend", "decode")


def flag_args(key: str, value: Any) -> list[str]:
    """``attnkit plan``'s words for one request setting (``[]`` when unset)."""
    flag = "--" + key.replace("_", "-")
    if key == "cuda_graph" and value is False:
        return [flag, "off"]
    if value in (None, (), [], False) or (key == "tp_size" and value == 1):
        return []
    if key == "deny":
        return [w for name in value for w in (flag, name)]
    if key == "require":
        from attnkit.planning.request import spelled
        return [flag, ",".join(spelled(n) for n in value)]
    return [flag] if value is True else [flag, str(value)]


def speed_costs(solve, replan: Callable[[Any], Any]) -> list[dict[str, Any]]:
    """The speed each setting the caller set costs ``solve`` (a finished run with a profile);
    ``replan(request)`` solves the same model and device for another request."""
    costs: list[dict[str, Any]] = []
    typed = solve.typed
    for key in FIELDS:
        if not typed.is_set(key) or typed.sources.get(key) == "env":
            continue
        base = replan(dataclasses.replace(typed, **{key: () if key == "deny" else None}))
        if base is None:
            continue
        for role in ROLES:
            cost = _role_cost(solve, base, role)
            if cost is not None:
                flag = " ".join(flag_args(key, getattr(typed, key)))
                costs.append({"flag": flag, "field": key, "role": role, **cost,
                              "command": solve.command(), "without": solve.command(**{key: None})})
    return costs


def _role_cost(solve, base, role: str) -> dict[str, Any] | None:
    chosen, instead = _backend(solve, role), _backend(base, role)
    if chosen is None or instead is None or chosen == instead:
        return None
    mine, theirs = solve.measured.rankings.get(role), base.measured.rankings.get(role)
    if mine is None or theirs is None or (mine.phase, mine.role) != (theirs.phase, theirs.role):
        return None                      # not measured for the same workload: claim nothing
    rate, base_rate = mine.rates.get(chosen), theirs.rates.get(instead)
    if not rate or not base_rate or base_rate < SLOWDOWN * rate:
        return None
    return {"backend": chosen, "rate": rate, "instead": instead, "instead_rate": base_rate,
            "unit": mine.unit, "slowdown": round(base_rate / rate, 2), "profile": theirs.profile.name}


def _backend(solve, role: str) -> str | None:
    backends = solve.backends
    return backends.get(role) or (backends.get("prefill") if role == "extend" else None)


def warning(cost: dict[str, Any]) -> str:
    """The plan's warning for one speed cost."""
    return (f"{cost['flag']} costs {cost['role']} speed: it runs {cost['backend']} "
            f"({rate_text(cost['rate'])} {cost['unit']}) where the plan without it runs {cost['instead']} "
            f"({rate_text(cost['instead_rate'])} {cost['unit']}), {cost['slowdown']:.1f}x faster by the "
            f"{cost['profile']}; without it: {cost['without']}")


def refuse(plan: Plan) -> Plan:
    """``plan`` refused (AK314) when a setting costs speed (``attnkit plan --strict``); else ``plan``."""
    if not plan.ok or not plan.speed_costs:
        return plan
    first = plan.speed_costs[0]
    flags = list(dict.fromkeys(c["flag"] for c in plan.speed_costs))
    err = AttnkitError(
        "AK314", "; ".join(warning(c) for c in plan.speed_costs), field=first["field"],
        expected=f"a plan no explicit setting slows {SLOWDOWN}x or more", actual=flags,
        solutions=[f"drop {', '.join(flags)} (attnkit fills it in by measurement)",
                   "or keep it and drop --strict: the plan still runs, slower"],
        details={"example_fix": {"before": f"{first['command']} --strict", "after": f"{first['without']} --strict"}})
    failed = Plan.failed(err, model=plan.model, platform=plan.platform, request=plan.request)
    return dataclasses.replace(failed, model_info=plan.model_info, rejected=plan.rejected, shared=plan.shared,
                               adjustments=plan.adjustments, warnings=plan.warnings,
                               speed_costs=plan.speed_costs, profile=plan.profile)
