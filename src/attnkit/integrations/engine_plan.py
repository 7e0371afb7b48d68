"""attnkit's plan for a model a serving engine (vLLM, SGLang) loaded, made once at its start-up.

The engine hands over what it decided (the model's Hugging Face config, its compute dtype, KV
cache dtype, page / block size, tensor-parallel size and device); ``plan_engine`` asks
``attnkit.plan`` to serve exactly that (every setting the engine fixed is an explicit request,
so the planner honours it or refuses it with its code) and loads the planned backend. The
engine's attention layers then bind to the plan's layer specs (``EnginePlan.layer``), refusing
a layer the plan does not describe (AK496). ``startup_line`` is the one line the plugins log.

``ATTNKIT_ENGINE_TEST_SCALE_ERROR`` (tests only: the engine tiers' negative control) multiplies
every bound layer's softmax scale by (1 + its value).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from attnkit.backends.base import AttentionBackend, RuntimeLayer
from attnkit.errors import fail
from attnkit.model.spec import LayerAttention
from attnkit.planning.plan import Plan
from attnkit.kvcache.paged import TORCH_KV_DTYPES, dtype_name
from attnkit.registry.capabilities import DTYPES, KV_CACHE_DTYPES, dtype_spelled
from attnkit.runner.engine.setup import backend_of, platform_of

SCALE_ERROR_ENV = "ATTNKIT_ENGINE_TEST_SCALE_ERROR"
SCALE_TOLERANCE = 1e-6          # relative: the engine's softmax scale against the spec's


@dataclass(slots=True)
class EnginePlan:
    """A plan and what running it inside ``engine`` needs. ``layers``: the plan's layer
    specs with this rank's head counts, by layer id."""
    engine: str
    plan: Plan
    backend: AttentionBackend
    layers: dict[int, LayerAttention]
    tp_size: int
    page_size: int
    kv_dtype: torch.dtype
    bound: dict[int, RuntimeLayer] = field(default_factory=dict)

    def check(self, layer_id: int, *, num_heads: int, num_kv_heads: int, head_size: int,
              scale: float, sliding_window: int | None, softcap: float | None,
              sinks: Any = None) -> LayerAttention:
        """The spec of the engine's layer ``layer_id``, whose attention the engine built with
        these arguments; AK496 where they are not what the plan was made for."""
        spec = self.layers.get(layer_id)
        if spec is None:
            fail("AK496", f"{self.engine}: attention layer {layer_id} is not one of the layers "
                          f"attnkit planned ({sorted(self.layers)})", field="layer_id",
                 expected=sorted(self.layers), actual=layer_id)
        check_layer(self.engine, spec, num_heads=num_heads, num_kv_heads=num_kv_heads,
                    head_size=head_size, scale=scale, sliding_window=sliding_window,
                    softcap=softcap, sinks=sinks is not None)
        return spec

    def layer(self, layer_id: int, **args: Any) -> RuntimeLayer:
        """``check``, then the layer's RuntimeLayer (one per layer id)."""
        spec = self.check(layer_id, **args)
        found = self.bound.get(layer_id)
        if found is None:
            error = float(os.environ.get(SCALE_ERROR_ENV, "0") or 0)
            if error:
                spec = dataclasses.replace(spec, scale=spec.softmax_scale * (1 + error))
            found = self.bound[layer_id] = RuntimeLayer(spec=spec, sinks=args.get("sinks"))
        return found


def plan_engine(hf_config: Mapping[str, Any], *, engine: str, name: str, device: torch.device,
                dtype: torch.dtype, kv_cache_dtype: str | None, page_size: int,
                tp_size: int = 1, request: Mapping[str, Any] | None = None) -> EnginePlan:
    """Plan the model ``hf_config`` (config.json as a dict) as ``engine`` runs it; raises the
    planner's AttnkitError (its code, every reason) when nothing can serve it."""
    from attnkit.model import parse_config
    from attnkit.planning.solver import plan

    kv_name = engine_kv_dtype(engine, kv_cache_dtype)
    compute = dtype_name(dtype)
    if compute not in DTYPES:
        fail("AK496", f"{engine}: the model computes in {dtype}; attnkit backends compute in "
                      f"{', '.join(DTYPES)}", field="dtype", expected=list(DTYPES), actual=str(dtype))
    spec = parse_config(dict(hf_config), name=name)
    asked = {"dtype": compute, "page_size": page_size,
             "kv_cache_dtype": kv_name or compute,
             "tp_size": tp_size if tp_size > 1 else None, **dict(request or {})}
    if any(l.dual_chunk is not None for l in spec.layers):
        asked["dual_chunk"] = "off"        # the engines run plain RoPE attention here
    result = plan(spec, platform_of(torch.device(device)), {k: v for k, v in asked.items()
                                                           if v is not None}, strict=True)
    run = result.run
    return EnginePlan(engine=engine, plan=result, backend=backend_of(run, None),
                      layers={l.layer_id: per_rank(l, run.tp_size) for l in spec.layers},
                      tp_size=run.tp_size, page_size=run.page_size,
                      kv_dtype=TORCH_KV_DTYPES[run.kv_cache_dtype])


