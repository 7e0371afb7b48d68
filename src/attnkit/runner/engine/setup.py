"""Choices the engine makes once, before any step: the plan, layer specs, backends, and
whether the KV cache (and the decode graphs' memory) fits.

The backend is chosen (or the user's choice checked) by attnkit's planner, so the runner
refuses exactly what ``attnkit plan`` refuses, with the same codes and every reason.
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Mapping

import torch

from attnkit.backends.base import AttentionBackend
from attnkit.errors import fail
from attnkit.model.spec import LayerAttention
from attnkit.runner.models.config import Architecture

INT32_MAX = 2**31 - 1           # block tables are int32: page ids stay below this
PAGE_LIST_BYTES = 64            # host bytes per page of the allocator's free list (deque + int)


def check_cache_room(layers, *, num_pages: int, page_size: int, kv_dtype: torch.dtype,
                     device: torch.device, reserve: int = 0) -> None:
    """AK483 before allocating a KV cache that cannot be: more pages than int32 block
    tables index, or more bytes (the cache on ``device``, the page list on the host, and
    ``reserve`` bytes kept for the decode graphs) than the memory free there."""
    if num_pages > INT32_MAX:
        fail("AK483", f"max_tokens asks for {num_pages} KV pages of {page_size} tokens; block "
                      f"tables index at most {INT32_MAX} pages: lower max_tokens (or raise "
                      "page_size)", field="max_tokens",
             expected=f"<= {INT32_MAX * page_size} tokens", actual=num_pages * page_size)
    elem = torch.empty((), dtype=kv_dtype).element_size()
    per_token = sum(l.mla.latent_dim if l.kind == "mla" else
                    l.num_kv_heads * (l.head_dim + l.value_dim) for l in layers) * elem
    cache = num_pages * page_size * per_token
    host = num_pages * PAGE_LIST_BYTES
    needs = [(device, cache + reserve + (host if device.type == "cpu" else 0))]
    if device.type != "cpu":
        needs.append((torch.device("cpu"), host))
    for dev, need in needs:
        free = free_memory(dev)
        if free is not None and need > free:
            fail("AK483", f"max_tokens {num_pages * page_size} needs {need / 2**30:.3g} GiB on "
                          f"{dev} for the KV cache ({per_token} bytes per token over "
                          f"{len(layers)} layers) and its page list"
                          + (f", {reserve / 2**30:.3g} GiB kept for decode graphs" if reserve else "")
                          + f", and {dev} has "
                          f"{free / 2**30:.3g} GiB free: lower max_tokens (or use an fp8 KV cache)",
                 field="max_tokens", expected=f"<= {free // max(per_token, 1)} tokens",
                 actual=num_pages * page_size)


def free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device`` now (CUDA: the driver's count; CPU: the OS's available
    memory), None where it cannot be told."""
    if device.type == "cuda":
        try:
            return torch.cuda.mem_get_info(device)[0]
        except (RuntimeError, AssertionError):
            return None
    if device.type == "cpu":
        try:                            # Linux: free memory plus what the kernel can reclaim
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, OSError, ValueError):
            return None
    return None


def plan_for(arch: Architecture, *, backend: str | None, device: torch.device,
             page_size: int | None, dtype: str, kv_cache_dtype: str, dual_chunk: bool | None,
             prefill_backend: str | None = None, decode_backend: str | None = None,
             cuda_graph: bool | None = None, tp_size: int = 1, require: tuple[str, ...] = ()):
    """attnkit's Plan for running ``arch`` here (raises the plan's AttnkitError if none:
    AK305 for a tp_size that does not split the heads); cuda_graph None lets the planner
    decide (--cuda-graph auto); ``require``: numerics every chosen backend declares (--require)."""
    from attnkit.planning.solver import plan

    if backend is not None and not isinstance(backend, str):
        fail("AK483", f"backend must be a backend name, 'auto', or an AttentionBackend, not "
                      f"{type(backend).__name__}", field="backend", expected="str | AttentionBackend",
             actual=type(backend).__name__)
    request = {"page_size": page_size, "dtype": dtype, "kv_cache_dtype": kv_cache_dtype,
               "attention_backend": backend, "prefill_attention_backend": prefill_backend,
               "decode_attention_backend": decode_backend,
               "dual_chunk": None if dual_chunk is None else ("on" if dual_chunk else "off"),
               "cuda_graph": cuda_graph, "tp_size": tp_size if tp_size > 1 else None,
               "require": list(require) or None}
    request = {k: v for k, v in request.items() if v is not None}
    result = plan(arch.attention, platform_of(device), request, strict=True)
    for note in result.warnings:
        warnings.warn(note, UserWarning, stacklevel=4)   # plan_for, from_pretrained, coded_args
    return result


def platform_of(device: torch.device):
    """The Platform the planner should see for ``device``: this CPU (with the packages really
    installed), or the GPU torch sees first."""
    from attnkit.hardware.detect import detect, host_arch, installed_packages
    from attnkit.hardware.platform import Platform

    if device.type == "cpu":
        arch = host_arch()
        return Platform(kind="cpu", name=f"{arch} CPU", packages=installed_packages(), arch=arch)
    return detect()


def backend_of(result, options: Mapping[str, Any] | None) -> AttentionBackend:
    """The planned backend object: one backend, or a hybrid when the plan's prefill, extend
    (``extend_backend``; absent or None: the prefill backend) and decode backends differ.
    A backend named for several roles is one object."""
    from attnkit.registry import load_backend

    if options is not None and not isinstance(options, Mapping):
        fail("AK483", f"backend_options must be a dict of keyword options, not "
                      f"{type(options).__name__}", field="backend_options",
             expected="dict[str, Any] | None", actual=repr(options))

    def load(name: str) -> AttentionBackend:
        try:
            return load_backend(name, **dict(options or {}))
        except TypeError as exc:           # an option the backend's constructor lacks
            fail("AK483", f"backend {name!r} does not take backend_options "
                          f"{sorted(options or {})}: {exc}", field="backend_options",
                 expected="the backend's keyword options", actual=sorted(options or {}))

    roles = {"prefill": result.prefill_backend, "decode": result.decode_backend,
             "extend": getattr(result, "extend_backend", None) or result.prefill_backend}
    loaded = {name: load(name) for name in dict.fromkeys(roles.values())}
    if len(loaded) == 1:
        return loaded[result.prefill_backend]
    from attnkit.backends.hybrid import HybridBackend

    extend = None if roles["extend"] == roles["prefill"] else loaded[roles["extend"]]
    return HybridBackend(prefill=loaded[roles["prefill"]], decode=loaded[roles["decode"]], extend=extend)


def model_layers(arch: Architecture, *, dual_chunk: bool | None) -> tuple[LayerAttention, ...]:
    """The layer specs the engine runs: without dual_chunk_attention_config when dual_chunk
    is False (plain RoPE, as transformers runs it)."""
    if dual_chunk is False:
        return tuple(dataclasses.replace(l, dual_chunk=None) for l in arch.attention.layers)
    return arch.attention.layers

