"""A finished planning run as a ``Plan``: what was chosen and why, or the error with its fix.

Every backend the run considered keeps all its reasons in ``Plan.rejected``; causes every
rejected backend shares (a missing package) are also listed once, in ``Plan.shared``.
"""
from __future__ import annotations

from typing import Any

from attnkit.errors import AttnkitError
from attnkit.model.summary import model_info
from attnkit.planning.plan import Plan
from attnkit.planning.reasons import Reason, merge
from attnkit.planning.run import run_spec
from attnkit.planning.view import View


def build_plan(v: View, error: AttnkitError | None, *, table, adjustments: list[dict[str, Any]],
               warnings: list[str], alternatives: dict[str, list[str]],
               kernels: dict[str, Any] | None = None, kernel_why: dict[str, str] | None = None) -> Plan:
    """The Plan of a finished run: chosen backends and why (when ``error`` is None), settings,
    adjustments, every considered candidate's reasons, and the causes all of them share."""
    considered = {n for e in table for n in e.backends} | set(v.explicit.values()) | set(v.backends.values())
    rejected: dict[str, list[Reason]] = {}
    for name in v.registry:
        if name not in considered or (v.registry[name].explicit_only and name not in v.explicit.values()):
            continue
        reasons = merge([r for p in v.phases if v.backends.get(p) != name for r in v.reasons(p, name)])
        if reasons:
            rejected[name] = reasons
    shared: list[Reason] = []
    if len(rejected) >= 2:
        common = set.intersection(*({r.key() for r in rs} for rs in rejected.values()))
        shared = [r for r in next(iter(rejected.values())) if r.key() in common]
    ok = error is None
    settings = dict(v.settings)
    if ok:
        settings["kv_layout"] = "latent" if v.model.kind == "mla" else "per_head_kv"
    return Plan(
        ok=ok, model=v.model.name, platform=_platform_dict(v.platform), request=v.typed.to_dict(),
        model_info=model_info(v.model),
        prefill_backend=v.backends["prefill"] if ok else None, decode_backend=v.backends["decode"] if ok else None,
        extend_backend=(v.backends["extend"] or v.backends["prefill"]) if ok else None,
        why=dict(v.why) if ok else {}, settings=settings, adjustments=adjustments, rejected=rejected,
        shared=shared, alternatives=alternatives if ok else {}, warnings=warnings,
        error=None if ok else error_dict(error, v),
        kernel_why=dict(kernel_why or {}) if ok else {},
        run=run_spec(v.backends, settings, v.platform, kernels or {}, has_decode="decode" in v.phases)
        if ok else None)


def error_dict(err: AttnkitError, v: View) -> dict[str, Any]:
    """The error as JSON; its example fix is always the user's own command (never a catalog example)."""
    d = err.to_dict()
    fix = d["details"].pop("example_fix", None)
    if fix is not None and v.env_used:
        # the environment took part: show it in "before"; if only it differs, unsetting is the fix
        if fix["before"] == fix["after"]:
            fix["after"] = f"unset {' '.join(v.env_used)}; {fix['after']}"
        env = " ".join(f"{k}={val}" for k, val in v.env_used.items())
        fix["before"] = f"{env} {fix['before']}"
    d["example_fix"] = fix if fix is None or fix["before"] != fix["after"] else None
    return d


def _platform_dict(platform) -> dict[str, Any]:
    d = dict(platform.to_dict()) if hasattr(platform, "to_dict") else {
        "kind": platform.kind, "name": platform.name, "packages": dict(platform.packages or {})}
    d["capability"] = list(platform.capability) if platform.capability is not None else None
    return d
