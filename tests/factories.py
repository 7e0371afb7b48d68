"""Shared input factories for every backend's tests.

    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=64, sliding_window=16)
    case = make_case(layer, prefix_lens=[0, 20], new_lens=[9, 1], page_size=16, dtype="fp16")
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, backend.prepare(case.meta, case.cache))
    assert_close(out, case.reference(), dtype="fp16")

``case.reference()`` is computed from a snapshot taken before the backend runs, so call it
in any order. Pages are assigned in random order (non-contiguous block tables) and the
cached prefix is random K/V written through ``cache.write`` (so fp8 rounding is real).
"""
from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from attnkit import reference
from attnkit.backends.base import RuntimeLayer
from attnkit.backends.batch import Request, build_batch, slots_of
from attnkit.backends.metadata import BatchMetadata
from attnkit.errors import AttnkitError
from attnkit.kvcache.allocator import PageAllocator
from attnkit.kvcache.paged import FP8_DTYPES, TORCH_KV_DTYPES, PagedKVCache
from attnkit.model.spec import LayerAttention, MLAConfig

DEFAULT_MLA = MLAConfig(kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32)
FP8_SCALES = (0.5, 0.25)   # k, v: not 1, so a backend that forgets the scale fails


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    return TORCH_KV_DTYPES[dtype] if isinstance(dtype, str) else dtype


def _rand(gen: torch.Generator, *shape: int, dtype: torch.dtype, device, scale: float = 1.0):
    """Normal(0, scale) drawn on CPU (same numbers on every device), then moved."""
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale).to(device=device, dtype=dtype)


