"""``Plan``: what the solver decided, why, and what it rejected; ``to_dict()`` is the stable JSON.

The JSON shape is documented in docs/plan-json.md; ``attnkit plan --json`` prints exactly it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnkit.errors import AttnkitError
from attnkit.planning.reasons import Reason
from attnkit.planning.run import RunSpec

SCHEMA_VERSION = 1


@dataclass
class Plan:
    ok: bool
    model: str | None
    model_info: dict[str, Any] | None
    platform: dict[str, Any] | None
    request: dict[str, Any] | None
    prefill_backend: str | None = None
    decode_backend: str | None = None
    # the backend of steps over a cached prefix (extends, MIXED, VERIFY); prefill_backend then
    # runs fresh prefills only. Equal to prefill_backend when one backend runs all of them.
    extend_backend: str | None = None
    why: dict[str, str] = field(default_factory=dict)            # phase (or "extend") -> why this backend
    settings: dict[str, Any] = field(default_factory=dict)
    adjustments: list[dict[str, Any]] = field(default_factory=list)
    rejected: dict[str, list[Reason]] = field(default_factory=dict)
    shared: list[Reason] = field(default_factory=list)           # causes every rejected candidate shares
    alternatives: dict[str, list[str]] = field(default_factory=dict)  # phase -> also serves, in order
    warnings: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None                         # the device profile used, if any
    # explicit settings that move a role to a backend the profile measures >= 1.5x slower
    # (planning/speed_cost.py): {flag, field, role, backend, rate, instead, instead_rate, unit, ...}
    speed_costs: list[dict[str, Any]] = field(default_factory=list)
    run: RunSpec | None = None                                     # what runs (None when not ok)
    kernel_why: dict[str, str] = field(default_factory=dict)      # role -> its kernel variants, as measured
    # --require: {"require": [names], "cost": {phase: requirements.cost(...)}}; None without it
    requirements: dict[str, Any] | None = None

    @classmethod
    def failed(cls, err: AttnkitError, *, model: str | None = None, platform: dict[str, Any] | None = None,
               request: dict[str, Any] | None = None) -> "Plan":
        """A plan that failed before planning (the model, device or settings could not be read):
        the same JSON shape, with ``model_info`` (and ``platform`` / ``request`` when unread) null."""
        error = err.to_dict()
        error["example_fix"] = error["details"].pop("example_fix", None)
        return cls(ok=False, model=model, model_info=None, platform=platform, request=request, error=error)

    def raise_for_error(self) -> "Plan":
        """Raise the plan's error as an ``AttnkitError`` when ``ok`` is false; return self otherwise."""
        if not self.ok and self.error is not None:
            e = self.error
            raise AttnkitError(e["code"], e["message"], field=e.get("field"), expected=e.get("expected"),
                               actual=e.get("actual"), solutions=e.get("solutions"),
                               details={"example_fix": e.get("example_fix"), "plan": self.to_dict()})
        return self

    def render(self, *, short: bool = False) -> str:
        """The plan as ``attnkit plan`` prints it (``short``: backends, settings and warnings)."""
        from attnkit.planning.render import plan_text    # render imports this module

        return plan_text(self, short=short)

    def __str__(self) -> str:
        return self.render()

    def to_dict(self) -> dict[str, Any]:
        shared_keys = {r.key() for r in self.shared}
        return {
            "schema": SCHEMA_VERSION,
            "ok": self.ok,
            "model": self.model,
            "model_info": self.model_info,
            "platform": self.platform,
            "request": self.request,
            "prefill_backend": self.prefill_backend,
            "decode_backend": self.decode_backend,
            "extend_backend": self.extend_backend,
            "why": dict(self.why),
            "kernel_why": dict(self.kernel_why),
            "settings": dict(self.settings),
            "adjustments": [dict(a) for a in self.adjustments],
            "rejected": {name: [{**r.to_dict(), "shared": r.key() in shared_keys} for r in reasons]
                         for name, reasons in self.rejected.items()},
            "shared_reasons": [{k: v for k, v in r.to_dict().items() if k != "backend"} for r in self.shared],
            "alternatives": {k: list(v) for k, v in self.alternatives.items()},
            "warnings": list(self.warnings),
            "error": self.error,
            "profile": self.profile,
            "speed_costs": [dict(c) for c in self.speed_costs],
            "run": None if self.run is None else self.run.to_dict(),
            "requirements": self.requirements,
        }
