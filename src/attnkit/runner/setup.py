"""Choices the engine makes once, before any step: dtypes, the plan, layer specs, backends.

The backend is chosen (or the user's choice checked) by attnkit's planner, so the runner
refuses exactly what ``attnkit plan`` refuses, with the same codes and every reason.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import numbers
import os
import warnings
from typing import Any, Callable, Mapping

import torch

from attnkit.backends.base import AttentionBackend
from attnkit.errors import fail
from attnkit.model.spec import LayerAttention
from attnkit.runner.arch import Architecture

COMPUTE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_ALIASES = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
            "bfloat16": "bf16"}


def dtype_name(dtype: torch.dtype | str, *, field: str, table: Mapping[str, torch.dtype]) -> str:
    """The attnkit name (fp32, bf16, fp8_e4m3 ...) of a torch dtype or a dtype string."""
    if isinstance(dtype, torch.dtype):
        names = [n for n, d in table.items() if d == dtype]
    else:
        key = str(dtype).lower().removeprefix("torch.")
        names = [n for n in (_ALIASES.get(key, key),) if n in table]
    if not names:
        fail("AK483", f"{field} {dtype!r} is not one the runner uses ({', '.join(table)})",
             field=field, expected=list(table), actual=str(dtype))
    return names[0]


RUN_DEVICES = ("cpu", "cuda", "mps")
INT32_MAX = 2**31 - 1           # block tables are int32: page ids stay below this
PAGE_LIST_BYTES = 64            # host bytes per page of the allocator's free list (deque + int)


def device_of(device: Any) -> torch.device:
    """``device`` as a torch.device this process can run kernels on, else AK483: a name
    torch does not know, the meta device, a device type this torch lacks (CUDA without CUDA,
    MPS without MPS, xpu ...) or a GPU index past the count."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        fail("AK483", f"device {device!r} is not a device torch knows ({exc})", field="device",
             expected="'cpu', 'cuda' or 'cuda:N'", actual=repr(device))
    if dev.type == "meta":
        fail("AK483", "the meta device holds no data and runs no kernels: use the device the "
                      "model runs on ('cpu', 'cuda', 'cuda:N')", field="device",
             expected="'cpu' or 'cuda'", actual="meta")
    if dev.type not in RUN_DEVICES:
        fail("AK483", f"device type {dev.type!r}: the runner runs on {', '.join(RUN_DEVICES)}",
             field="device", expected=list(RUN_DEVICES), actual=str(dev))
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            fail("AK483", f"device {str(dev)!r} asked for, but MPS is not available to this torch "
                          "(not an Apple-silicon Mac, or a build without MPS); use device='cpu'",
                 field="device", expected="'cpu'", actual=str(dev))
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            fail("AK483", f"device {str(dev)!r} asked for, but CUDA is not available to this "
                          "torch (a CPU-only build or no visible GPU); use device='cpu'",
                 field="device", expected="'cpu'", actual=str(dev))
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            fail("AK483", f"device {str(dev)!r} asked for, but torch sees {count} CUDA device(s) "
                          f"(cuda:0 .. cuda:{count - 1})",
                 field="device", expected=f"cuda:N with N < {count}", actual=str(dev))
    return dev


def check_id(value: Any, *, field: str, code: str = "AK483") -> None:
    """``code`` unless ``value`` can be a dict key (a tuple holding a list cannot, though
    isinstance(value, Hashable) says it is)."""
    try:
        hash(value)
    except TypeError:
        fail(code, f"{field} {preview(value)} is not hashable: ids are ints, strings or tuples "
                   "of them", field=field, expected="a hashable id (int, str, ...)",
             actual=type(value).__name__)


