"""Paged KV cache: per layer K and V pages (MHA) or one latent buffer (MLA).

MHA layer: k [num_pages, page_size, H_kv, D], v [num_pages, page_size, H_kv, D_v].
MLA layer: latent [num_pages, page_size, L + R] (kv_lora_rank + qk_rope_head_dim).
DSA layer (MLA with ``sparse_topk``): also index_k [num_pages, page_size, D_i], the indexer's
keys in the same pages and slots, in the index dtype (a compute dtype, or fp8 e4m3 with
index_k_scale [num_pages, page_size] float32: one scale per token, kvcache/index_keys.py).
Slot s is page ``s // page_size``, offset ``s % page_size``.
fp8 caches store ``value / scale`` and read back ``stored * scale`` (one scale per layer
and tensor). Head counts are per rank.
"""
from __future__ import annotations

import math
import operator
from typing import Any

import torch

from attnkit.errors import fail, preview
from attnkit.kvcache.checks import check_fits, check_write, usable_device
from attnkit.kvcache.index_keys import INDEX_AMAX_FLOOR, INDEX_FP8_MAX
from attnkit.model.spec import LayerAttention
from attnkit.registry.capabilities import DTYPES, INDEX_DTYPES, default_index_dtype, dtype_spelled

# The one table of torch dtypes by the vocabulary's names (compute dtypes are among them).
TORCH_KV_DTYPES = {
    "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2,
}
COMPUTE_TORCH_DTYPES = tuple(TORCH_KV_DTYPES[name] for name in DTYPES)   # what backends compute in
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_NAMES = {dtype: name for name, dtype in TORCH_KV_DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str | None:
    """The vocabulary's name (registry/capabilities.py) of a torch dtype, None for one it has
    no name for: TORCH_KV_DTYPES read backwards, the one torch-side dtype table."""
    return _NAMES.get(dtype)


def _kv_dtype(dtype: Any) -> torch.dtype:
    """A TORCH_KV_DTYPES name (or a spelling of one, registry/capabilities.py: fp8 is fp8_e4m3,
    as for `attnkit plan --kv-cache-dtype`), or any torch dtype, else AK430. Other torch dtypes
    (int8 ...) pass so that backends report them against their declarations (AK444)."""
    name = dtype_spelled(dtype) if isinstance(dtype, str) else None
    if name in TORCH_KV_DTYPES:                # the spellings `attnkit plan --kv-cache-dtype` takes
        return TORCH_KV_DTYPES[name]
    if isinstance(dtype, torch.dtype):
        return dtype
    fail("AK430", f"dtype must be one of {', '.join(TORCH_KV_DTYPES)} or a torch dtype, "
                  f"got {dtype!r}",
         field="dtype", expected=list(TORCH_KV_DTYPES), actual=repr(dtype))


def _index_dtype(dtype: Any, kv_dtype: torch.dtype) -> torch.dtype:
    """The index cache's dtype: one of INDEX_DTYPES (a spelling of one, or its torch dtype),
    else AK430; None follows the KV dtype, fp8_e4m3 when that is fp8."""
    if dtype is None:
        kv = _NAMES.get(kv_dtype)
        return TORCH_KV_DTYPES[default_index_dtype(kv)] if kv else kv_dtype
    name = dtype_spelled(dtype) if isinstance(dtype, str) else _NAMES.get(dtype)
    if name not in INDEX_DTYPES:
        fail("AK430", f"index_dtype must be one of {', '.join(INDEX_DTYPES)} (the indexer-key "
                      f"cache of DSA layers), got {dtype!r}",
             field="index_dtype", expected=list(INDEX_DTYPES), actual=repr(dtype))
    return TORCH_KV_DTYPES[name]


def _check_size(name: str, value: Any) -> None:
    """An int >= 1, below 2**62 so that slots (page * page_size) and byte counts stay numbers
    (larger ones are refused for memory, AK431, or cannot even be printed)."""
    try:
        ok = not isinstance(value, bool) and 1 <= operator.index(value) < 2**62
    except TypeError:
        ok = False
    if not ok:
        fail("AK430", f"{name} must be an int >= 1 (and < 2**62), got {preview(value)}",
             field=name, expected="int >= 1", actual=preview(value))


def _check_scales(name: str, scales: dict[int, Any], layer_ids: set[int]) -> None:
    """Every scale a finite number > 0 (stored = value / scale), for a layer the cache holds."""
    extra = sorted(set(scales) - layer_ids, key=repr)
    if extra:
        fail("AK430", f"{name} names layer(s) {extra} that the cache does not hold "
                      f"(layers: {sorted(layer_ids)})",
             field=name, expected=sorted(layer_ids), actual=extra)
    for lid, scale in scales.items():
        try:
            ok = not isinstance(scale, (bool, str)) and math.isfinite(float(scale)) and float(scale) > 0
        except (TypeError, ValueError, RuntimeError):
            ok = False
        if not ok:
            fail("AK430", f"{name}[{lid}] must be a finite number > 0, got {scale!r}",
                 field=f"{name}[{lid}]", expected="finite float > 0", actual=repr(scale))


def _check_layers(layers: Any) -> list[LayerAttention]:
    try:
        items = list(layers)
    except TypeError:
        fail("AK430", f"layers must be a sequence of LayerAttention, got {type(layers).__name__}",
             field="layers", expected="list[LayerAttention]", actual=repr(layers)[:80])
    seen: set[int] = set()
    for i, l in enumerate(items):
        if not isinstance(l, LayerAttention):
            fail("AK430", f"layers[{i}] is a {type(l).__name__}, not a LayerAttention",
                 field=f"layers[{i}]", expected="LayerAttention", actual=repr(l)[:80])
        if l.layer_id in seen:
            fail("AK430", f"layer id {l.layer_id} appears twice in layers (one cache buffer per "
                          "layer id)", field=f"layers[{i}].layer_id", expected="distinct layer ids",
                 actual=l.layer_id)
        seen.add(l.layer_id)
        if l.kind == "mla" and l.mla is None:
            fail("AK419", f"layer {l.layer_id} has kind 'mla' but no mla sizes (mla=None), "
                          "so its latent cache width is unknown",
                 field=f"layers[{l.layer_id}].mla", expected="MLAConfig", actual=None)
    return items


class PagedKVCache:
    """All layers' pages. ``layers`` gives each layer's spec (per-rank head counts).

    Refused before anything is allocated: a layer that is not a LayerAttention or a duplicate
    layer id, a device this process cannot use (AK430), and pages that need more memory than
    the device has free (AK431)."""

    def __init__(self, layers: list[LayerAttention] | tuple[LayerAttention, ...], *,
                 num_pages: int, page_size: int, dtype: torch.dtype | str = torch.bfloat16,
                 device: torch.device | str = "cpu", k_scales: dict[int, float] | None = None,
                 v_scales: dict[int, float] | None = None, reserve: int = 0,
                 index_dtype: torch.dtype | str | None = None):
        """reserve: bytes to leave free on the device beyond the cache (the runner's decode
        graphs), part of the memory check. index_dtype: the DSA layers' indexer-key dtype
        (fp32, fp16, bf16 or fp8_e4m3, format in kvcache/index_keys.py); None: the KV dtype when
        it is not fp8, else fp8_e4m3 (registry/capabilities.py default_index_dtype). Caches
        without a DSA layer hold no index buffers."""
        self.dtype = _kv_dtype(dtype)
        self.index_dtype = _index_dtype(index_dtype, self.dtype)
        _check_size("num_pages", num_pages)
        _check_size("page_size", page_size)
        layers = _check_layers(layers)
        ids = {l.layer_id for l in layers}
        for name, scales in (("k_scales", k_scales), ("v_scales", v_scales)):
            _check_scales(name, scales or {}, ids)
        dev = usable_device(device)
        shapes = {}
        for l in layers:
            if l.kind == "mla":
                shapes[("latent", l.layer_id)] = (num_pages, page_size, l.mla.latent_dim)
                if l.sparse_topk is not None:
                    shapes[("index_k", l.layer_id)] = (num_pages, page_size, l.sparse_topk.index_head_dim)
                    if self.index_dtype == torch.float8_e4m3fn:
                        shapes[("index_k_scale", l.layer_id)] = (num_pages, page_size)
            else:
                shapes[("k", l.layer_id)] = (num_pages, page_size, l.num_kv_heads, l.head_dim)
                shapes[("v", l.layer_id)] = (num_pages, page_size, l.num_kv_heads, l.value_dim)
        need = sum(math.prod(shape) * self._itemsize(name) for (name, _), shape in shapes.items())
        check_fits(need, dev, what=f"{num_pages} pages of {page_size} tokens for {len(layers)} layer(s)",
                   reserve=reserve)
        self.num_pages = num_pages
        self.page_size = page_size
        self.device = dev
        self.specs = {l.layer_id: l for l in layers}
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        self.latent: dict[int, torch.Tensor] = {}
        self.index_k: dict[int, torch.Tensor] = {}         # DSA layers: [pages, page_size, D_i]
        self.index_k_scale: dict[int, torch.Tensor] = {}   # fp8 index: [pages, page_size] float32
        self.k_scales = {l.layer_id: 1.0 for l in layers} | dict(k_scales or {})
        self.v_scales = {l.layer_id: 1.0 for l in layers} | dict(v_scales or {})
        try:
            for (name, lid), shape in shapes.items():
                getattr(self, name)[lid] = torch.zeros(shape, dtype=self._buffer_dtype(name), device=dev)
        except (RuntimeError, MemoryError) as exc:      # free memory moved under the estimate
            self.k, self.v, self.latent, self.index_k, self.index_k_scale = {}, {}, {}, {}, {}
            fail("AK431", f"the KV cache ({need / 2**30:.3g} GiB) could not be allocated on "
                          f"{dev}: {exc}", field="num_pages", expected="fewer pages", actual=num_pages,
                 details={"bytes": need, "device": str(dev)})

    @classmethod
    def over(cls, layers, *, k: dict[int, torch.Tensor], v: dict[int, torch.Tensor],
             k_scales: dict[int, float] | None = None,
             v_scales: dict[int, float] | None = None) -> "PagedKVCache":
        """A cache whose pages are tensors another owner allocated (an engine's own KV cache),
        used in place: reads and writes go to those tensors, nothing is copied.

        k[layer_id]: [num_pages, page_size, H_kv, D] and v[layer_id]: [num_pages, page_size,
        H_kv, D_v], MHA layers only, one dtype and device; each may be a strided view (K and V
        side by side in one buffer) whose last dimension is dense and whose first two
        dimensions merge into one (slot = page * page_size + offset indexes it without a copy).
        Anything else is AK430."""
        layers = _check_layers(layers)
        self = cls.__new__(cls)
        bufs = [(name, l, table.get(l.layer_id)) for l in layers
                for name, table in (("k", k), ("v", v))]
        first = next((b for _, _, b in bufs if isinstance(b, torch.Tensor)), None)
        for name, l, buf in bufs:
            width = l.head_dim if name == "k" else l.value_dim
            ok = (l.kind == "mha" and isinstance(buf, torch.Tensor) and buf.dim() == 4
                  and first is not None and buf.dtype == first.dtype and buf.device == first.device
                  and tuple(buf.shape[:1]) == tuple(first.shape[:1])
                  and tuple(buf.shape[1:]) == (first.shape[1], l.num_kv_heads, width)
                  and buf.stride(-1) == 1 and buf.stride(0) == buf.shape[1] * buf.stride(1))
            if not ok:
                fail("AK430", f"layer {l.layer_id}: {name} must be an MHA page tensor [num_pages, "
                              f"page_size, {l.num_kv_heads}, {width}] of the other layers' dtype and "
                              "device, dense in its last dimension, with pages and offsets that "
                              f"merge into slots; got {_describe(buf)}",
                     field=f"{name}[{l.layer_id}]", expected=["num_pages", "page_size", l.num_kv_heads, width],
                     actual=_describe(buf))
        ids = {l.layer_id for l in layers}
        for name, scales in (("k_scales", k_scales), ("v_scales", v_scales)):
            _check_scales(name, scales or {}, ids)
        self.dtype = _kv_dtype(first.dtype)
        self.num_pages, self.page_size = int(first.shape[0]), int(first.shape[1])
        self.device = first.device
        self.specs = {l.layer_id: l for l in layers}
        self.k = {l.layer_id: k[l.layer_id] for l in layers}
        self.v = {l.layer_id: v[l.layer_id] for l in layers}
        self.latent, self.index_k, self.index_k_scale = {}, {}, {}
        self.index_dtype = self.dtype
        self.k_scales = {l.layer_id: 1.0 for l in layers} | dict(k_scales or {})
        self.v_scales = {l.layer_id: 1.0 for l in layers} | dict(v_scales or {})
        return self

    @property
    def is_fp8(self) -> bool:
        return self.dtype in FP8_DTYPES

    @property
    def is_index_fp8(self) -> bool:
        return self.index_dtype == torch.float8_e4m3fn

    def _buffer_dtype(self, buffer: str) -> torch.dtype:
        return {"index_k": self.index_dtype, "index_k_scale": torch.float32}.get(buffer, self.dtype)

    def _itemsize(self, buffer: str) -> int:
        return self._buffer_dtype(buffer).itemsize

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    def _store(self, buf: torch.Tensor, slots: torch.Tensor, x: torch.Tensor, scale: float) -> None:
        flat = buf.view(-1, *buf.shape[2:])
        if self.is_fp8:
            x = (x.float() / scale).clamp(-torch.finfo(self.dtype).max, torch.finfo(self.dtype).max)
        flat[slots.long()] = x.to(self.dtype)

    def write(self, layer_id: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None) -> None:
        """Store new K/V at ``slot_mapping`` [T] (ints in [0, num_slots), distinct).
        k: [T, H_kv, D] (MLA: [T, L + R]); v: [T, H_kv, D_v] (MLA: None).

        Every argument is checked first (AK410-AK418), so a refusal writes nothing; the slots
        of a tensor on a GPU are read back for that (one sync). A backend's forward calls
        ``store`` instead: its batch passed validate_batch for this cache once per step."""
        check_write(self, layer_id, slot_mapping, k, v)
        self.store(layer_id, slot_mapping, k, v)

    def store(self, layer_id: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None) -> None:
        """``write`` without its checks, for slots and shapes already validated (no device sync)."""
        if layer_id in self.latent:
            self._store(self.latent[layer_id], slot_mapping, k, self.k_scales[layer_id])
            return
        self._store(self.k[layer_id], slot_mapping, k, self.k_scales[layer_id])
        self._store(self.v[layer_id], slot_mapping, v, self.v_scales[layer_id])

    def write_index(self, layer_id: int, slot_mapping: torch.Tensor, k: torch.Tensor) -> None:
        """Store a DSA layer's new indexer keys k: [T, D_i] at ``slot_mapping`` [T] (the
        latent's slots), after the checks of ``write`` (AK410-AK418); nothing is written on a
        refusal. A backend's forward calls ``store_index``."""
        check_write(self, layer_id, slot_mapping, k, None, buffer="index_k")
        self.store_index(layer_id, slot_mapping, k)

    def store_index(self, layer_id: int, slot_mapping: torch.Tensor, k: torch.Tensor) -> None:
        """``write_index`` without its checks. fp8: each key is quantised with its own scale
        (kvcache/index_keys.py); other dtypes store k cast to the index dtype."""
        slots = slot_mapping.long()
        flat = self.index_k[layer_id].view(-1, self.index_k[layer_id].shape[-1])
        if not self.is_index_fp8:
            flat[slots] = k.to(self.index_dtype)
            return
        k32 = k.float()
        scale = k32.abs().amax(dim=-1).clamp(min=INDEX_AMAX_FLOOR) / INDEX_FP8_MAX      # [T]
        flat[slots] = (k32 / scale[:, None]).clamp(-INDEX_FP8_MAX, INDEX_FP8_MAX).to(self.index_dtype)
        self.index_k_scale[layer_id].view(-1)[slots] = scale

    def read_index(self, layer_id: int, slots: torch.Tensor) -> torch.Tensor:
        """The indexer keys at ``slots`` [S] as float32 [S, D_i] (fp8: stored * its scale)."""
        slots = slots.long()
        rows = self.index_k[layer_id].view(-1, self.index_k[layer_id].shape[-1])[slots].float()
        if self.is_index_fp8:
            rows = rows * self.index_k_scale[layer_id].view(-1)[slots][:, None]
        return rows

    def dequant(self, buf: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
        """Read a (slice of a) buffer back in ``dtype``, undoing the fp8 scale."""
        if self.is_fp8:
            return buf.to(torch.float32).mul(scale).to(dtype)
        return buf.to(dtype)


def _describe(buf: Any) -> str:
    if not isinstance(buf, torch.Tensor):
        return "nothing" if buf is None else type(buf).__name__
    return f"{list(buf.shape)} {buf.dtype} on {buf.device}, strides {list(buf.stride())}"