def engine_kv_dtype(engine: str, name: str | None) -> str | None:
    """An engine's KV-cache dtype name in attnkit's spelling (the vocabulary's table, which
    reads vLLM's "bfloat16" and "fp8" as `attnkit plan` does); None for the engines' "auto"
    (the compute dtype); AK496 for a name with no attnkit equivalent."""
    if name is None or name == "auto":
        return None
    spelled = dtype_spelled(name) if isinstance(name, str) else None
    if spelled not in KV_CACHE_DTYPES:
        fail("AK496", f"{engine}: KV cache dtype {name!r} has no attnkit equivalent",
             field="kv_cache_dtype", expected=["auto", *KV_CACHE_DTYPES], actual=name)
    return spelled


def per_rank(spec: LayerAttention, tp_size: int) -> LayerAttention:
    """The layer as one of ``tp_size`` ranks holds it: query heads split, KV heads split or,
    when fewer than the ranks, one replicated per rank (the engines' rule)."""
    if tp_size <= 1:
        spec = dataclasses.replace(spec, dual_chunk=None) if spec.dual_chunk is not None else spec
        return spec
    return dataclasses.replace(spec, num_heads=spec.num_heads // tp_size, dual_chunk=None,
                               num_kv_heads=max(1, spec.num_kv_heads // tp_size))


def check_layer(engine: str, spec: LayerAttention, *, num_heads: int, num_kv_heads: int,
                head_size: int, scale: float, sliding_window: int | None, softcap: float | None,
                sinks: bool) -> None:
    """AK496 unless the engine's layer arguments are the spec's (per rank)."""
    want = {"num_heads": spec.num_heads, "num_kv_heads": spec.num_kv_heads,
            "head_size": spec.head_dim, "sliding_window": spec.sliding_window,
            "softcap": spec.logit_softcap or None, "sinks": spec.sinks}
    got = {"num_heads": num_heads, "num_kv_heads": num_kv_heads, "head_size": head_size,
           "sliding_window": sliding_window if sliding_window not in (None, -1, 0) else None,
           "softcap": softcap or None, "sinks": bool(sinks)}
    differ = [k for k in want if want[k] != got[k]]
    if abs(scale - spec.softmax_scale) > SCALE_TOLERANCE * spec.softmax_scale:
        differ.append("scale")
        want["scale"], got["scale"] = spec.softmax_scale, scale
    if differ:
        fail("AK496", f"{engine} builds layer {spec.layer_id} with "
                      + ", ".join(f"{k}={got[k]!r}" for k in differ) + "; attnkit planned "
                      + ", ".join(f"{k}={want[k]!r}" for k in differ)
                      + " from the model's config (attnkit runs only what it planned)",
             field=f"layers[{spec.layer_id}]", expected={k: want[k] for k in differ},
             actual={k: got[k] for k in differ})


def startup_line(ep: EnginePlan, *, engine_settings: Mapping[str, Any]) -> str:
    """The one line logged at start-up: what attnkit runs per role (backend and, where the
    backend has variants, its kernels: ``Plan.run``), with which settings, for what the
    engine asked (``engine_settings``: its own names and values)."""
    run = ep.plan.run
    roles = " ".join(f"{r.role}={r.backend}" + (f"[{','.join(r.kernels.variants())}]"
                                                  if r.kernels is not None else "")
                     for r in run.roles)
    asked = " ".join(f"{k}={v}" for k, v in engine_settings.items())
    return (f"attnkit plan for {ep.plan.model} on {run.device.name}: {roles}; "
            f"page_size={run.page_size} kv_cache_dtype={run.kv_cache_dtype} dtype={run.dtype} "
            f"tp_size={run.tp_size} ({ep.engine}: {asked})")
