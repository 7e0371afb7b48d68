"""Drive the dual_chunk backend through whole sequences, step by step, like an engine would.

    seqs = make_seqs(layer.spec, [20, 13], seed=0)
    run = run_steps(layer, seqs, steps=[[12, 13], [8, 0]], page_size=3)
    run.outputs[0]          # [20, H_q, D_v] float64: every token's output, in position order
    reference(layer.spec, seqs[0], run.lengths[0])   # the dense float64 DCA of the same tokens

Each step: build the batch (random, non-contiguous pages), rotate the step's raw q/k with
DualChunkRotary at meta.positions and the step's length scales, call the backend. ``lengths``
records, per request and token, the L its length scale was computed from, so the reference
scales the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnkit.backends.batch import Request, build_batch
from factories import ZeroLast, fill_garbage
from attnkit.backends.dual_chunk.backend import DualChunkBackend
from attnkit.kvcache.allocator import PageAllocator
from attnkit.kvcache.paged import PagedKVCache
from attnkit.reference_dca import dual_chunk_reference
from attnkit.runner.layers.rotary import DualChunkRotary, step_length_scales

BASE = 10000.0


@dataclass
class Seq:
    """Raw (unrotated) projections of one request's whole sequence: [L, H, D]."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor

    @property
    def length(self) -> int:
        return self.q.shape[0]


@dataclass
class Run:
    outputs: list[torch.Tensor]        # per request [done, H_q, D_v] float64 (CPU)
    lengths: list[list[int]]           # per request, per token: L of its length scale
    cache: object = None               # the PagedKVCache the run wrote
    rows: list[list[int]] | None = None   # per request, its block-table row

    def cached_kv(self, layer, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Request i's K (rotated, scaled) and V as the cache holds them, dequantised to
        float64 on the CPU: [n, H_kv, D], [n, H_kv, D_v] (for fp8 caches)."""
        from attnkit.backends.paged_torch import read_kv

        table = torch.tensor([self.rows[i]], dtype=torch.int32, device=self.cache.device)
        k, v = read_kv(self.cache, layer, table, len(self.lengths[i]), torch.float64)
        return k[0].cpu(), v[0].cpu()


def make_seqs(spec, lengths, *, seed: int = 0, dtype=torch.float32, device="cpu") -> list[Seq]:
    gen = torch.Generator().manual_seed(seed)

    def rand(n, h, d):
        return torch.randn(n, h, d, generator=gen).to(device=device, dtype=dtype)

    return [Seq(rand(n, spec.num_heads, spec.head_dim), rand(n, spec.num_kv_heads, spec.head_dim),
                rand(n, spec.num_kv_heads, spec.value_dim)) for n in lengths]


def run_steps(layer, seqs: list[Seq], steps: list[list[int]], *, page_size: int,
              device="cpu", prompt_lens: list[int] | None = None, seed: int = 0,
              backend=None, kv_dtype=None, kv_scales: tuple[float, float] = (1.0, 1.0),
              extra_pages: int = 0, garbage: bool = False) -> Run:
    """steps[s][i]: new tokens of request i at step s (0 = not in that step).
    prompt_lens: the L every prefill step of request i scales with (the literal rule); None
    uses the KV length after each step. kv_dtype: the cache's (default q's dtype);
    kv_scales: its (K, V) scales (fp8 pages hold value / scale). extra_pages: pages each
    block-table row holds past what its sequence needs (allocated, never written).
    garbage: no request owns page 0, and every slot holds NaN / +-inf until a step writes it
    (factories.fill_garbage), so a read of anything but a request's own written keys shows."""
    spec = layer.spec
    cfg = spec.dual_chunk
    backend = backend or DualChunkBackend()
    rotary = DualChunkRotary(cfg, base=BASE)
    pages = [-(-s.length // page_size) + extra_pages for s in seqs]
    alloc = PageAllocator(sum(pages) + 2, page_size=page_size,
                          shuffle=ZeroLast(seed) if garbage else seed)
    rows = [alloc.allocate(i, n * page_size) for i, n in enumerate(pages)]
    cache = PagedKVCache([spec], num_pages=alloc.num_pages, page_size=page_size,
                         dtype=kv_dtype or seqs[0].q.dtype, device=device,
                         k_scales={spec.layer_id: kv_scales[0]}, v_scales={spec.layer_id: kv_scales[1]})
    if garbage:
        fill_garbage(cache, spec.layer_id, keep=())
    done = [0] * len(seqs)
    outs: list[list[torch.Tensor]] = [[] for _ in seqs]
    lens: list[list[int]] = [[] for _ in seqs]
    for step in steps:
        active = [i for i, n in enumerate(step) if n]
        reqs = [Request(done[i], step[i], rows[i]) for i in active]
        meta = build_batch(reqs, page_size=page_size, device=device)
        L = [prompt_lens[i] if prompt_lens and done[i] + step[i] <= prompt_lens[i]
             else done[i] + step[i] for i in active]
        scales = step_length_scales(meta, cfg, lengths=L)
        q = torch.cat([seqs[i].q[done[i]:done[i] + step[i]] for i in active])
        k = torch.cat([seqs[i].k[done[i]:done[i] + step[i]] for i in active])
        v = torch.cat([seqs[i].v[done[i]:done[i] + step[i]] for i in active])
        q3, k_rot = rotary(q, k, meta.positions, length_scale=scales)
        out = backend.forward(q3, k_rot, v, layer, cache, backend.prepare(meta, cache))
        assert out.dtype == q.dtype and out.shape == (meta.num_tokens, spec.num_heads * spec.value_dim)
        out = out.view(meta.num_tokens, spec.num_heads, spec.value_dim).double().cpu()
        start = 0
        for i, n_len in zip(active, L):
            outs[i].append(out[start:start + step[i]])
            lens[i] += [n_len] * step[i]
            start += step[i]
            done[i] += step[i]
    return Run([torch.cat(o) for o in outs], lens, cache, rows)


def reference(spec, seq: Seq, lengths: list[int] | None = None, positions=None,
              cached: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Dense float64 DCA of ``positions`` (default all) of ``seq``: [n, H_q, D_v] on CPU.
    cached: (K, V) read back from the run's cache (Run.cached_kv) to use instead of seq's
    raw keys and values: the fp8 rounding then reaches the oracle too."""
    n = len(lengths) if lengths is not None else seq.length
    positions = list(range(n)) if positions is None else list(positions)
    q_len = None if lengths is None else [lengths[p] for p in positions]
    keys, values = (None, seq.v[:n]) if cached is None else cached
    return dual_chunk_reference(
        seq.q[positions].double().cpu(), seq.k[:n].double().cpu(), values.double().cpu(),
        config=spec.dual_chunk, q_positions=positions, rope_base=BASE,
        scale=spec.softmax_scale, q_lengths=q_len, k_lengths=lengths, cached_keys=keys)