def make_layer(*, kind: str = "mha", num_heads: int = 4, num_kv_heads: int | None = None,
               head_dim: int = 64, v_head_dim: int | None = None, role: str = "decoder",
               sliding_window: int | None = None, logit_softcap: float | None = None,
               sinks: bool = False, scale: float | None = None, mla: MLAConfig | None = None,
               dual_chunk=None, attention_chunk: int | None = None, layer_id: int = 0,
               dtype: str | torch.dtype = "fp32", device: str | torch.device = "cpu",
               seed: int = 0) -> RuntimeLayer:
    """An RuntimeLayer with random per-layer tensors (sinks [H]; MLA w_kc/w_vc in ``dtype``).

    MLA: head_dim/v_head_dim/num_kv_heads come from ``mla`` (default DEFAULT_MLA)."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    w_kc = w_vc = None
    if kind == "mla":
        mla = mla or DEFAULT_MLA
        head_dim, v_head_dim, num_kv_heads = mla.qk_nope_head_dim + mla.qk_rope_head_dim, mla.v_head_dim, 1
        lat_scale = 1.0 / math.sqrt(mla.kv_lora_rank)   # keeps expanded K/V ~ N(0, 1)
        w_kc = _rand(gen, num_heads, mla.qk_nope_head_dim, mla.kv_lora_rank,
                     dtype=torch_dtype(dtype), device=device, scale=lat_scale)
        w_vc = _rand(gen, num_heads, mla.kv_lora_rank, mla.v_head_dim,
                     dtype=torch_dtype(dtype), device=device, scale=lat_scale)
    spec = LayerAttention(
        layer_id=layer_id, num_heads=num_heads, num_kv_heads=num_kv_heads or num_heads,
        head_dim=head_dim, v_head_dim=v_head_dim, kind=kind, role=role, scale=scale,
        sliding_window=sliding_window, logit_softcap=logit_softcap, sinks=sinks,
        mla=mla if kind == "mla" else None, dual_chunk=dual_chunk, attention_chunk=attention_chunk)
    sink_t = _rand(gen, num_heads, dtype=torch.float32, device=device, scale=2.0) if sinks else None
    return RuntimeLayer(spec=spec, sinks=sink_t, w_kc=w_kc, w_vc=w_vc)


@dataclass
class Case:
    """One step of one layer: inputs, cache, metadata, and the reference computed on them."""
    layer: RuntimeLayer
    cache: PagedKVCache
    meta: BatchMetadata
    q: torch.Tensor
    k: torch.Tensor | None
    v: torch.Tensor | None
    requests: list[Request]
    allocator: PageAllocator
    dtype: torch.dtype
    kv_dtype: torch.dtype
    _ref: torch.Tensor | Exception | None = field(default=None, repr=False)

    def reference(self) -> torch.Tensor:
        """float64 [T, H_q * D_v], from the cache as it was when the case was made. A case
        the reference refuses (invalid on purpose) raises that AttnkitError here."""
        if self._ref is None:
            try:
                self._ref = reference.attention(self.q, self.k, self.v, self.layer, self.cache, self.meta)
            except AttnkitError as exc:
                self._ref = exc
        if isinstance(self._ref, Exception):
            raise self._ref
        return self._ref

    def args(self) -> tuple[Any, ...]:
        return self.q, self.k, self.v, self.layer, self.cache


def make_case(layer: RuntimeLayer, *, prefix_lens: Sequence[int], new_lens: Sequence[int],
              page_size: int = 16, dtype: str | torch.dtype = "fp32",
              kv_dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu",
              mode=None, encoder_lens: Sequence[int] | None = None, encoder: str = "cached",
              seed: int = 0, spare_pages: int = 3, q_scale: float = 1.0,
              garbage: bool = False, index_dtype: str | torch.dtype | None = None) -> Case:
    """Random requests with the given prefix/new lengths on a fresh cache.

    encoder_lens (cross layers): encoder tokens per request. encoder="cached" pre-fills the
    encoder K/V and the case's k/v are None; "write" hands them in as k/v [sum enc, H_kv, D].
    q_scale multiplies q (large logits: q_scale=30 or more).
    garbage: no request owns page 0 (the page padded block-table entries point at), and every
    slot that holds no cached K/V of this step (every page the batch does not own, and each
    request's slots from its prefix on, its new tokens' slots included) is filled with NaN,
    +inf and -inf before the reference is taken (see ``fill_garbage``).
    index_dtype: the cache's index-key dtype for DSA layers (PagedKVCache; tests/dsa_factory.py
    writes the index keys; the dense reference refuses DSA layers).
    The reference is computed (and kept) before the case is returned; an input the
    reference refuses is kept as the error and raised by ``case.reference()``.
    """
    spec = layer.spec
    dt = torch_dtype(dtype)
    kv_dt = torch_dtype(kv_dtype) if kv_dtype is not None else dt
    gen = torch.Generator().manual_seed(seed)
    enc = list(encoder_lens) if encoder_lens is not None else [None] * len(new_lens)
    need = sum(-(-(p + n) // page_size) - (-(e or 0) // page_size)
               for p, n, e in zip(prefix_lens, new_lens, enc))
    shuffle = ZeroLast(seed) if garbage else seed
    alloc = PageAllocator(need + spare_pages + garbage, page_size=page_size, shuffle=shuffle)
    reqs = []
    for i, (p, n, e) in enumerate(zip(prefix_lens, new_lens, enc)):
        row = alloc.allocate(i, p + n)
        erow = alloc.allocate(("enc", i), e) if e is not None else None
        reqs.append(Request(p, n, row, encoder_len=e, encoder_block_table=erow))
    scales = FP8_SCALES if kv_dt in FP8_DTYPES else (1.0, 1.0)
    lid = spec.layer_id
    cache = PagedKVCache([spec], num_pages=alloc.num_pages, page_size=page_size, dtype=kv_dt,
                         device=device, k_scales={lid: scales[0]}, v_scales={lid: scales[1]},
                         index_dtype=index_dtype)
    has_enc = encoder_lens is not None
    meta = build_batch(reqs, page_size=page_size, device=device, mode=mode,
                       encoder=encoder if has_enc else None)

    def kv(n: int):
        if spec.kind == "mla":
            return _rand(gen, n, spec.mla.latent_dim, dtype=dt, device=device), None
        return (_rand(gen, n, spec.num_kv_heads, spec.head_dim, dtype=dt, device=device),
                _rand(gen, n, spec.num_kv_heads, spec.value_dim, dtype=dt, device=device))

    # Fill what the cache holds before this step: the prefix (or, for cross layers, the encoder).
    if spec.cross_attention:
        cached = [] if encoder == "write" else [(r.encoder_block_table, r.encoder_len or 0) for r in reqs]
    else:
        cached = [(r.block_table, r.prefix_len) for r in reqs]
    slots = [s for row, n in cached for s in slots_of(row, range(n), page_size)]
    if slots:
        ck, cv = kv(len(slots))
        cache.write(lid, torch.tensor(slots, device=device), ck, cv)

    if garbage:
        fill_garbage(cache, lid, keep=slots)

    q = _rand(gen, meta.num_tokens, spec.num_heads, spec.head_dim, dtype=dt, device=device, scale=q_scale)
    if spec.cross_attention:
        k, v = kv(sum(e or 0 for e in enc)) if encoder == "write" else (None, None)
    else:
        k, v = kv(meta.num_tokens)
    case = Case(layer, cache, meta, q, k, v, reqs, alloc, dt, kv_dt)
    try:
        case.reference()            # snapshot now, before a backend writes the cache
    except AttnkitError:
        pass                        # kept; re-raised by case.reference()
    return case


class ZeroLast(random.Random):
    """A shuffle that hands page 0 out last: with a spare page, no request of the case owns it."""

    def shuffle(self, x):
        super().shuffle(x)
        if 0 in x:
            x.remove(0)
            x.append(0)


def fill_garbage(cache: PagedKVCache, layer_id: int, *, keep: Sequence[int]) -> None:
    """Fill every slot of the layer's buffers except ``keep`` with NaN, +inf and -inf (in turn
    along each row; fp8 e4m3, which has no inf, saturates those to +-448). A DSA layer's index
    keys and their fp8 scales too."""
    keep_t = torch.tensor(sorted(set(keep)), dtype=torch.int64, device=cache.device)
    for bufs in (cache.k, cache.v, cache.latent, cache.index_k, cache.index_k_scale):
        buf = bufs.get(layer_id)
        if buf is None:
            continue
        flat = buf.view(-1, *buf.shape[2:])
        saved = flat[keep_t].clone()
        pattern = torch.tensor([float("nan"), float("inf"), float("-inf")], device=cache.device)
        junk = pattern.repeat(-(-flat[0].numel() // 3))[:flat[0].numel()].view(flat.shape[1:])
        flat.copy_(junk.to(flat.dtype).expand_as(flat))
        flat[keep_t] = saved


# ||out - ref|| / ||ref|| over the whole output, by compute dtype (docs/backends.md). Measured
# on CPU and the interpreter (2026-12-01): honest outputs reach 4e-7 (fp32), 6e-4 (fp16),
# 2.5e-3 (bf16, about the rounding of the output itself); a 1 % change of the logit scale
# moves the output by 2e-3 .. 1e-2, so it fails these bounds in most cases (test_oracle_strength.py).
NORM_BOUND = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 6e-3}


def tolerance_for(dtype: str | torch.dtype, kv_dtype: str | torch.dtype | None = None, *,
                  fp8: float | None = None) -> tuple[float, float]:
    """(atol, rtol) of the elementwise check against the float64 reference: fp32 1e-5,
    bf16/fp16 1e-2.

    The reference rounds the new K/V to the cache dtype as the cache must, so a low-precision
    cache adds only the compute-side rounding; fp8 caches use ``fp8`` (a backend's
    documented bound) when given, else 2e-2."""
    dt = torch_dtype(dtype)
    tol = 1e-5 if dt == torch.float32 else 1e-2
    if kv_dtype is not None and torch_dtype(kv_dtype) in FP8_DTYPES:
        tol = max(tol, fp8 if fp8 is not None else 2e-2)
    return tol, tol


def assert_close(out: torch.Tensor, ref: torch.Tensor, *, dtype: str | torch.dtype,
                 kv_dtype: str | torch.dtype | None = None, fp8: float | None = None,
                 norm: float | None = None, what: str = "") -> None:
    """Both checks against the reference: |out - ref| <= atol + rtol * |ref| elementwise (the
    worst element in the message), and ||out - ref|| <= bound * ||ref|| over the whole output,
    the bound being ``norm`` (a backend's documented one) or NORM_BOUND[dtype] (the compute
    dtype's, whatever the cache dtype)."""
    atol, rtol = tolerance_for(dtype, kv_dtype, fp8=fp8)
    got = out.detach().to(device="cpu", dtype=torch.float64).reshape(ref.shape)
    ref = ref.detach().cpu()
    if got.numel() == 0:
        return
    excess = (got - ref).abs() - (atol + rtol * ref.abs())
    if not torch.isfinite(got).all():
        raise AssertionError(f"{what}: output has non-finite values")
    worst = int(excess.argmax())
    if excess.flatten()[worst] > 0:
        err = (got - ref).abs().max().item()
        raise AssertionError(
            f"{what}: max |out - ref| = {err:.3g} (atol {atol}, rtol {rtol}); worst at flat index "
            f"{worst}: out {got.flatten()[worst].item():.6g} vs ref {ref.flatten()[worst].item():.6g}")
    bound = norm if norm is not None else NORM_BOUND[torch_dtype(dtype)]
    err, size = (got - ref).norm().item(), ref.norm().item()
    if err > bound * size:
        raise AssertionError(f"{what}: ||out - ref|| / ||ref|| = {err / size:.3g} > {bound:g} "
                             f"(the {torch_dtype(dtype)} bound)")


def assert_replays_match(backend, case: Case, step, *, dtype: str, what: str, seeds: int = 3) -> None:
    """Capture one ``backend.forward`` of ``step`` as a CUDA graph, then replay it with ``seeds``
    new queries copied into the captured q: each replay's output equals the reference of that
    query (the graph reads q and the cache by address, nothing from the capture-time values)."""
    q = case.q.clone()
    fwd = lambda: backend.forward(q, case.k, case.v, case.layer, case.cache, step)  # noqa: E731
    fwd()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fwd()
    for seed in range(seeds):
        q.copy_(torch.randn(q.shape, generator=torch.Generator().manual_seed(seed)).to(q))
        graph.replay()
        torch.cuda.synchronize()
        ref = dataclasses.replace(case, q=q.clone(), _ref=None).reference()
        assert_close(out, ref, dtype=dtype, what=f"{what} replay {seed}")
