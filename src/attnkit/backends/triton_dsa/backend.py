"""TritonDSABackend: DeepSeek sparse attention (docs/dsa.md) with Triton kernels.

Per step ``prepare`` turns the batch metadata into each new token's request and position and
the score kernel's token tiles (_step.py), once for every layer. Per DSA layer ``forward``:
1. writes the new latent rows and the indexer's new keys (fp8 index caches: quantised per
   token by the cache, kvcache/index_keys.py);
2. indexer.py: the score kernel rates every cached position <= each token's position, then
   the top-k (torch.topk over packed (score, position) keys: ties to the lower position; a
   token that saw a non-finite index key gets a NaN output row, docs/dsa.md);
3. sparse_mla.py: q_lat = q_nope @ w_kc (torch bmm), absorbed MLA over each token's selected
   latent rows only, out = out_lat @ w_vc (torch bmm).
Decode, prefill, extend and mixed steps are the same calls: every token carries its own
position and its own selection.

CUDA graphs (the capture contract of backends/base.py): ``capture_plan`` gives a static
decode bucket a step over the metadata's own buffers (_step.static_step), scored over the
longest KV its tables address, so that a forward makes no host synchronisation and launches
the same grids at every replay; the index-key and latent writes go through the static slot
mapping inside the graph.
"""
from __future__ import annotations

import torch

from attnkit.backends.base import (AttentionBackend, RuntimeLayer, StepState, check_int_option,
                                   check_kernel_tables)
from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.backends.triton_dsa._step import build_step, static_step
from attnkit.backends.triton_dsa.declaration import DECLARATION
from attnkit.backends.triton_dsa.indexer import head_rows, index_scores, topk_and_nan_rows
from attnkit.backends.triton_dsa.sparse_mla import sparse_mla, sparse_tile, ws_ready, ws_tile
from attnkit.registry.kernels import KernelTable

KEYS_BYTES = 1 << 30     # the score kernel's int64 keys held at once (tokens x context x 8 B)
DEFAULT_TABLES = {role: KernelTable(role, fallback=tuple(k.name for k in DECLARATION.variants_for(role)))
                  for role in ("prefill", "extend", "decode")}


