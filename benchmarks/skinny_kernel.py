"""A candidate matrix product for few rows: y = x @ W^T with x [M, K] (M small: a decode
step's tokens) and W [N, K] in Hugging Face's layout, for the decode GEMMs that are bound by
reading W. bench_skinny.py measures it against cuBLAS; the runner does not use it (it tied
cuBLAS: benchmarks/NOTES-engine.md).

Each program owns BLOCK_N output columns (rows of W) and walks K in BLOCK_K steps, so W is
read once, in its own row-major order, and x (a few KB) is re-read from L2 by every program.
Two inner forms (constexpr DOT):
  DOT    acc[BLOCK_N, BLOCK_M] += W_tile @ x_tile^T: the MMA's long side is W's rows, so a
         step of one token pads x to 16 rows, not W; the loads feed the MMA and are
         software-pipelined (num_stages).
  FMA    acc[BLOCK_M, BLOCK_N, BLOCK_K] += x * W, summed over K once at the end: no padding
         (M = 1, 2, 4), CUDA cores.
Either way a row's sum runs in the same order whatever M is (K in BLOCK_K steps, lanes
summed at the end), so a token's output does not depend on the other tokens of the step.
fp32 accumulation, one rounding to y's dtype at the end (as cuBLAS's bf16 GEMMs do).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _skinny_kernel(X, W, Y, M, N, K, stride_xm, stride_wn, stride_ym,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   DOT: tl.constexpr, EVEN_K: tl.constexpr):
    """Program n: y[:, n*BLOCK_N : (n+1)*BLOCK_N] over all M (<= BLOCK_M) rows."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)      # rows of W, columns of y
    rows = tl.arange(0, BLOCK_M)                                   # rows of x and y
    ks = tl.arange(0, BLOCK_K)
    col_ok = cols < N
    row_ok = rows < M
    w_ptr = W + cols.to(tl.int64)[:, None] * stride_wn + ks[None, :]          # [BN, BK]
    x_ptr = X + rows.to(tl.int64)[:, None] * stride_xm + ks[None, :]          # [BM, BK]
    if DOT:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            w = tl.load(w_ptr, mask=col_ok[:, None], other=0.0)
            x = tl.load(x_ptr, mask=row_ok[:, None], other=0.0)
        else:
            k_ok = (k0 + ks) < K
            w = tl.load(w_ptr, mask=col_ok[:, None] & k_ok[None, :], other=0.0)
            x = tl.load(x_ptr, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        if DOT:
            acc = tl.dot(w, tl.trans(x), acc)
        else:
            acc += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
        w_ptr += BLOCK_K
        x_ptr += BLOCK_K
    if DOT:
        out = tl.trans(acc)                                                   # [BM, BN]
    else:
        out = tl.sum(acc, axis=2)
    y_ptr = Y + rows.to(tl.int64)[:, None] * stride_ym + cols[None, :]
    tl.store(y_ptr, out.to(Y.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def skinny_mm(x: torch.Tensor, weight: torch.Tensor, *, block_n: int = 16, block_k: int = 256,
              dot: bool = True, num_warps: int = 4, num_stages: int = 4,
              block_m: int | None = None) -> torch.Tensor:
    """x: [M, K], weight: [N, K] (both 16-bit, last dim dense, same dtype, same device)
    -> x @ weight^T: [M, N] in x's dtype. block_m: x's rows padded to (default: the next power
    of two, at least 16 with ``dot``)."""
    m, k = x.shape
    n = weight.shape[0]
    if weight.shape[1] != k or x.stride(-1) != 1 or weight.stride(-1) != 1 \
            or x.dtype != weight.dtype or x.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"skinny_mm: x {tuple(x.shape)} {x.dtype}, weight {tuple(weight.shape)} "
                         f"{weight.dtype}: want [M, K] and [N, K], 16-bit, last dim dense")
    bm = block_m or max(16 if dot else 1, triton.next_power_of_2(max(m, 1)))
    if m > bm:
        raise ValueError(f"skinny_mm: {m} rows exceed block_m {bm}")
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    _skinny_kernel[(triton.cdiv(n, block_n),)](
        x, weight, y, m, n, k, x.stride(0), weight.stride(0), y.stride(0),
        BLOCK_M=bm, BLOCK_N=block_n, BLOCK_K=block_k, DOT=dot, EVEN_K=k % block_k == 0,
        num_warps=num_warps, num_stages=num_stages)
    return y
