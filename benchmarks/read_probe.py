"""Read-only probes of the decode kernel's memory traffic (issue 28, the B=16 rows): kernels
that read exactly the K/V bytes a decode reads, in the decode grid's order, and do no
attention. Measured (NOTES-triton.md version 6): they are NOT ceilings — Triton 3.6 does not
software-pipeline their loop (ncu: 2 KB of shared memory, no K/V buffers), so every program
waits for each tile; they compare access patterns at one and the same (unpipelined) depth.

- ``read_paged``: grid (requests, KV heads / HEADS, splits) as decode.py's; split s reads keys
  [s * chunk, min((s + 1) * chunk, L)) of HEADS adjacent KV heads through the block table, one
  [BLOCK_N, HEADS * D] tile of K and of V per step (HEADS = 1: the decode's own loads; 2, 4:
  decode PACK's wider rows). Given an identity block table over the gathered (unshuffled)
  cache it reads the memory layout cuDNN reads ([B, L, H_kv, D]).
- ``read_pages_tma``: the same grid and keys, one tensor-descriptor (TMA) copy of a
  [PAGE, D] box per page of K and of V (the "page-aware loads" candidate of the brief).

Each program folds what it read into a [HEADS * D] float32 column sum, written to ``out``
([B, H_kv / HEADS, S, HEADS * D]) so no load is dead code; ``reference`` computes it with torch.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _read_paged_kernel(K, V, Out, BlockTables, chunk, kv_len, stride_kp, stride_kt, stride_bt,
                       num_groups, PAGE: tl.constexpr, BLOCK_N: tl.constexpr, W: tl.constexpr,
                       HEADS_FASTEST: tl.constexpr):
    if HEADS_FASTEST:          # grid (groups, requests, splits): a request's heads launch together
        g, b = tl.program_id(0), tl.program_id(1)
    else:                      # decode.py's order: (requests, groups, splits)
        b, g = tl.program_id(0), tl.program_id(1)
    sp = tl.program_id(2)
    offs_w = tl.arange(0, W)
    acc = tl.zeros([W], tl.float32)
    lo = sp * chunk
    hi = tl.minimum(lo + chunk, kv_len)
    bt_row = BlockTables + b.to(tl.int64) * stride_bt
    for n0 in range(lo, hi, BLOCK_N):        # chunk and kv_len are whole tiles (the host checks)
        offs_n = n0 + tl.arange(0, BLOCK_N)
        page = tl.load(bt_row + offs_n // PAGE).to(tl.int64)
        row = page * stride_kp + (offs_n % PAGE).to(tl.int64) * stride_kt + g * W
        k = tl.load(K + row[:, None] + offs_w[None, :])
        v = tl.load(V + row[:, None] + offs_w[None, :])
        acc += tl.sum(k.to(tl.float32) + v.to(tl.float32), 0)
    slot = (b * num_groups + g) * tl.num_programs(2) + sp
    tl.store(Out + slot.to(tl.int64) * W + offs_w, acc)


@triton.jit
def _read_pages_tma_kernel(k_desc, v_desc, Out, BlockTables, chunk, kv_len, stride_bt,
                           PAGE: tl.constexpr, D: tl.constexpr):
    b, g, sp = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    acc = tl.zeros([D], tl.float32)
    lo = sp * chunk
    hi = tl.minimum(lo + chunk, kv_len)
    bt_row = BlockTables + b.to(tl.int64) * stride_bt
    for n0 in range(lo, hi, PAGE):
        page = tl.load(bt_row + n0 // PAGE)
        k = k_desc.load([page * PAGE, g * D])
        v = v_desc.load([page * PAGE, g * D])
        acc += tl.sum(k.to(tl.float32) + v.to(tl.float32), 0)
    slot = (b * tl.num_programs(1) + g) * tl.num_programs(2) + sp
    tl.store(Out + slot.to(tl.int64) * D + tl.arange(0, D), acc)    # grid (requests, heads, splits)


def split_chunk(kv_len: int, splits: int, block_n: int) -> int:
    """Keys per split in whole tiles (decode.py's rule for one request)."""
    return -(-(-(-kv_len // splits)) // block_n) * block_n


def read_paged(k_cache, v_cache, block_tables, kv_len: int, *, splits: int, heads: int = 1,
               block_n: int = 64, num_warps: int = 4, num_stages: int = 4,
               heads_fastest: bool = False):
    """k_cache / v_cache: [P, PAGE, H_kv, D] (contiguous); block_tables: [B, pages] int32.
    Returns the launcher (a no-argument callable) and its output [B, H_kv / heads, S, heads * D];
    ``heads_fastest``: the grid's first axis is the head groups (a request's programs adjacent)."""
    num_reqs = block_tables.shape[0]
    h_kv, d = k_cache.shape[2], k_cache.shape[3]
    chunk = split_chunk(kv_len, splits, block_n)
    if kv_len % block_n or h_kv % heads or not k_cache.is_contiguous():
        raise ValueError(f"read_paged: keys {kv_len} not whole {block_n}-key tiles, "
                         f"{h_kv} KV heads not in groups of {heads}, or a strided cache")
    shape = (num_reqs, h_kv // heads, -(-kv_len // chunk))
    out = torch.empty(*shape, heads * d, dtype=torch.float32, device=k_cache.device)
    grid = (shape[1], shape[0], shape[2]) if heads_fastest else shape

    def run():
        _read_paged_kernel[grid](k_cache, v_cache, out, block_tables, chunk, kv_len,
                                 k_cache.stride(0), k_cache.stride(1), block_tables.stride(0),
                                 shape[1], PAGE=k_cache.shape[1], BLOCK_N=block_n, W=heads * d,
                                 HEADS_FASTEST=heads_fastest, num_warps=num_warps,
                                 num_stages=num_stages)
        return out
    return run, out


def read_pages_tma(k_cache, v_cache, block_tables, kv_len: int, *, splits: int,
                   num_warps: int = 4, num_stages: int = 4):
    """read_paged with HEADS = 1 through tensor descriptors, one [PAGE, D] copy per page."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    num_pages, page, h_kv, d = k_cache.shape
    chunk = split_chunk(kv_len, splits, page)
    flat = lambda x: TensorDescriptor(x, [num_pages * page, h_kv * d], [h_kv * d, 1],  # noqa: E731
                                      [page, d])
    k_desc, v_desc = flat(k_cache), flat(v_cache)
    grid = (block_tables.shape[0], h_kv, -(-kv_len // chunk))
    out = torch.empty(*grid, d, dtype=torch.float32, device=k_cache.device)

    def run():
        _read_pages_tma_kernel[grid](k_desc, v_desc, out, block_tables, chunk, kv_len,
                                     block_tables.stride(0), PAGE=page, D=d,
                                     num_warps=num_warps, num_stages=num_stages)
        return out
    return run, out


def reference(k_cache, v_cache, block_tables, kv_len: int, *, heads: int,
              chunk: int) -> torch.Tensor:
    """The probes' output by torch: per (request, head group, split) the column sums."""
    num_reqs = block_tables.shape[0]
    page, h_kv, d = k_cache.shape[1:]
    pos = torch.arange(kv_len, device=k_cache.device)
    slots = block_tables.long()[:, pos // page] * page + pos % page                 # [B, L]
    k = k_cache.reshape(-1, h_kv * d)[slots].float()
    v = v_cache.reshape(-1, h_kv * d)[slots].float()
    kv = (k + v).view(num_reqs, kv_len, h_kv // heads, heads * d)
    parts = [kv[:, s:s + chunk].sum(1) for s in range(0, kv_len, chunk)]
    return torch.stack(parts, 2)                                   # [B, groups, S, heads * D]
