"""Checks the KV cache runs before it allocates or writes anything, so a refusal changes nothing.

``usable_device``: a device this process can put tensors on (AK430).
``check_fits``: pages that fit the device's free memory (AK431), checked before allocating.
``check_write``: the arguments of ``PagedKVCache.write`` (AK410-AK418), slots included: a
negative slot would otherwise index from the end and land in another request's page.
"""
from __future__ import annotations

import os
from typing import Any

import torch

from attnkit.errors import fail


def same_device(a: torch.device, b: torch.device) -> bool:
    """'cuda' and 'cuda:0' are the same device here; an unset index matches any."""
    if a == b:
        return True
    a, b = torch.device(a), torch.device(b)
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def usable_device(device: Any) -> torch.device:
    try:
        dev = torch.device(device)
        torch.empty(0, device=dev)
    except (AssertionError, RuntimeError, TypeError, ValueError) as exc:
        fail("AK430", f"device {device!r} cannot hold tensors in this process: {exc}",
             field="device", expected="a usable torch device such as 'cpu' or 'cuda:0'",
             actual=repr(device))
    return dev


def free_bytes(dev: torch.device) -> int | None:
    """Memory free for new tensors on ``dev`` (CUDA: the driver's count; CPU: the OS's
    available memory), or None where it is not known (meta ...)."""
    if dev.type == "cuda":
        try:
            return torch.cuda.mem_get_info(dev)[0]
        except (RuntimeError, AssertionError):
            return None
    if dev.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(nbytes: int, dev: torch.device, *, what: str, reserve: int = 0) -> None:
    """AK431 unless ``nbytes`` plus ``reserve`` (bytes the caller keeps free beyond them) fit
    the memory free on ``dev``: the one memory-fit check of a KV cache."""
    free = free_bytes(dev)
    if free is not None and nbytes + reserve > free:
        kept = f" (and {reserve / 2**30:.3g} GiB kept free)" if reserve else ""
        fail("AK431", f"{what} need {nbytes / 2**30:.3g} GiB{kept} but {dev} has "
                      f"{free / 2**30:.3g} GiB free", field="num_pages",
             expected=f"<= {free - reserve} bytes", actual=nbytes,
             details={"bytes": nbytes, "reserve": reserve, "free": free, "device": str(dev)})


def check_write(cache, layer_id: Any, slots: Any, k: Any, v: Any, *, buffer: str = "kv") -> None:
    """Everything ``PagedKVCache.write`` needs, before it writes a byte. buffer="index_k":
    ``write_index`` (a DSA layer's indexer keys k [T, D_i], v None)."""
    # an int (or numpy int) only: a list is unhashable, and True / 0.0 equal layers 1 / 0
    if isinstance(layer_id, bool) or not hasattr(type(layer_id), "__index__") or layer_id not in cache.specs:
        fail("AK418", f"the KV cache holds no layer {layer_id!r} (layers {sorted(cache.specs)})",
             field="layer_id", expected=sorted(cache.specs), actual=repr(layer_id))
    if (not isinstance(slots, torch.Tensor) or slots.dtype == torch.bool
            or slots.dtype.is_floating_point or slots.dtype.is_complex):
        fail("AK410", f"slot_mapping must be an integer tensor, got "
                      f"{getattr(slots, 'dtype', type(slots).__name__)}",
             field="slot_mapping", expected="int64 tensor [T]", actual=str(getattr(slots, "dtype", type(slots))))
    if slots.dim() != 1:
        fail("AK411", f"slot_mapping has shape {list(slots.shape)}, expected [T]",
             field="slot_mapping", expected=["T"], actual=list(slots.shape))
    mla = layer_id in cache.latent or buffer == "index_k"
    if buffer == "index_k" and layer_id not in cache.index_k:
        fail("AK418", f"layer {layer_id} has no indexer-key buffer (only DSA layers, whose spec "
                      f"has sparse_topk, do: {sorted(cache.index_k)})",
             field="layer_id", expected=sorted(cache.index_k), actual=layer_id)
    bufs = ((cache.index_k[layer_id],) if buffer == "index_k" else (cache.latent[layer_id],) if mla
            else (cache.k[layer_id], cache.v[layer_id]))
    given = (("k", k),) if mla else (("k", k), ("v", v))
    if mla and v is not None:
        fail("AK411", f"layer {layer_id} is MLA: its latent goes in k and v must be None",
             field="v", expected=None, actual=list(getattr(v, "shape", [])))
    for (name, t), buf in zip(given, bufs):
        want = (slots.shape[0], *buf.shape[2:])
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != want:
            fail("AK411", f"{name} must be a tensor of shape {list(want)} for layer {layer_id}, "
                          f"got {list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}",
                 field=name, expected=list(want),
                 actual=list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__)
        if not t.dtype.is_floating_point:
            fail("AK410", f"{name} has dtype {t.dtype}; K/V must be floating point",
                 field=name, expected="a floating dtype", actual=str(t.dtype))
    for name, t in (("slot_mapping", slots),) + given:
        if not same_device(t.device, cache.device):
            fail("AK412", f"{name} is on {t.device} but the KV cache is on {cache.device}",
                 field=name, expected=str(cache.device), actual=str(t.device))
    bad = (slots < 0) | (slots >= cache.num_slots)
    if bool(bad.any()):                                   # one sync for a GPU tensor
        j = int(bad.nonzero()[0, 0])
        fail("AK415", f"slot_mapping[{j}] = {int(slots[j])} is outside the cache's slots "
                      f"[0, {cache.num_slots}) (a negative slot would index from the end)",
             field=f"slot_mapping[{j}]", expected=f"0 <= slot < {cache.num_slots}", actual=int(slots[j]))
    if torch.unique(slots).numel() != slots.numel():
        fail("AK416", "slot_mapping writes a slot more than once", field="slot_mapping",
             expected="distinct slots", actual=slots.tolist()[:16])
