"""Plans for transformers models: one per (config, device, dtype), made by ``attnkit.plan``.

A model's attention modules share its config object, so the plan lives in a ``ModelState``
kept per config (looked up by identity; nothing is stored on the config itself, which
transformers serialises). The state holds the override flags the model was planned with,
one ``Planned`` per device and dtype the model has run in, and the dense-step layouts of the
current forward pass. The planner, the platform of a torch device and the backend objects
come from the same helpers the runner uses (``attnkit.runner.engine.setup``).
"""
from __future__ import annotations

import dataclasses
import threading
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from attnkit.backends.base import AttentionBackend
from attnkit.errors import fail
from attnkit.integrations.dense_step import DenseLayout
from attnkit.kvcache.paged import TORCH_KV_DTYPES, dtype_name
from attnkit.model.spec import LayerAttention, ModelAttention
from attnkit.planning.plan import Plan
from attnkit.planning.request import parse_request
from attnkit.registry.capabilities import DTYPES
from attnkit.runner.engine.setup import backend_of, platform_of

# The planning settings a transformers user may set (as on `attnkit plan`); the compute
# dtype is the model's own and there is no tensor parallelism or speculation here.
FLAGS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
         "page_size", "kv_cache_dtype", "deny", "backend_options")
_LAYOUTS_KEPT = 8      # full + sliding masks of a forward, with room for a few shapes


