"""One bucket as a real step: a paged cache with random K/V, shuffled block tables, the step's
q/k/v; the work it does; and the check of a backend's output against the float64 reference.

A DSA bucket (``Shape.topk`` set, docs/dsa.md) also fills the index-key cache and hands the
step's IndexerInputs; its check is attnkit.reference_dsa's. The check runs the reference on
sampled output rows (first, middle and last query of the
first, middle and last request), over a compact copy of just those requests' pages, so that it
costs little next to the step even at 128 requests x 32k tokens (the reference is a float64
loop over requests). Each sampled query becomes a one-token request at its own position: the
keys it may see are exactly those of the step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnkit import reference, reference_dsa
from attnkit.backends.base import RuntimeLayer
from attnkit.backends.batch import Request, build_batch
from attnkit.backends.metadata import BatchMetadata
from attnkit.backends.sparse import IndexerInputs
from attnkit.kvcache.paged import FP8_DTYPES, TORCH_KV_DTYPES, PagedKVCache
from attnkit.model.spec import LayerAttention, MLAConfig, SparseTopK
from attnkit.planning.profile import Bucket, Shape
from attnkit.registry.capabilities import default_index_dtype

# Relative error (Frobenius, per sampled query row) a result may have: DESIGN.md's bounds.
TOLERANCE = {"fp32": 1e-5, "fp16": 1e-2, "bf16": 1e-2}


@dataclass
class Case:
    bucket: Bucket
    layer: RuntimeLayer
    cache: PagedKVCache
    meta: BatchMetadata
    q: torch.Tensor                   # [T, H_q, D]
    k: torch.Tensor                   # [T, H_kv, D] (MLA: latent [T, L + R])
    v: torch.Tensor | None            # [T, H_kv, D_v] (MLA: None)
    rows: list[list[int]]             # block-table row of each request
    indexer: IndexerInputs | None = None   # DSA buckets: q [T, H_i, D_i], weights [T, H_i], k [T, D_i]


def layer_spec(s: Shape) -> LayerAttention:
    """One attention layer of shape ``s`` (layer id 0)."""
    if s.kind == "mla":
        mla = MLAConfig(kv_lora_rank=s.kv_lora_rank, qk_rope_head_dim=s.rope_dim,
                        qk_nope_head_dim=s.head_dim - s.rope_dim, v_head_dim=s.v_head_dim)
        sparse = SparseTopK(s.topk, s.index_heads, s.index_dim) if s.topk is not None else None
        return LayerAttention(layer_id=0, num_heads=s.heads, num_kv_heads=1, head_dim=s.head_dim,
                              v_head_dim=s.v_head_dim, kind="mla", mla=mla, sparse_topk=sparse)
    return LayerAttention(layer_id=0, num_heads=s.heads, num_kv_heads=s.kv_heads, head_dim=s.head_dim,
                          v_head_dim=s.v_head_dim)


def make_case(b: Bucket, device: str, *, seed: int = 0) -> Case:
    """The bucket's step; the cached prefix is random (N(0, 1)), pages in a random order."""
    gen = torch.Generator(device=device).manual_seed(seed)
    s = b.shape
    dt = TORCH_KV_DTYPES[s.dtype]
    spec = layer_spec(s)
    layer = RuntimeLayer(spec=spec)
    if s.kind == "mla":
        mla = spec.mla
        w = lambda *d: torch.randn(*d, generator=gen, device=device, dtype=dt) / math.sqrt(mla.kv_lora_rank)  # noqa: E731
        layer = RuntimeLayer(spec=spec, w_kc=w(s.heads, mla.qk_nope_head_dim, mla.kv_lora_rank),
                               w_vc=w(s.heads, mla.kv_lora_rank, mla.v_head_dim))
    per = -(-b.context // b.page_size)
    cache = PagedKVCache([spec], num_pages=b.batch * per, page_size=b.page_size,
                         dtype=TORCH_KV_DTYPES[s.kv_dtype], device=device)
    for buf in (cache.latent, cache.k, cache.v, cache.index_k):
        if 0 in buf:
            _fill(buf[0], gen)
    for scale in cache.index_k_scale.values():      # fp8 index keys: read back as stored * 1
        scale.fill_(1.0)
    order = torch.randperm(b.batch * per, generator=torch.Generator().manual_seed(seed))
    rows = order.view(b.batch, per).tolist()
    meta = build_batch([Request(b.prefix, b.new, row) for row in rows], page_size=b.page_size, device=device)
    t = b.batch * b.new
    rand = lambda *d: torch.randn(*d, generator=gen, device=device, dtype=dt)  # noqa: E731
    q = rand(t, s.heads, s.head_dim)
    if s.kind == "mla":
        k, v = rand(t, spec.mla.latent_dim), None
    else:
        k, v = rand(t, s.kv_heads, s.head_dim), rand(t, s.kv_heads, s.v_head_dim)
    indexer = None
    if s.topk is not None:
        indexer = IndexerInputs(q=rand(t, s.index_heads, s.index_dim),
                                weights=rand(t, s.index_heads).float(), k=rand(t, s.index_dim))
    return Case(b, layer, cache, meta, q, k, v, rows, indexer)


def _fill(buf: torch.Tensor, gen: torch.Generator, chunk: int = 1 << 26) -> None:
    """N(0, 1) in place; fp8 through a half-precision buffer, a chunk at a time."""
    if buf.dtype not in FP8_DTYPES:
        buf.normal_(generator=gen)
        return
    flat = buf.view(-1)
    for start in range(0, flat.numel(), chunk):
        part = flat[start:start + chunk]
        part.copy_(torch.randn(part.numel(), generator=gen, device=buf.device, dtype=torch.float16))


def work(b: Bucket) -> float:
    """Decode: bytes of K/V (MLA: latent) read; prefill: FLOPs of QK^T and PV over the
    causally visible pairs (MLA in its MHA form: (nope + rope) + v per pair and head).
    DSA (docs/dsa.md): decode reads every index key of the context and the latent rows of the
    min(topk, context) selected; prefill does the attention FLOPs over the selected pairs
    (min(topk, p + 1) per query at position p) plus the indexer's 2 * H_i * D_i per visible pair."""
    s = b.shape
    itemsize = TORCH_KV_DTYPES[s.kv_dtype].itemsize
    pairs = b.batch * (b.new * b.prefix + b.new * (b.new + 1) / 2)
    if s.topk is not None:
        fp8 = default_index_dtype(s.kv_dtype).startswith("fp8")
        index_row = s.index_dim * index_itemsize(s.kv_dtype) + (4 if fp8 else 0)     # + its scale
        if b.phase == "decode":
            latent = (s.kv_lora_rank + s.rope_dim) * itemsize
            return float(b.batch * (b.context * index_row + min(s.topk, b.context) * latent))
        chosen = b.batch * _selected(b.prefix, b.context, s.topk)
        return float(2 * s.heads * chosen * (s.head_dim + s.v_head_dim) + 2 * s.index_heads * s.index_dim * pairs)
    if b.phase == "decode":
        row = s.kv_lora_rank + s.rope_dim if s.kind == "mla" else s.kv_heads * (s.head_dim + s.v_head_dim)
        return float(b.batch * b.context * row * itemsize)
    return float(2 * s.heads * pairs * (s.head_dim + s.v_head_dim))


def index_itemsize(kv_dtype: str) -> int:
    """Bytes of one index-key value in the cache's default index dtype beside ``kv_dtype``."""
    return TORCH_KV_DTYPES[default_index_dtype(kv_dtype)].itemsize


def _selected(prefix: int, context: int, topk: int) -> int:
    """sum of min(topk, p + 1) over the query positions p = prefix .. context - 1."""
    lo, hi = prefix + 1, context                      # p + 1 runs over lo .. hi
    top = min(hi, topk)
    ramp = (top * (top + 1) - (lo - 1) * lo) // 2 if top >= lo else 0
    return ramp + topk * max(0, hi - max(lo - 1, topk))


def check(case: Case, out: torch.Tensor) -> float:
    """Worst relative error of ``out`` [T, H_q * D_v] over the sampled query rows, against the
    float64 reference of the same queries over the same cached keys (after the step's write)."""
    b, cache = case.bucket, case.cache
    reqs = sorted({0, b.batch // 2, b.batch - 1})
    offs = sorted({0, b.new // 2, b.new - 1})
    pages = sorted({p for i in reqs for p in case.rows[i]})
    new_id = {p: j for j, p in enumerate(pages)}
    index = torch.tensor(pages, device=cache.device)
    small = PagedKVCache([case.layer.spec], num_pages=len(pages), page_size=cache.page_size, dtype=cache.dtype,
                         device=cache.device, k_scales=dict(cache.k_scales), v_scales=dict(cache.v_scales))
    for name in ("latent", "k", "v", "index_k", "index_k_scale"):
        if 0 in getattr(cache, name):
            getattr(small, name)[0].copy_(getattr(cache, name)[0].index_select(0, index))
    tokens, requests = [], []
    for i in reqs:
        row = [new_id[p] for p in case.rows[i]]
        for j in offs:
            tokens.append(i * b.new + j)
            requests.append(Request(b.prefix + j, 1, row))
    meta = build_batch(requests, page_size=cache.page_size, device=cache.device)
    pick = torch.tensor(tokens, device=cache.device)
    sel = lambda x: None if x is None else x.index_select(0, pick)  # noqa: E731
    if case.indexer is None:
        ref = reference.attention(sel(case.q), sel(case.k), sel(case.v), case.layer, small, meta)
    else:
        ix = case.indexer
        ref = reference_dsa.attention(sel(case.q), sel(case.k), None, case.layer, small, meta,
                                      indexer=IndexerInputs(sel(ix.q), sel(ix.weights), sel(ix.k)))
    got = out.index_select(0, pick).double()
    err = (got - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-30)
    return float(err.max())
