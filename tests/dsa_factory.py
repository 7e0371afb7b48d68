"""Inputs for DeepSeek sparse attention (DSA) layers, shared by every DSA test (docs/dsa.md).

    layer = make_dsa_layer(topk=8, index_heads=4, index_dim=32, dtype="fp32")
    case = make_dsa_case(layer, prefix_lens=[0, 20], new_lens=[9, 1], page_size=16)
    out = backend.forward(*case.args(), backend.prepare(case.meta, case.cache), indexer=case.indexer)
    assert_close(out, case.reference, dtype="fp32")

A case is ``factories.make_case`` (latent cache, random pages, garbage) plus the indexer: the
cached prefix's index keys written through ``cache.write_index``, the step's IndexerInputs, and
the float64 reference (``attnkit.reference_dsa``) taken before any backend runs. Selections
must not hinge on rounding: a draw whose top-k boundary holds two different scores closer than
``NEAR_TIE`` (relative) is drawn again; ``ties=True`` makes exact ties instead (index keys from
a pool of three, so many positions score the same in every precision).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from attnkit import reference_dsa
from attnkit.backends.base import RuntimeLayer
from attnkit.backends.batch import slots_of
from attnkit.backends.sparse import IndexerInputs
from attnkit.model.spec import MLAConfig, SparseTopK
from factories import Case, make_case, make_layer, torch_dtype

NEAR_TIE = 1e-3
SMALL_MLA = MLAConfig(kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32)


def make_dsa_layer(*, topk: int, index_heads: int = 4, index_dim: int = 32, num_heads: int = 4,
                   mla: MLAConfig | None = None, dtype: str = "fp32", device: str = "cpu",
                   seed: int = 0, layer_id: int = 0) -> RuntimeLayer:
    """An MLA RuntimeLayer (random w_kc / w_vc) whose spec has sparse_topk."""
    base = make_layer(kind="mla", num_heads=num_heads, mla=mla or SMALL_MLA, dtype=dtype,
                      device=device, seed=seed, layer_id=layer_id)
    spec = dataclasses.replace(base.spec, sparse_topk=SparseTopK(topk, index_heads, index_dim))
    return RuntimeLayer(spec=spec, w_kc=base.w_kc, w_vc=base.w_vc)


@dataclass
class DSACase:
    """A Case plus its indexer inputs, the reference output and the positions it selected."""
    case: Case
    indexer: IndexerInputs
    reference: torch.Tensor              # float64 [T, H * v_head_dim]
    chosen: list[list[int]]              # per token, the selected positions (ascending)
    boundary_ties: int                   # tokens whose top-k boundary splits exactly equal scores

    def __getattr__(self, name):         # case.q, case.cache, case.meta ...
        return getattr(self.__dict__["case"], name)

    def args(self):
        return self.case.args()


def make_dsa_case(layer: RuntimeLayer, *, prefix_lens, new_lens, page_size: int = 16,
                  dtype: str = "fp32", kv_dtype: str | None = None, index_dtype: str | None = None,
                  device: str = "cpu", seed: int = 0, garbage: bool = False,
                  ties: bool = False) -> DSACase:
    for attempt in range(50):
        dsa = _draw(layer, prefix_lens, new_lens, page_size, dtype, kv_dtype, index_dtype, device,
                    seed + 7919 * attempt, garbage, ties)
        if dsa is not None:
            return dsa
    raise AssertionError("no draw without a near-tie at the top-k boundary in 50 attempts")


def _draw(layer, prefix_lens, new_lens, page_size, dtype, kv_dtype, index_dtype, device, seed,
          garbage, ties) -> DSACase | None:
    sparse = layer.spec.sparse_topk
    case = make_case(layer, prefix_lens=prefix_lens, new_lens=new_lens, page_size=page_size,
                     dtype=dtype, kv_dtype=kv_dtype, device=device, seed=seed, garbage=garbage,
                     index_dtype=index_dtype)
    gen = torch.Generator().manual_seed(50_000 + seed)
    dt = torch_dtype(dtype)
    pool = torch.randn(3, sparse.index_head_dim, generator=gen)

    def keys(n: int) -> torch.Tensor:
        if ties:
            return pool[torch.randint(0, 3, (n,), generator=gen)].to(device=device, dtype=dt)
        return torch.randn(n, sparse.index_head_dim, generator=gen).to(device=device, dtype=dt)

    cached = [s for r in case.requests for s in slots_of(r.block_table, range(r.prefix_len), page_size)]
    if cached:
        case.cache.write_index(layer.layer_id, torch.tensor(cached, device=device), keys(len(cached)))
    t = case.meta.num_tokens
    indexer = IndexerInputs(
        q=torch.randn(t, sparse.index_n_heads, sparse.index_head_dim, generator=gen).to(device=device, dtype=dt),
        weights=torch.randn(t, sparse.index_n_heads, generator=gen).to(device),
        k=keys(t))
    scores = reference_dsa.index_scores(layer, case.cache, case.meta, indexer=indexer)
    ties_at_boundary = 0
    for row in scores:
        if row.numel() <= sparse.topk:
            continue
        top = row.sort(descending=True).values
        gap = (top[sparse.topk - 1] - top[sparse.topk]).item()
        if 0 < gap < NEAR_TIE * max(top.abs().max().item(), 1e-30):
            return None
        ties_at_boundary += gap == 0
    ref = reference_dsa.attention(case.q, case.k, case.v, layer, case.cache, case.meta, indexer=indexer)
    chosen = reference_dsa.selection(layer, case.cache, case.meta, indexer=indexer)
    return DSACase(case, indexer, ref, chosen, ties_at_boundary)
