"""Plan a model of several components (a diffusers pipeline, a VLM): ``plan()`` per component.

Each component with attention is planned on its own by the whole-model solver, with the tokens
of one call as its prefill workload; the parts without attention are listed with why, and a
refused part keeps its coded error. A component may run only on a set of backends (its
supported set, as SGLang's multimodal_gen selector has them per layer): a backend named outside
the set is AK140, naming the set; a set of one is chosen with that as the reason; and a chosen
backend that exists but has no kernel here for the head size or dtype is AK141, with the
backends of the set that do. cuDNN / flash / efficient SDPA names count as ``sdpa``.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from attnkit.errors import AttnkitError
from attnkit.model.components import Component, Pipeline, SupportedSet
from attnkit.planning.plan import SCHEMA_VERSION, Plan
from attnkit.planning.request import BACKEND_FIELDS, PlanRequest, parse_request
from attnkit.registry.capabilities import BackendDeclaration

# torch SDPA's kernels, as other engines name them: each is attnkit's sdpa backend
SDPA_KERNELS = ("cudnn", "cudnn_sdpa", "cudnn_attention", "sdpa_cudnn", "flash_sdpa", "sdpa_flash",
                "efficient_sdpa", "mem_efficient_sdpa", "math_sdpa")
# reasons that say "this backend has no kernel here for this head size / dtype"
NO_KERNEL = {"AK102", "AK105", "AK210", "AK211"}


@dataclass
class ComponentPlan:
    component: Component
    plan: Plan | None = None
    error: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    supported: SupportedSet | None = None       # the set it was planned within (its own or derived)

    @property
    def ok(self) -> bool:
        return self.component.plain is not None or (self.plan is not None and self.plan.ok and self.error is None)

    def to_dict(self) -> dict[str, Any]:
        c = self.component
        planned = self.plan is not None and self.error is None
        why_not = c.plain if c.plain else None if planned else (self.error or {}).get("message")
        return {**c.to_dict(), "planned": planned, "ok": self.ok, "why_not": why_not,
                "supported_backends": list(self.supported.backends) if self.supported else None,
                "plan": self.plan.to_dict() if self.plan is not None else None, "error": self.error,
                "notes": [*c.notes, *self.notes]}


@dataclass
class PipelinePlan:
    pipeline: Pipeline
    platform: dict[str, Any] | None
    components: list[ComponentPlan]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.components)

    def to_dict(self) -> dict[str, Any]:
        p = self.pipeline
        used: dict[str, int] = {}
        for c in p.components:     # the inputs each component was planned for, defaults filled in
            used.update(c.workload.inputs if c.role == "denoiser" and c.workload else {})
        return {"schema": SCHEMA_VERSION, "kind": "components", "ok": self.ok, "model": p.name,
                "class": p.class_name, "source": p.source, "platform": self.platform,
                "inputs": {**used, **p.inputs.given()}, "notes": list(p.notes),
                "components": [c.to_dict() for c in self.components]}


def _as_pipeline(source: Any) -> Pipeline:
    if isinstance(source, Pipeline):
        return source
    from attnkit.model.loader import load_model
    from attnkit.model.pipeline import load_components

    pipe = load_components(source) if isinstance(source, (str, os.PathLike)) else None
    if pipe is not None:
        return pipe
    if isinstance(source, (str, os.PathLike)):
        load_model(source)             # an unreadable name or path: the loader's own code (AK507, AK500 ...)
    raise AttnkitError(
        "AK511", f"plan_components plans a pipeline (a Pipeline from load_components, a pipeline preset "
        f"name or directory), not {_shown(source)}; plan a model of one part with attnkit.plan",
        field="pipeline", expected="Pipeline | pipeline preset name | pipeline directory",
        actual=_shown(source), solutions=["attnkit.plan(model, platform) for a model of one part",
                                          "plan_components(load_components(source), platform)"])


def _shown(source: Any) -> str:
    return repr(os.fsdecode(source))[:120] if isinstance(source, (str, os.PathLike)) else type(source).__name__


def plan_components(pipeline: Pipeline | str | os.PathLike, platform: Any = "auto", request: Any = None, *,
                    registry: Mapping[str, BackendDeclaration] | None = None,
                    env: Mapping[str, str] | None = None, label: str | None = None, **kw: Any) -> PipelinePlan:
    """Every component of ``pipeline`` (model/pipeline.py's ``load_components``), each planned
    by ``plan()`` with ``request``; AK306 for junk settings, as ``plan()``. ``pipeline`` may
    also be a pipeline preset name or directory (read by ``load_components``); a model of one
    part, or anything else, is AK511 (plan it with ``attnkit.plan``)."""
    from attnkit.planning.solver import _platform, plan

    pipeline = _as_pipeline(pipeline)

    req = parse_request(request)
    env = os.environ if env is None else env
    if not req.attention_backend and (env.get("ATTNKIT_ATTENTION_BACKEND") or "").strip().lower() not in ("", "auto"):
        req = req.with_values("env", attention_backend=env["ATTNKIT_ATTENTION_BACKEND"].strip())
    target = _platform(platform)
    if registry is None:               # the shipped declarations: plan() then ranks by the device's profile
        from attnkit.registry import declarations
        registry = declarations()
    else:                              # a custom registry is not what the profile timed (plan())
        kw = {**kw, "registry": registry}
    out = []
    for comp in pipeline.components:
        if comp.attention is None:
            error = comp.error.to_dict() if comp.error is not None else None
            out.append(ComponentPlan(comp, error=error))
            continue
        out.append(_plan_one(comp, target, req, registry, env, label or pipeline.name, plan, kw))
    return PipelinePlan(pipeline, target.to_dict(), out)


def supported_set(comp: Component, registry: Mapping[str, BackendDeclaration]) -> SupportedSet | None:
    """The component's own set, or one derived from the declarations for layers that run as
    packed sequences without a KV cache (a vision tower's windows): the backends declaring varlen."""
    if comp.supported is not None:
        return comp.supported
    if comp.role == "vision_tower" and comp.workload is not None and comp.workload.sequence:
        names = tuple(n for n, d in registry.items() if "varlen" in d.capabilities.features)
        return SupportedSet(names, "its layers attend within packed sequences (windows, frames) and keep no "
                                   "KV cache: the backends with the varlen call (packed cu_seqlens) serve them")
    return None


def _plan_one(comp: Component, target, req: PlanRequest, registry, env, label: str, plan, kw) -> ComponentPlan:
    notes: list[str] = []
    for f in BACKEND_FIELDS:              # cuDNN / flash SDPA names are sdpa, in every backend flag
        given = getattr(req, f)
        if given and given.strip().lower().replace("-", "_") in SDPA_KERNELS and "sdpa" in registry:
            notes.append(f"{given} is one of torch SDPA's kernels: counted as sdpa")
            req = dataclasses.replace(req, **{f: "sdpa"})
    named = req.prefill_attention_backend or req.attention_backend   # components run prefill-like steps
    allowed = supported_set(comp, registry)
    why_single = None
    if allowed is not None:
        for given in dict.fromkeys(getattr(req, f) for f in BACKEND_FIELDS if getattr(req, f)):
            canonical = _canonical(given, registry)
            if canonical is not None and canonical not in allowed.backends:
                return ComponentPlan(comp, error=_outside(comp, given, allowed).to_dict(), notes=notes,
                                     supported=allowed)
        if not allowed.backends:
            return ComponentPlan(comp, error=_outside(comp, named, allowed).to_dict(), notes=notes,
                                 supported=allowed)
        if not named and len(allowed.backends) == 1:
            only = allowed.backends[0]
            req = req.with_values("rule", attention_backend=only)
            named, why_single = only, f"the only backend {comp.name} supports ({allowed.why})"
        elif not named:
            deny = tuple(n for n in registry if n not in allowed.backends and n not in req.deny)
            req = dataclasses.replace(req, deny=req.deny + deny)
            if deny:
                notes.append(f"supported set {', '.join(allowed.backends)}: {allowed.why}")
    workload = None
    if comp.workload is not None:
        workload = {"prefill": {"batch": 1, "new": comp.workload.tokens, "context": comp.workload.tokens}}
    result = plan(comp.attention, target, req, env={**env, "ATTNKIT_ATTENTION_BACKEND": ""},
                  label=f"{label}", workload=workload, **kw)
    if why_single and result.ok:
        result.why["prefill"] = why_single
    if not result.ok and named:
        canonical = _canonical(named, registry)
        reasons = result.rejected.get(canonical, [])
        if reasons and {r.code for r in reasons} <= NO_KERNEL:
            err = _no_kernel(comp, canonical, reasons, allowed, target, req, registry, plan, kw)
            return ComponentPlan(comp, plan=result, error=err.to_dict(), notes=notes, supported=allowed)
    return ComponentPlan(comp, plan=result, notes=notes, supported=allowed)


def _canonical(name: str, registry) -> str | None:
    from attnkit.registry import names
    try:
        return names.resolve(name, registry)[0]
    except AttnkitError:
        return None            # plan() reports the unknown name with its own code


def _outside(comp: Component, named: str | None, allowed: SupportedSet) -> AttnkitError:
    if not allowed.backends:
        return AttnkitError("AK140", f"{comp.name} ({comp.class_name}) is supported by no registered backend: "
                            f"{allowed.why}, and none is registered", field="attention_backend",
                            expected=[], actual=named, details={"component": comp.name, "supported": []})
    return AttnkitError("AK140", f"attention backend {named!r} is not supported by {comp.name} ({comp.class_name}); "
                        f"supported backends: [{', '.join(allowed.backends)}] ({allowed.why})",
                        field="attention_backend", expected=list(allowed.backends), actual=named,
                        solutions=[f"name one of {', '.join(allowed.backends)}",
                                   "omit --attention-backend: each component gets the first of its set that serves it"],
                        details={"component": comp.name, "supported": list(allowed.backends)})


def _no_kernel(comp, name, reasons, allowed, target, req, registry, plan, kw) -> AttnkitError:
    """AK141: which other backends (of the set, or of the registry) do have the kernel here."""
    pool = allowed.backends if allowed is not None else tuple(registry)
    serving = []
    for other in pool:
        if other == name:
            continue
        trial = plan(comp.attention, target, dataclasses.replace(req, attention_backend=other, deny=()),
                     registry=registry, env={}, profile=False)
        if trial.ok:
            serving.append(other)
    dims = sorted({l.head_dim for l in comp.attention.layers})
    what = "; ".join(r.message for r in reasons)
    fix = (f"use {' or '.join(serving)}, which serve{'s' if len(serving) == 1 else ''} {comp.name} here"
           if serving else "no backend of the set has a kernel here: plan for another device or dtype")
    return AttnkitError("AK141", f"no implementation of {name} on {target.name} for {comp.name}'s head size "
                        f"{'/'.join(map(str, dims))} and dtype: {what}", field="attention_backend",
                        expected=serving, actual=name, solutions=[fix, "omit --attention-backend"],
                        details={"component": comp.name, "serving": serving})
