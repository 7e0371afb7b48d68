"""Choices the engine makes once, before any step: the plan request (one parse), the plan,
layer specs, backends, and the KV cache's page count (its memory is checked once, by
the cache: kvcache/checks.py).

The backend is chosen (or the user's choice checked) by attnkit's planner, so the runner
refuses exactly what ``attnkit plan`` refuses, with the same codes and every reason.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Mapping

import torch

from attnkit.backends.base import AttentionBackend
from attnkit.errors import AttnkitError, fail
from attnkit.model.spec import LayerAttention
from attnkit.planning.request import PlanRequest
from attnkit.planning.run import RunSpec
from attnkit.runner.models.config import Architecture

INT32_MAX = 2**31 - 1           # block tables are int32: page ids stay below this


def check_page_count(num_pages: int, page_size: int) -> None:
    """AK483 for more KV pages than int32 block tables index (before any memory is asked)."""
    if num_pages > INT32_MAX:
        fail("AK483", f"max_tokens asks for {num_pages} KV pages of {page_size} tokens; block "
                      f"tables index at most {INT32_MAX} pages: lower max_tokens (or raise "
                      "page_size)", field="max_tokens",
             expected=f"<= {INT32_MAX * page_size} tokens", actual=num_pages * page_size)


def cache_room_error(err: AttnkitError, *, num_pages: int, page_size: int) -> AttnkitError:
    """The KV cache's memory refusal (AK431: kvcache/checks.py, the one memory-fit check) in
    the engine's terms: AK483 naming max_tokens."""
    d = err.details
    per_token = d["bytes"] // max(num_pages * page_size, 1)
    kept = f", {d['reserve'] / 2**30:.3g} GiB kept for decode graphs" if d.get("reserve") else ""
    room = max(d["free"] - d.get("reserve", 0), 0) // max(per_token, 1)
    return AttnkitError("AK483", f"max_tokens {num_pages * page_size} needs {d['bytes'] / 2**30:.3g} "
                                 f"GiB on {d['device']} for the KV cache ({per_token} bytes per token){kept}, "
                                 f"and {d['device']} has {d['free'] / 2**30:.3g} GiB free: lower "
                                 "max_tokens (or use an fp8 KV cache)", field="max_tokens",
                        expected=f"<= {room} tokens", actual=num_pages * page_size)


# The runner's keyword spellings of request fields (Engine.from_pretrained's arguments).
SPELLINGS = {"backend": "attention_backend", "prefill_backend": "prefill_attention_backend",
             "decode_backend": "decode_attention_backend"}


def runner_request(request: Any = None, **spelled: Any) -> PlanRequest:
    """The one parse of an engine's planning request: ``request`` (a PlanRequest, a dict of
    ``attnkit plan``'s settings, or None) with keyword settings over it, in the request's
    names or the runner's spellings (``backend`` for attention_backend ...; a dtype may be a
    torch dtype). None leaves a setting to the request (or unset: the planner fills it);
    AK306 on junk, as ``attnkit plan`` says it."""
    from attnkit.planning.request import parse_request

    given = {SPELLINGS.get(k, k): _spelled(v) for k, v in spelled.items() if v is not None}
    return parse_request(request, **given)


def _spelled(value: Any) -> Any:
    """A torch dtype as the request spells it (torch.bfloat16 -> "bfloat16"); else as given."""
    return str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value


def plan_for(arch: Architecture, request: PlanRequest, device: torch.device):
    """attnkit's Plan for running ``arch`` on ``device`` (raises the plan's AttnkitError if
    none: AK305 for a tp_size that does not split the heads); the request goes to the planner
    unchanged, which fills every unset setting."""
    from attnkit.planning.solver import plan

    result = plan(arch.attention, platform_of(device), request, strict=True)
    for note in result.warnings:
        warnings.warn(note, UserWarning, stacklevel=4)   # plan_for, from_pretrained, coded_args
    return result


def platform_of(device: torch.device):
    """The Platform the planner should see for ``device``: this CPU (with the packages really
    installed), or the GPU ``device`` names (its index; ``cuda`` alone: the current one)."""
    from attnkit.hardware.detect import cpu_platform, detect

    if device.type == "cpu":
        return cpu_platform()
    if device.type == "cuda":
        return detect(torch.cuda.current_device() if device.index is None else device.index)
    return detect(device.index)


def unplanned_settings(arch: Architecture, request: PlanRequest, device: torch.device):
    """(compute dtype, KV dtype) for a backend object, which no plan chooses: the request's,
    else the planner's own dtype rules (the config's dtype; the KV cache in it)."""
    from attnkit.planning.rules import config_dtype

    compute = request.dtype or config_dtype(arch.attention, platform_of(device))[0]
    return compute, request.kv_cache_dtype or compute


def backend_of(run: RunSpec, options: Mapping[str, Any] | None) -> AttentionBackend:
    """The planned backend object: one backend, or a hybrid when the run's prefill, extend
    and decode backends differ. A backend named for several roles is one object, built with
    the options the plan hands it (``run.backend_options``: its kernel tables) and the
    user's ``options``."""
    from attnkit.registry import load_backend

    if options is not None and not isinstance(options, Mapping):
        fail("AK483", f"backend_options must be a dict of keyword options, not "
                      f"{type(options).__name__}", field="backend_options",
             expected="dict[str, Any] | None", actual=repr(options))
    options = dict(options or {})

    def load(name: str) -> AttentionBackend:
        planned = run.backend_options(name)
        clash = sorted(set(planned) & set(options))
        if clash:
            fail("AK483", f"backend_options {clash} for {name!r}: the plan sets those (its kernel "
                          "tables); leave them out", field="backend_options",
                 expected=f"options other than {clash}", actual=sorted(options))
        try:
            return load_backend(name, **planned, **options)
        except TypeError as exc:           # an option the backend's constructor lacks
            fail("AK483", f"backend {name!r} does not take backend_options "
                          f"{sorted(options)}: {exc}", field="backend_options",
                 expected="the backend's keyword options", actual=sorted(options))

    names = run.backends
    prefill = names["prefill"]
    roles = {"prefill": prefill, "extend": names.get("extend", prefill),
             "decode": names.get("decode", prefill)}
    loaded = {name: load(name) for name in dict.fromkeys(roles.values())}
    if len(loaded) == 1:
        return loaded[prefill]
    from attnkit.backends.hybrid import HybridBackend

    extend = None if roles["extend"] == prefill else loaded[roles["extend"]]
    return HybridBackend(prefill=loaded[prefill], decode=loaded[roles["decode"]], extend=extend)


def model_layers(arch: Architecture, *, dual_chunk: bool) -> tuple[LayerAttention, ...]:
    """The layer specs the engine runs: without dual_chunk_attention_config when dual_chunk
    is False (plain RoPE, as transformers runs it)."""
    if not dual_chunk:
        return tuple(dataclasses.replace(l, dual_chunk=None) for l in arch.attention.layers)
    return arch.attention.layers