def coded_args(code: str) -> Callable:
    """Decorate a public function so that a call its signature does not accept (an unknown
    keyword, a missing or extra argument) is ``code`` naming the nearest keyword, not
    Python's TypeError."""
    def wrap(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        names = [n for n, p in sig.parameters.items() if p.kind is not p.VAR_KEYWORD]

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                sig.bind(*args, **kwargs)
            except TypeError as exc:
                unknown = [k for k in kwargs if k not in sig.parameters]
                hints = [m for u in unknown for m in difflib.get_close_matches(u, names, n=1)]
                fail(code, f"{fn.__qualname__}(): {exc}"
                           + (f"; did you mean {', '.join(hints)}?" if hints else ""),
                     field=unknown[0] if unknown else fn.__name__,
                     expected=[n for n in names if n != "self"], actual=unknown or str(exc))
            return fn(*args, **kwargs)

        return checked
    return wrap


def check_cache_room(layers, *, num_pages: int, page_size: int, kv_dtype: torch.dtype,
                     device: torch.device) -> None:
    """AK483 before allocating a KV cache that cannot be: more pages than int32 block
    tables index, or more bytes (the cache on ``device``, the page list on the host) than
    the memory free there."""
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
    needs = [(device, cache + (host if device.type == "cpu" else 0))]
    if device.type != "cpu":
        needs.append((torch.device("cpu"), host))
    for dev, need in needs:
        free = free_memory(dev)
        if free is not None and need > free:
            fail("AK483", f"max_tokens {num_pages * page_size} needs {need / 2**30:.3g} GiB on "
                          f"{dev} for the KV cache ({per_token} bytes per token over "
                          f"{len(layers)} layers) and its page list, and {dev} has "
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


def preview(value: Any, limit: int = 60) -> str:
    """repr(value), cut to ``limit`` characters, for messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def check_count(name: str, value: Any, *, minimum: int, maximum: int | None = None,
                allow_none: bool = False, code: str = "AK483") -> None:
    """``code`` (AK483: engine arguments, AK486: generation ones) unless ``value`` is an int
    (not a bool) in [minimum, maximum] (or None if allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum \
            or (maximum is not None and value > maximum):
        expected = f"int >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "") \
            + (" or None" if allow_none else "")
        fail(code, f"{name} must be an {expected}, got {value!r}", field=name,
             expected=expected, actual=repr(value))


def plan_for(arch: Architecture, *, backend: str | None, device: torch.device,
             page_size: int | None, dtype: str, kv_cache_dtype: str, dual_chunk: bool | None,
             prefill_backend: str | None = None, decode_backend: str | None = None):
    """attnkit's Plan for running ``arch`` here (raises the plan's AttnkitError if none)."""
    from attnkit.planning.solver import plan

    if backend is not None and not isinstance(backend, str):
        fail("AK483", f"backend must be a backend name, 'auto', or an AttentionBackend, not "
                      f"{type(backend).__name__}", field="backend", expected="str | AttentionBackend",
             actual=type(backend).__name__)
    request = {"page_size": page_size, "dtype": dtype, "kv_cache_dtype": kv_cache_dtype,
               "attention_backend": backend, "prefill_attention_backend": prefill_backend,
               "decode_attention_backend": decode_backend,
               "dual_chunk": None if dual_chunk is None else ("on" if dual_chunk else "off")}
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
    """The planned backend object: one backend, or a hybrid when prefill and decode differ."""
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

    prefill = load(result.prefill_backend)
    if result.decode_backend == result.prefill_backend:
        return prefill
    from attnkit.backends.hybrid import HybridBackend

    return HybridBackend(prefill=prefill, decode=load(result.decode_backend))


def model_layers(arch: Architecture, *, dual_chunk: bool | None) -> tuple[LayerAttention, ...]:
    """The layer specs the engine runs: without dual_chunk_attention_config when dual_chunk
    is False (plain RoPE, as transformers runs it)."""
    if dual_chunk is False:
        return tuple(dataclasses.replace(l, dual_chunk=None) for l in arch.attention.layers)
    return arch.attention.layers