def check_flags(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The flags without unset values; AK306 for an unknown flag or a bad value (the
    planner's own request check)."""
    unknown = sorted(set(flags) - set(FLAGS))
    if unknown:
        hint = (" (the compute dtype is the model's: from_pretrained(..., dtype=...))"
                if "dtype" in unknown else "")
        fail("AK306", f"unknown attnkit setting(s) {', '.join(unknown)} for transformers models; "
                      f"settable: {', '.join(FLAGS)}{hint}", field="flags", expected=list(FLAGS),
             actual=unknown)
    out = {k: v for k, v in flags.items() if v is not None}
    options = out.get("backend_options")
    if options is not None and not isinstance(options, Mapping):
        fail("AK306", f"backend_options must be a dict of backend keyword options, not "
                      f"{type(options).__name__}", field="backend_options", expected="dict",
             actual=type(options).__name__)
    parse_request({k: v for k, v in out.items() if k != "backend_options"})
    return out


@dataclass(slots=True)
class Planned:
    """A plan and what running it needs. ``layers`` are the config's layer specs as
    transformers computes them (plain RoPE: no dual chunk attention)."""
    plan: Plan
    backend: AttentionBackend
    layers: tuple[LayerAttention, ...]
    device: torch.device
    dtype: torch.dtype
    page_size: int
    kv_dtype: torch.dtype


def plan_config(config: Any, *, device: torch.device, dtype: torch.dtype,
                flags: Mapping[str, Any]) -> Planned:
    """Plan the model ``config`` (a transformers PretrainedConfig) describes for ``device`` and
    compute ``dtype``; raises the planner's AttnkitError when nothing can serve it."""
    from attnkit.planning.solver import plan

    spec = _parse(config)
    _check_servable(spec)
    plain = {"dual_chunk": "off"} if any(l.dual_chunk is not None for l in spec.layers) else {}
    # the one parse of this plan's request: transformers runs plain RoPE attention (_plain)
    request = parse_request({k: v for k, v in flags.items() if k != "backend_options"},
                            dtype=_dtype_name(dtype), **plain)
    result = plan(spec, platform_of(device), request, strict=True)
    for note in result.warnings:
        warnings.warn(f"attnkit ({spec.name}): {note}", UserWarning, stacklevel=4)
    run = result.run
    return Planned(plan=result, backend=backend_of(run, flags.get("backend_options")),
                   layers=_plain(spec), device=device, dtype=dtype, page_size=run.page_size,
                   kv_dtype=TORCH_KV_DTYPES[run.kv_cache_dtype])


def config_layers(config: Any) -> tuple[LayerAttention, ...]:
    """The layer specs of a transformers config as transformers runs them."""
    return _plain(_parse(config))


def _parse(config: Any) -> ModelAttention:
    from attnkit.model import parse_config

    name = getattr(config, "name_or_path", "") or getattr(config, "model_type", "") or "model"
    return parse_config(config.to_dict(), name=str(name))


def _plain(spec: ModelAttention) -> tuple[LayerAttention, ...]:
    """The layers without dual_chunk_attention_config, which transformers ignores (it runs
    plain RoPE attention)."""
    return tuple(dataclasses.replace(l, dual_chunk=None) if l.dual_chunk is not None else l
                 for l in spec.layers)


def _check_servable(spec: ModelAttention) -> None:
    """AK490 for layers transformers does not hand over as plain causal self-attention."""
    odd = [l for l in spec.layers if l.kind != "mha" or l.role != "decoder"]
    if odd:
        l = odd[0]
        what = "MLA" if l.kind == "mla" else f"{l.role} attention"
        fail("AK490", f"{spec.name}: layer {l.layer_id} is {what}; attn_implementation='attnkit' "
                      "serves decoder self-attention (MHA/GQA/MQA) only",
             field=f"layers[{l.layer_id}]", expected="kind mha, role decoder",
             actual={"kind": l.kind, "role": l.role})


def _dtype_name(dtype: torch.dtype) -> str:
    """The vocabulary's name of the compute dtype the model runs in (AK490 for one no attnkit
    backend computes in)."""
    name = dtype_name(dtype)
    if name not in DTYPES:
        fail("AK490", f"the model computes in {dtype}; attnkit backends compute in "
                      f"{', '.join(DTYPES)}", field="dtype", expected=list(DTYPES), actual=str(dtype))
    return name


def device_key(device: torch.device) -> torch.device:
    """'cuda' means the current CUDA device: plans are per physical device."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class ModelState:
    """One model config's flags, plans and current layouts."""

    def __init__(self, flags: Mapping[str, Any]):
        self.flags = dict(flags)
        self.plans: dict[tuple, Planned] = {}
        self.current: Planned | None = None
        self._layouts: OrderedDict[tuple, tuple[Any, DenseLayout]] = OrderedDict()
        # One model may run in several threads at once (a server): plans and the layout
        # cache change under this lock.
        self._lock = threading.RLock()

    def planned(self, config: Any, device: torch.device, dtype: torch.dtype) -> Planned:
        """The plan for ``device`` and ``dtype``, made on first use."""
        device = device_key(device)
        key = (device.type, device.index, dtype)
        with self._lock:
            found = self.plans.get(key)
            if found is None:
                found = self.plans[key] = plan_config(config, device=device, dtype=dtype,
                                                      flags=self.flags)
            self.current = found
        return found

    def layout(self, mask: torch.Tensor | None, *, batch: int, q_len: int, kv_len: int,
               window: int | None, planned: Planned, device: torch.device) -> DenseLayout:
        """The layout of ``mask``, shared by every layer handed the same mask object."""
        key = (None if mask is None else id(mask), batch, q_len, kv_len, window,
               planned.page_size, str(device))
        with self._lock:
            hit = self._layouts.get(key)
            if hit is not None and (mask is None or hit[0]() is mask):
                self._layouts.move_to_end(key)
                return hit[1]
            made = DenseLayout.of(mask, batch=batch, q_len=q_len, kv_len=kv_len, window=window,
                                  page_size=planned.page_size, device=device)
            self._layouts[key] = (None if mask is None else weakref.ref(mask), made)
            while len(self._layouts) > _LAYOUTS_KEPT:
                self._layouts.popitem(last=False)
        return made


_STATES: dict[int, tuple[weakref.ref, ModelState]] = {}
DEFAULT_FLAGS: dict[str, Any] = {}     # register(**flags): for models planned from then on


def state_of(config: Any, *, create: bool = True) -> ModelState | None:
    """The ModelState of ``config``; a new one (with DEFAULT_FLAGS) if it has none."""
    hit = _STATES.get(id(config))
    if hit is not None and hit[0]() is config:
        return hit[1]
    return install(config, ModelState(DEFAULT_FLAGS)) if create else None


def install(config: Any, state: ModelState) -> ModelState:
    """Make ``state`` the ModelState of ``config`` (replacing its plans)."""
    key = id(config)
    _STATES[key] = (weakref.ref(config, lambda _ref, k=key: _STATES.pop(k, None)), state)
    return state


__all__ = ["FLAGS", "DEFAULT_FLAGS", "ModelState", "Planned", "check_flags", "plan_config",
           "config_layers", "state_of", "install"]