class TritonDSABackend(AttentionBackend):
    """Options (keyword-only): ``kernels``, the plan's kernel tables ({role: KernelTable}:
    variants sparse_ws, sparse_tile; Plan.run.backend_options); launch overrides for tests
    and benchmarks: ``num_splits`` (splits of each token's index list, either kernel),
    ``block_h``, ``block_n``, ``num_warps``, ``num_stages`` (the Triton kernel's tile: given
    any, sparse_tile runs); of the score kernel: ``index_block_n``; ``keys_bytes``: the most
    memory the indexer's top-k keys take at once (tests: small, so that a step is scored in
    several token chunks)."""
    name = "triton_dsa"
    declaration = DECLARATION

    def __init__(self, *, kernels=None, num_splits: int | None = None, block_h: int | None = None,
                 block_n: int | None = None, num_warps: int | None = None,
                 num_stages: int | None = None, index_block_n: int | None = None,
                 keys_bytes: int = KEYS_BYTES):
        for option, value, pow2 in (("num_splits", num_splits, False), ("block_h", block_h, True),
                                    ("block_n", block_n, True), ("num_stages", num_stages, False),
                                    ("index_block_n", index_block_n, True)):
            check_int_option(self.name, option, value, power_of_two=pow2,
                             minimum=16 if option in ("block_h", "block_n", "index_block_n") else 1)
        check_int_option(self.name, "num_warps", num_warps, power_of_two=True, maximum=32)
        check_int_option(self.name, "keys_bytes", keys_bytes)
        self.keys_bytes = keys_bytes
        self.overrides = {k: v for k, v in (("num_splits", num_splits), ("block_h", block_h),
                                            ("block_n", block_n), ("num_warps", num_warps),
                                            ("num_stages", num_stages)) if v is not None}
        self.index_block_n = index_block_n or 64
        self.kernels = check_kernel_tables(self.name, kernels, DECLARATION)

    def _prepare(self, meta: BatchMetadata, cache) -> StepState:
        rows = {head_rows(l.sparse_topk.index_n_heads) for l in cache.specs.values()
                if getattr(l, "sparse_topk", None) is not None}
        return StepState(meta=meta, prepared=build_step(meta, cache.device, head_rows=max(rows, default=16)))

    def static_reaches(self, batch: int, max_seq_len: int) -> tuple[int, ...]:
        """Where the plan's decode table changes its first variant below ``max_seq_len``."""
        return (self.kernels.get("decode") or DEFAULT_TABLES["decode"]).reaches(batch, 1, max_seq_len)

    def capture_plan(self, meta: BatchMetadata, cache, *, max_seq_len: int) -> StepState:
        """A static decode step: one token a row, scores over ``max_seq_len`` positions."""
        return StepState(meta=meta, prepared=static_step(meta, max_seq_len=max_seq_len))

    def _forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState, *, indexer=None):
        """q: [T, H, nope + rope]; k: latent [T, L + R]; v: None; indexer: IndexerInputs
        (q [T, H_i, D_i], weights [T, H_i] fp32, k [T, D_i]). Returns [T, H * v_head_dim]."""
        spec, meta, st = layer.spec, step.meta, step.prepared
        mla = spec.mla
        T, H = q.shape[0], q.shape[1]
        if T == 0:
            return q.new_empty(0, H * mla.v_head_dim)
        lid = spec.layer_id
        cache.store(lid, meta.slot_mapping, k, None)
        cache.store_index(lid, meta.slot_mapping, indexer.k)
        indices, nan_rows = self._select(indexer, cache, lid, st, spec.sparse_topk.topk)
        nope, L = mla.qk_nope_head_dim, mla.kv_lora_rank
        q_lat = torch.bmm(q[..., :nope].transpose(0, 1), layer.w_kc.to(q.dtype))      # [H, T, L]
        q_cat = torch.cat([q_lat.transpose(0, 1), q[..., nope:]], dim=-1)              # [T, H, L+R]
        tile = self._sparse_launch(q_cat, cache.latent[lid], indices.shape[1], L, meta, st)
        kv_scale = float(cache.k_scales[lid]) if cache.is_fp8 else 1.0
        out_lat = sparse_mla(q_cat, cache.latent[lid], st.block_tables, st.token_request, indices,
                             scale=spec.softmax_scale, L=L, kv_scale=kv_scale, **tile)
        out = torch.bmm(out_lat.transpose(0, 1), layer.w_vc.to(q.dtype)).transpose(0, 1)
        out = out.reshape(T, H * mla.v_head_dim)
        # a token that saw a non-finite index key has no selection to trust (docs/dsa.md)
        return out.masked_fill(nan_rows[:, None], float("nan"))

    def _sparse_launch(self, q_cat, latent, topk: int, L: int, meta: BatchMetadata, st) -> dict:
        """sparse_mla's launch keywords: the first variant of the plan's table for this step
        (its nearest bucket's, fastest first; without a plan, declaration order) that can
        take the call (sparse_ws: ws_ready), else sparse_tile, which takes every call. The
        step's point comes from its own tensors' shapes and ``st.max_kv`` (a static step's
        forward reads no host list of the metadata)."""
        role = ("decode" if meta.mode is ForwardMode.DECODE else
                "prefill" if not any(meta.prefix_lens_cpu) else "extend")
        table = self.kernels.get(role) or DEFAULT_TABLES[role]
        batch = max(1, st.block_tables.shape[0])
        new = max(1, round(q_cat.shape[0] / batch))
        names = table.candidates(batch, new, max(new, st.max_kv))
        splits = {k: v for k, v in self.overrides.items() if k == "num_splits"}
        tiled = len(splits) < len(self.overrides)         # a Triton tile override was given
        for variant in (*names, "sparse_tile"):
            if variant == "sparse_ws" and not tiled and ws_ready(q_cat, latent, L=L):
                return ws_tile(q_cat, topk) | splits
            if variant == "sparse_tile":
                return sparse_tile(q_cat, topk, L=L) | self.overrides

    def _select(self, indexer, cache, lid: int, st, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
        """([T, topk] int32 selected positions, [T] bool rows that saw a non-finite index key):
        the score kernel's packed keys, then their top-k, over chunks of the step's tokens
        whose keys [tokens, max_kv] int64 stay within ``keys_bytes`` (a long prefill over a
        long context would need tens of GB at once)."""
        (block_t, (tile_req, tile_tok)), = st.tiles.items()
        S = -(-max(st.max_kv, 1) // self.index_block_n) * self.index_block_n
        per_chunk = max(1, self.keys_bytes // (8 * S))
        T = st.token_request.numel()
        out = torch.empty(T, topk, dtype=torch.int32, device=st.token_request.device)
        nan_rows = torch.empty(T, dtype=torch.bool, device=out.device)
        for a, b, w0, w1 in st.chunks(per_chunk):
            keys = index_scores(indexer.q[a:b], indexer.weights[a:b], cache.index_k[lid],
                                cache.index_k_scale.get(lid), st.block_tables,
                                st.token_request[a:b], st.token_position[a:b], max_kv=st.max_kv,
                                block_t=block_t, block_n=self.index_block_n, packed=True,
                                tiles=(tile_req[w0:w1], tile_tok[w0:w1] - a))
            out[a:b], nan_rows[a:b] = topk_and_nan_rows(keys, st.token_position[a:b], topk)
        return out, nan_rows
