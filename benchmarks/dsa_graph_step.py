"""bench_dsa's step rows: one DSA layer's whole triton_dsa forward for a decode step (latent and
index-key writes, indexer scores, top-k, the q / out projections, sparse MLA), as a static step
captured in a CUDA graph (the capture contract, backends/static.py) next to the same forward
run eagerly from the step's own metadata (``prepare`` once, then ``forward``: its checks and
launches on the host every call).

Each row checks the static step's output against the eager forward's first (the same kernels
over a wider, -inf padded score row: equal to bf16 rounding) and the captured replay against the
static step run eagerly. The static tables address ``reach`` keys (``max_seq_len``; by default
ctx, so the scores span the eager step's width); a row with reach > ctx prices the capture
contract's fixed width: every replay scores and ranks all ``reach`` positions.
"""
from __future__ import annotations

import torch

import bench_mla as mla
from attnkit.backends.base import RuntimeLayer
from attnkit.backends.batch import Request, build_batch
from attnkit.backends.sparse import IndexerInputs
from attnkit.backends.static import StaticDecode
from attnkit.backends.triton_dsa.backend import TritonDSABackend
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import LayerAttention, SparseTopK

STEP_SHAPES = [(64, 32768), (1, 32768), (8, 32768), (64, 8192), (128, 32768), (64, 32768, 131072),
               (1, 8192, 131072)]      # (batch, ctx[, reach of the static tables])


class StaticDSAStep:
    """One DSA layer (DeepSeek-V3.2 sizes), its cache of ``batch`` requests of ``ctx - 1``
    cached tokens (random latent and index keys, shuffled pages), the eager step and the static
    bucket over the same requests, and the layer inputs q [B, H, nope + R], latent k [B, L + R],
    IndexerInputs (q [B, H_i, D_i], weights [B, H_i], k [B, D_i])."""

    def __init__(self, batch: int, ctx: int, *, reach: int, heads: int, topk: int,
                 index_heads: int, index_dim: int):
        dev, dt, page = mla.DEV, mla.DT, mla.PAGE
        self.spec = LayerAttention(layer_id=0, num_heads=heads, num_kv_heads=1,
                                   head_dim=mla.NOPE + mla.R, v_head_dim=mla.DV, kind="mla",
                                   mla=mla.DSV3, sparse_topk=SparseTopK(topk, index_heads, index_dim))
        g = lambda *s: torch.randn(*s, device=dev, dtype=dt) / mla.L ** 0.5  # noqa: E731
        self.layer = RuntimeLayer(spec=self.spec, w_kc=g(heads, mla.NOPE, mla.L),
                                  w_vc=g(heads, mla.L, mla.DV))
        per = -(-ctx // page)
        scratch = StaticDecode.scratch_need(batch, page)
        owned = batch * per
        self.cache = PagedKVCache([self.spec], num_pages=owned + scratch, page_size=page,
                                  dtype=dt, device=dev)
        self.cache.latent[0].copy_(torch.randn_like(self.cache.latent[0]))
        self.cache.index_k[0].copy_(torch.randn_like(self.cache.index_k[0]))
        perm = torch.randperm(owned).view(batch, per).tolist()
        reqs = [Request(ctx - 1, 1, row) for row in perm]
        self.backend = TritonDSABackend()
        self.eager_meta = build_batch(reqs, page_size=page, device=dev)
        self.eager_step = self.backend.prepare(self.eager_meta, self.cache)
        wide = max(per, -(-reach // page))
        self.static = StaticDecode(max_batch=batch, max_pages=wide, page_size=page,
                                   scratch_pages=range(owned, owned + scratch), device=dev)
        meta = self.static.fill(batch, reqs)
        self.static_step = self.backend.prepare_static(meta, self.cache, max_seq_len=wide * page)
        self.q = torch.randn(batch, heads, mla.NOPE + mla.R, device=dev, dtype=dt)
        self.k = torch.randn(batch, mla.L + mla.R, device=dev, dtype=dt)
        self.ix = IndexerInputs(torch.randn(batch, index_heads, index_dim, device=dev, dtype=dt),
                                torch.randn(batch, index_heads, device=dev) / index_heads ** 0.5,
                                torch.randn(batch, index_dim, device=dev, dtype=dt))

    def eager(self):
        return self.backend.forward(self.q, self.k, None, self.layer, self.cache, self.eager_step,
                                    indexer=self.ix)

    def static_forward(self):
        self.backend.refill_static(self.static_step)
        return self.backend.forward(self.q, self.k, None, self.layer, self.cache, self.static_step,
                                    indexer=self.ix)


def step_row(batch: int, ctx: int, reach: int | None = None, *, reps: int, rel_err, **sizes) -> dict:
    """The row of one shape: eager ms, graph replay ms, their ratio, the checks' errors."""
    reach = reach or ctx
    d = StaticDSAStep(batch, ctx, reach=reach, **sizes)
    want = d.eager()
    err_static = rel_err(d.static_forward(), want)
    if not err_static < 1e-2:
        raise RuntimeError(f"static step B={batch} ctx={ctx}: relative error {err_static:.3g} vs eager")
    held = {}

    def body():                  # the last call (the capture) leaves the graph's output buffer
        held["out"] = d.static_forward()
    run, note = mla.graphed(body) if mla.DEV == "cuda" else (body, None)   # --smoke: eager
    if note is not None:
        raise RuntimeError(f"capture failed: {note}")
    d.q.copy_(d.q.flip(0))       # new inputs in the captured buffers: a replay must see them
    want = d.eager()
    run()
    err_graph = rel_err(held["out"], want)
    if not err_graph < 1e-2:
        raise RuntimeError(f"graph replay B={batch} ctx={ctx}: relative error {err_graph:.3g} vs eager")
    t_eager = mla.time_ms(d.eager, warmup=3, reps=reps, cold_l2=True)
    t_graph = mla.time_ms(run, warmup=3, reps=reps, cold_l2=True)
    return dict(kind="step", batch=batch, ctx=ctx, reach=d.static.max_seq_len, eager_ms=t_eager, graph_ms=t_graph,
                speedup=t_eager / t_graph, rel_err_static=err_static, rel_err_graph=err_graph)
