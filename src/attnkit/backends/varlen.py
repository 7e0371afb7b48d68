"""Dense varlen attention without a KV cache: packed non-causal sequences, cumulative lengths.

What a diffusion transformer or a vision tower runs: each call attends every query of a
sequence to every key of the same sequence (non-causal), nothing is cached, and many
sequences (a batch of videos, Qwen2.5-VL's windows) are packed one after another::

    batch = varlen_batch(cu_seqlens_q, cu_seqlens_k, key_padding_mask=mask)   # once per step
    out = backend.varlen(q, k, v, layer, batch)                               # per layer

``cu_seqlens_q`` [B+1]: sequence b's queries are rows cu_q[b] .. cu_q[b+1] of q; likewise
``cu_seqlens_k`` for k and v (default: the query lengths, self-attention). Rows past the last
sequence are outside every sequence: they are never read and their output rows are zero.
``key_padding_mask`` [Tk] bool, True = attend: a masked key is never read (padded text
tokens hold garbage); a sequence whose keys are all masked gets zero output.
The layer (``RuntimeLayer``) gives the heads, head dims and softmax scale; it must be a plain
non-causal MHA/GQA layer (role encoder or cross). Returns [Tq, H_q * D_v] in q's dtype.

Validation is here, in plain sight: ``varlen_batch`` checks the lengths once per step (one
host copy), ``AttentionBackend.varlen`` checks q/k/v and the layer against it per call, then
calls the backend's ``_varlen``. Only backends declaring the ``varlen`` feature implement it.
Everything a call derives from the lengths (each sequence's span, the step's point in the
plan's kernel tables, the attending keys of a masked sequence) is derived here, once per step:
a layer's call makes no device-to-host copy and recomputes nothing the batch holds
(tests/backends/test_varlen_host_work.py counts them).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnkit.errors import fail
from attnkit.kvcache.paged import COMPUTE_TORCH_DTYPES
from attnkit.model.spec import VARLEN_FEATURES
from attnkit.registry.kernels import step_point



@dataclass(frozen=True, slots=True)
class VarlenBatch:
    """The packed sequences of one step, checked once and shared by every layer.

    cu_q / cu_k: [B+1] int32 on the device; cu_q_cpu / cu_k_cpu their host copies;
    max_q / max_k the longest sequence; key_mask: [Tk] bool on the device, or None.
    Derived from those by ``varlen_batch`` (never filled apart from them): spans, the (first,
    end) query rows of each non-empty sequence; point, the step's (sequences, mean query
    length, mean key length) as the kernel tables index it; visible, per sequence the indices
    of its attending keys ([n] int64 on the device; with a key mask only, else ())."""
    cu_q: torch.Tensor
    cu_k: torch.Tensor
    cu_q_cpu: tuple[int, ...]
    cu_k_cpu: tuple[int, ...]
    max_q: int
    max_k: int
    key_mask: torch.Tensor | None = None
    spans: tuple[tuple[int, int], ...] = ()
    point: tuple[int, int, int] = (0, 1, 1)
    visible: tuple[torch.Tensor, ...] = ()

    @property
    def num_seqs(self) -> int:
        return len(self.cu_q_cpu) - 1


def varlen_batch(cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor | None = None, *,
                 key_padding_mask: torch.Tensor | None = None) -> VarlenBatch:
    """Check the cumulative lengths (AK493) and the key mask (AK410 / AK411 / AK412)."""
    cu_q = _lengths("cu_seqlens_q", cu_seqlens_q)
    cu_k = cu_q if cu_seqlens_k is None else _lengths("cu_seqlens_k", cu_seqlens_k)
    if len(cu_k) != len(cu_q):
        fail("AK493", f"cu_seqlens_k has {len(cu_k) - 1} sequences, cu_seqlens_q {len(cu_q) - 1}",
             field="cu_seqlens_k", expected=len(cu_q), actual=len(cu_k))
    device = cu_seqlens_q.device
    if cu_seqlens_k is not None and cu_seqlens_k.device != device:
        fail("AK412", f"cu_seqlens_k is on {cu_seqlens_k.device}, cu_seqlens_q on {device}",
             field="cu_seqlens_k", expected=str(device), actual=str(cu_seqlens_k.device))
    mask = key_padding_mask
    if mask is not None:
        if mask.dtype != torch.bool:
            fail("AK410", f"key_padding_mask must be bool (True = attend), got {mask.dtype}",
                 field="key_padding_mask", expected="torch.bool", actual=str(mask.dtype))
        if mask.dim() != 1 or mask.shape[0] < cu_k[-1]:
            fail("AK411", f"key_padding_mask must be [Tk] with Tk >= {cu_k[-1]} (one flag per packed key), "
                          f"got {list(mask.shape)}", field="key_padding_mask",
                 expected=f"[>= {cu_k[-1]}]", actual=list(mask.shape))
        if mask.device != device:
            fail("AK412", f"key_padding_mask is on {mask.device}, cu_seqlens_q on {device}",
                 field="key_padding_mask", expected=str(device), actual=str(mask.device))
    as_dev = lambda c: torch.tensor(c, dtype=torch.int32, device=device)  # noqa: E731
    q_lens = [b - a for a, b in zip(cu_q, cu_q[1:])]
    k_lens = [b - a for a, b in zip(cu_k, cu_k[1:])]
    return VarlenBatch(as_dev(cu_q), as_dev(cu_k), cu_q, cu_k, max(q_lens), max(k_lens), mask,
                       spans=tuple((a, b) for a, b in zip(cu_q, cu_q[1:]) if b > a),
                       point=step_point(q_lens, k_lens), visible=_visible(mask, cu_k))


def _visible(mask: torch.Tensor | None, cu_k: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """Per sequence, the indices of its attending keys: one host copy of the mask for the step."""
    if mask is None:
        return ()
    flags = mask[:cu_k[-1]].cpu()
    idx = [lo + torch.nonzero(flags[lo:hi], as_tuple=True)[0] for lo, hi in zip(cu_k, cu_k[1:])]
    return tuple(i.to(mask.device) for i in idx)


def _lengths(name: str, cu: torch.Tensor) -> tuple[int, ...]:
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.dtype not in (torch.int32, torch.int64):
        fail("AK493", f"{name} must be a 1-D int32/int64 tensor of B+1 cumulative lengths",
             field=name, expected="[B+1] int32", actual=getattr(cu, "dtype", type(cu).__name__))
    values = tuple(int(x) for x in cu.tolist())
    if len(values) < 2 or values[0] != 0 or any(b < a for a, b in zip(values, values[1:])):
        fail("AK493", f"{name} must start at 0 and never decrease, with at least one sequence; got "
                      f"{list(values[:8])}{' ...' if len(values) > 8 else ''}", field=name,
             expected="0 = c[0] <= c[1] <= ... <= c[B]", actual=list(values[:20]))
    return values


def validate_varlen(q, k, v, layer, batch: VarlenBatch, *, backend: str, features) -> None:
    """q: [Tq, H_q, D]; k: [Tk, H_kv, D]; v: [Tk, H_kv, D_v] against the layer and the batch."""
    if "varlen" not in features:
        fail("AK420", f"the {backend} backend does not declare the varlen call", field="backend",
             expected="a backend declaring varlen", actual=backend)
    if not isinstance(batch, VarlenBatch):
        fail("AK493", f"varlen takes the VarlenBatch that varlen_batch() builds, not {type(batch).__name__}",
             field="batch", expected="VarlenBatch", actual=type(batch).__name__)
    spec = layer.spec
    bad = sorted(spec.features() - VARLEN_FEATURES)     # the call computes plain attention
    if spec.causal or spec.kind != "mha" or bad:
        what = "causal (role decoder)" if spec.causal else (f"kind {spec.kind}" if spec.kind != "mha" else
                                                              ", ".join(bad))
        fail("AK440", f"layer {spec.layer_id}: the varlen call computes plain non-causal MHA/GQA attention; "
                      f"this layer is {what}", field="layer", expected="role encoder or cross, no mask features",
             actual=what)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            fail("AK411", f"{name} must be a 3-D tensor [tokens, heads, head_dim]", field=name,
                 expected="[T, H, D]", actual=list(getattr(t, "shape", [])))
        if t.dtype not in COMPUTE_TORCH_DTYPES or t.dtype != q.dtype:
            fail("AK410", f"{name} is {t.dtype}; q, k and v share one of fp16, bf16, fp32 (q is {q.dtype})",
                 field=name, expected=str(q.dtype), actual=str(t.dtype))
        if t.device != batch.cu_q.device:
            fail("AK412", f"{name} is on {t.device}, the sequence lengths on {batch.cu_q.device}",
                 field=name, expected=str(batch.cu_q.device), actual=str(t.device))
    expect = {"q": (batch.cu_q_cpu[-1], spec.num_heads, spec.head_dim),
              "k": (batch.cu_k_cpu[-1], spec.num_kv_heads, spec.head_dim),
              "v": (batch.cu_k_cpu[-1], spec.num_kv_heads, spec.value_dim)}
    for name, t in (("q", q), ("k", k), ("v", v)):
        rows, heads, dim = expect[name]
        if t.shape[1] != heads:
            fail("AK413", f"{name} has {t.shape[1]} heads; layer {spec.layer_id} has {heads}", field=name,
                 expected=heads, actual=t.shape[1])
        if t.shape[0] < rows or t.shape[2] != dim:
            fail("AK411", f"{name} is {list(t.shape)}; the sequences need at least {rows} rows of head dim {dim}",
                 field=name, expected=[f">= {rows}", heads, dim], actual=list(t.shape))
    if k.shape[0] != v.shape[0]:
        fail("AK411", f"k has {k.shape[0]} rows, v {v.shape[0]}", field="v", expected=k.shape[0], actual=v.shape[0])
    if batch.key_mask is not None and batch.key_mask.shape[0] != k.shape[0]:
        fail("AK411", f"key_padding_mask has {batch.key_mask.shape[0]} flags, k {k.shape[0]} rows",
             field="key_padding_mask", expected=k.shape[0], actual=batch.key_mask.shape[0])


def visible_keys(batch: VarlenBatch, i: int) -> torch.Tensor | None:
    """Indices (into k's rows) of sequence i's keys that attend, or None for all of them
    (the host-side loops of torch_native and sdpa select them, never multiply by zero); built
    once per step by ``varlen_batch``."""
    return batch.visible[i] if batch.key_mask is not None else None
