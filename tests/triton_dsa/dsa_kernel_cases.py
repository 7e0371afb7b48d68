"""Inputs for the triton_dsa kernel tests, and their float64 oracle written from the DSA
definition (docs/dsa.md), independent of the kernels: paged caches with shuffled pages and
NaN in every page no request owns."""
from __future__ import annotations

from dataclasses import dataclass

import torch

FP8 = torch.float8_e4m3fn


@dataclass
class Case:
    q_idx: torch.Tensor        # [T, H_i, D_i]
    weights: torch.Tensor      # [T, H_i] fp32
    index_k: torch.Tensor      # [pages, page, D_i]
    index_k_scale: torch.Tensor | None   # [pages, page] fp32 (fp8 keys)
    q_lat: torch.Tensor        # [T, H, L + R]
    latent: torch.Tensor       # [pages, page, L + R]
    block_table: torch.Tensor  # [B, P] int32
    token_request: torch.Tensor    # [T] int32
    token_position: torch.Tensor   # [T] int32
    seq_lens: list[int]
    L: int
    scale: float

    @property
    def max_kv(self) -> int:
        return max(self.seq_lens)


def make(*, prefix: list[int], new: list[int], page: int, heads: int = 16, L: int = 64,
         R: int = 16, idx_heads: int = 16, idx_dim: int = 16, dtype=torch.float32,
         index_dtype=None, device="cpu", seed: int = 0, integer: bool = False) -> Case:
    """Requests with ``prefix[b]`` cached and ``new[b]`` new tokens (all keys already in the
    caches). ``integer``: small-integer indexer inputs, so fp32 scores are exact and ties
    are common."""
    g = torch.Generator().manual_seed(seed)
    seq = [p + n for p, n in zip(prefix, new)]
    per_req = [-(-s // page) for s in seq]
    P = max(per_req)
    pages = sum(per_req) + 3                                 # 3 pages nobody owns
    perm = torch.randperm(pages, generator=g)
    table = torch.zeros(len(seq), P, dtype=torch.int32)
    at = 0
    for b, n in enumerate(per_req):
        table[b, :n] = perm[at:at + n].to(torch.int32)
        table[b, n:] = perm[-1]                              # an unowned page, full of NaN
        at += n
    unowned = perm[at:]
    if integer:
        index_k = torch.randint(-2, 3, (pages, page, idx_dim), generator=g).float()
        q_idx = torch.randint(-2, 3, (sum(new), idx_heads, idx_dim), generator=g).float()
        weights = torch.randint(-1, 3, (sum(new), idx_heads), generator=g).float() / 4
    else:
        index_k = torch.randn(pages, page, idx_dim, generator=g)
        q_idx = torch.randn(sum(new), idx_heads, idx_dim, generator=g)
        weights = torch.randn(sum(new), idx_heads, generator=g) / idx_heads ** 0.5
    latent = torch.randn(pages, page, L + R, generator=g)
    q_lat = torch.randn(sum(new), heads, L + R, generator=g)
    k_scale = None
    if index_dtype == FP8:
        k_scale = torch.rand(pages, page, generator=g) * 0.5 + 0.25
        index_k = (index_k / k_scale[..., None]).to(FP8)
    else:
        index_k = index_k.to(index_dtype or dtype)
    index_k = index_k.clone()
    latent = latent.to(dtype)
    _poison(index_k, unowned)
    _poison(latent, unowned)
    req = torch.cat([torch.full((n,), b, dtype=torch.int32) for b, n in enumerate(new)])
    pos = torch.cat([torch.arange(p, p + n, dtype=torch.int32) for p, n in zip(prefix, new)])
    for b, s in enumerate(seq):                              # stale slots past the request
        last = int(table[b, per_req[b] - 1])
        _poison(latent[last], slice(s % page or page, None))
        _poison(index_k[last], slice(s % page or page, None))
    return Case(q_idx.to(dtype).to(device), weights.to(device), index_k.to(device),
                None if k_scale is None else k_scale.to(device), q_lat.to(dtype).to(device),
                latent.to(device), table.to(device), req.to(device), pos.to(device), seq, L,
                1.0 / (L + R) ** 0.5)


def _poison(cache: torch.Tensor, where) -> None:
    """NaN into cache[where] (fp8 e4m3: its NaN byte 0x7F)."""
    if cache.dtype == FP8:
        cache.view(torch.uint8)[where] = 0x7F
    else:
        cache[where] = float("nan")


def _rows(cache: torch.Tensor, table_row: torch.Tensor, positions) -> torch.Tensor:
    """cache rows of a request's ``positions`` through its block-table row."""
    pos = torch.as_tensor(list(positions), dtype=torch.int64)
    page = cache.shape[1]
    return cache[table_row.long()[pos // page], pos % page]


def ref_scores(case: Case, t: int) -> torch.Tensor:
    """[p + 1] float64 indexer scores of token t over positions 0..p."""
    r, p = int(case.token_request[t]), int(case.token_position[t])
    k = _rows(case.index_k.cpu(), case.block_table[r].cpu(), range(p + 1)).double()
    if case.index_k_scale is not None:
        k = k * _rows(case.index_k_scale.cpu()[..., None], case.block_table[r].cpu(),
                      range(p + 1)).double()
    q = case.q_idx[t].cpu().double()                       # [H_i, D_i]
    w = case.weights[t].cpu().double()
    return (torch.relu(q @ k.T) * w[:, None]).sum(0)


def ref_topk(case: Case, t: int, topk: int) -> list[int]:
    """The selected positions: best score first, equal scores lower position first."""
    s = ref_scores(case, t).tolist()
    return sorted(range(len(s)), key=lambda i: (-s[i], i))[:topk]


def ref_logits(case: Case, t: int, positions) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [H, n], latent rows [n, L + R]) float64 of token t over ``positions``."""
    r = int(case.token_request[t])
    rows = _rows(case.latent.cpu(), case.block_table[r].cpu(), positions).double()
    return case.scale * case.q_lat[t].cpu().double() @ rows.T, rows


def ref_attention(case: Case, t: int, positions) -> torch.Tensor:
    """[H, L] float64 MLA (absorbed) attention of token t over ``positions`` only."""
    logits, rows = ref_logits(case, t, positions)
    return torch.softmax(logits, dim=-1) @ rows[:, :case.L]
