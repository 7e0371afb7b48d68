"""DSA lightning indexer on the paged index-key cache: score kernel, then top-k.

Per query token ``t`` (absolute position ``p`` in request ``r``) and cached key ``s <= p``:
    score[t, s] = sum_h weights[t, h] * relu(q[t, h] . k_s)       (k_s dequantized)
Keys ``s > p`` score ``-inf`` and are never read (a page past the prefix may hold anything).

Score kernel: one program = ``BLOCK_T`` consecutive tokens of ONE request x ``BLOCK_N`` key
positions. The tile's queries [BLOCK_T * H_i, D_i] are one dot against the gathered key tile
[BLOCK_N, D_i] (decode: BLOCK_T = 1, the 64 indexer heads fill the MMA rows; prefill: several
tokens share each key read). fp8 keys are cast to the query dtype for the dot and their
per-token scale multiplies the product before the ReLU.

Top-k (``topk_of_keys``): torch.topk on the GPU (no Triton select yet) over int64 keys that
pack (the fp32 score as an order-preserving int32, 2^32 - 1 - position), so equal scores
rank the LOWER position first and the result does not depend on topk's tie handling. The
score kernel writes these keys itself (``packed=True``), so the float scores never make a
round trip through memory; ``pack_keys`` builds the same keys from float scores.

Non-finite index keys (docs/dsa.md): a cached key holding a NaN or inf (or an fp8 key whose
scale is) makes q . k non-finite for every head, so the kernel scores that position NaN, and
every NaN packs to one key above all others (``NAN_BITS``); ``topk_and_nan_rows`` reads it off
each row's best key. The backend makes such a token's output row NaN.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

INF_BITS = 0x7F800000    # +inf as int32 bits: above it (as ordered keys) only NaN, packed as
NAN_BITS = 0x7FFFFFFF    # this one NaN, the largest key there is


@triton.jit
def _index_score_kernel(
    Q, W, K, KScale, BlockTables, TileReq, TileTok, TokReq, TokPos, Scores,
    stride_qt, stride_qh, stride_wt, stride_kp, stride_ks, stride_sp, stride_bt, stride_st,
    T, H,
    HP: tl.constexpr, D: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr, HAS_SCALE: tl.constexpr, DOT_PREC: tl.constexpr,
    PACKED: tl.constexpr,
):
    """Q: [T, H, D]; W: [T, H] fp32; K: [pages, PAGE_SIZE, D] (KScale [pages, PAGE_SIZE] fp32
    when HAS_SCALE); BlockTables: [B, P] int32; TileReq / TileTok: [W] request and first
    token of each tile (its tokens: the next BLOCK_T of that request); TokReq / TokPos: [T]
    int32 request and absolute position of each token; Scores: [T, S] fp32, or with PACKED
    the int64 top-k keys of pack_keys (the scores never leave the kernel as floats).
    Each token takes HP >= H rows (a power of two, >= 16 for the MMA); rows past H read 0.
    Grid (tiles, ceil(S / BLOCK_N))."""
    BLOCK_M: tl.constexpr = BLOCK_T * HP
    w = tl.program_id(0)
    nb = tl.program_id(1)
    req = tl.load(TileReq + w)
    tok0 = tl.load(TileTok + w)
    rows = tl.arange(0, BLOCK_M)
    tok = tok0 + rows // HP                     # [BLOCK_M] the token of each query row
    head = rows % HP
    tok_t = tok0 + tl.arange(0, BLOCK_T)        # [BLOCK_T]
    t_ok = tok_t < T
    t_ok = t_ok & (tl.load(TokReq + tok_t, mask=t_ok, other=-1) == req)
    pos_t = tl.load(TokPos + tok_t, mask=t_ok, other=-1)
    row_ok = tok < T
    row_ok = row_ok & (tl.load(TokReq + tok, mask=row_ok, other=-1) == req) & (head < H)
    p_max = tl.max(pos_t, axis=0)             # keys past it are never read

    offs_n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    k_ok = offs_n <= p_max
    if nb * BLOCK_N <= p_max:
        q = tl.load(Q + tok[:, None].to(tl.int64) * stride_qt + head[:, None] * stride_qh
                    + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        wt = tl.load(W + tok.to(tl.int64) * stride_wt + head, mask=row_ok, other=0.0)
        page = tl.load(BlockTables + req * stride_bt + offs_n // PAGE_SIZE, mask=k_ok, other=0)
        page = page.to(tl.int64)
        k = tl.load(K + page[:, None] * stride_kp + (offs_n % PAGE_SIZE)[:, None] * stride_ks
                    + offs_d[None, :], mask=k_ok[:, None], other=0.0).to(q.dtype)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)          # [BLOCK_M, BLOCK_N]
        if HAS_SCALE:
            ks = tl.load(KScale + page * stride_sp + offs_n % PAGE_SIZE, mask=k_ok, other=0.0)
            qk = qk * ks[None, :]
        # a non-finite key (NaN / inf, or its fp8 scale) makes every head's product
        # non-finite: its score is NaN (relu alone may turn NaN into 0 on the GPU)
        part = tl.where(tl.abs(qk) < float("inf"), tl.maximum(qk, 0.0) * wt[:, None], float("nan"))
        score = tl.sum(tl.reshape(part, [BLOCK_T, HP, BLOCK_N]), axis=1)  # [BLOCK_T, BLOCK_N]
    else:
        score = tl.zeros([BLOCK_T, BLOCK_N], tl.float32)
    seen = offs_n[None, :] <= pos_t[:, None]
    score = tl.where(seen, score, float("-inf"))
    if PACKED:
        # -0.0 becomes 0.0 (they tie); a where, as a compiler may fold away x + 0.0
        bits = tl.where(score == 0.0, 0.0, score).to(tl.int32, bitcast=True)
        bits = tl.where(score != score, 2147483647, bits)      # every NaN: NAN_BITS, the top key
        ordered = tl.where(bits < 0, bits ^ 2147483647, bits).to(tl.int64)
        low = 4294967295 - offs_n.to(tl.int64)
        out = (ordered << 32) | low[None, :]
    else:
        out = score
    tl.store(Scores + tok_t[:, None].to(tl.int64) * stride_st + offs_n[None, :], out,
             mask=t_ok[:, None])


def token_tiles(token_request: torch.Tensor, block_t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiles of up to ``block_t`` consecutive tokens of one request (tokens grouped by
    request, as in a step): (request [W] int32, first token [W] int32). With block_t 1 this
    is every token and needs no host synchronisation."""
    T = token_request.numel()
    dev = token_request.device
    tok = torch.arange(T, dtype=torch.int32, device=dev)
    if block_t == 1:
        return token_request.to(torch.int32), tok
    new_req = torch.ones(T, dtype=torch.bool, device=dev)
    new_req[1:] = token_request[1:] != token_request[:-1]
    seg_start = torch.cummax(torch.where(new_req, tok, torch.zeros_like(tok)), 0).values
    first = new_req | ((tok - seg_start) % block_t == 0)
    starts = tok[first]
    return token_request[starts].to(torch.int32), starts


def head_rows(heads: int) -> int:
    """Query rows a token takes in the score kernel: a power of two, at least 16 (the MMA)."""
    return max(16, triton.next_power_of_2(heads))


def index_scores(q, weights, index_k, index_k_scale, block_table, token_request, token_position,
                 *, max_kv: int, block_t: int = 1, block_n: int = 64, num_warps: int = 4,
                 num_stages: int = 2, tiles=None, packed: bool = False) -> torch.Tensor:
    """scores [T, S] fp32, S = ceil(max_kv / block_n) * block_n, -inf past each token's
    position. q: [T, H_i, D_i]; weights: [T, H_i] fp32; index_k: [pages, page, D_i] (any
    compute dtype, or fp8 e4m3 with index_k_scale [pages, page] fp32); block_table: [B, P]
    int32; token_request / token_position: [T] int32; ``max_kv``: at least every position + 1;
    ``tiles``: token_tiles(token_request, block_t) when the caller has them (no host sync).
    Keys of another 16-bit dtype than q, or fp32 keys, are scored in fp32 (q cast up), so
    every product is exact before the fp32 sums. ``packed``: return pack_keys(scores) [T, S]
    int64 instead, computed in the kernel (for topk_of_keys)."""
    T, H, D = q.shape
    S = triton.cdiv(max(max_kv, 1), block_n) * block_n
    scores = torch.empty(T, S, dtype=torch.int64 if packed else torch.float32, device=q.device)
    if T == 0:
        return scores
    if index_k.dtype != q.dtype and index_k.dtype != torch.float8_e4m3fn:
        q = q.float()
    tile_req, tile_tok = tiles if tiles is not None else token_tiles(token_request, block_t)
    has_scale = index_k_scale is not None
    kscale = index_k_scale if has_scale else weights      # any tensor: not read
    _index_score_kernel[(tile_req.numel(), S // block_n)](
        q, weights, index_k, kscale, block_table, tile_req, tile_tok, token_request,
        token_position, scores,
        q.stride(0), q.stride(1), weights.stride(0), index_k.stride(0), index_k.stride(1),
        kscale.stride(0) if has_scale else 0, block_table.stride(0), scores.stride(0), T, H,
        HP=head_rows(H), D=D, PAGE_SIZE=index_k.shape[1], BLOCK_T=block_t, BLOCK_N=block_n,
        HAS_SCALE=has_scale, DOT_PREC="ieee" if q.dtype == torch.float32 else "tf32",
        PACKED=packed, num_warps=num_warps, num_stages=num_stages,
    )
    return scores


def pack_keys(scores: torch.Tensor) -> torch.Tensor:
    """[T, S] int64 keys ordered as (score descending, position ascending): the fp32 score's
    bits as an order-preserving int32 (after + 0.0, so -0.0 ties 0.0) in the high half,
    2^32 - 1 - position in the low half. The score kernel writes the same keys (PACKED)."""
    bits = (scores + 0.0).view(torch.int32)
    bits = torch.where(torch.isnan(scores), NAN_BITS, bits)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64)  # monotone in score
    pos = torch.arange(scores.shape[1], dtype=torch.int64, device=scores.device)
    return (ordered << 32) | (0xFFFFFFFF - pos)


def topk_of_keys(keys: torch.Tensor, token_position: torch.Tensor, topk: int) -> torch.Tensor:
    """[T, topk] int32 positions from pack_keys' keys [T, S]: the ``topk`` largest keys of each
    row (torch.topk: any tie handling gives the same, the keys are distinct), best first;
    positions past token_position (they scored -inf) become -1, so a token seeing fewer than
    ``topk`` keys selects all of 0..p and -1 pads the rest."""
    return topk_and_nan_rows(keys, token_position, topk)[0]


def topk_and_nan_rows(keys: torch.Tensor, token_position: torch.Tensor,
                      topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_of_keys' [T, topk] int32 positions, [T] bool: the rows that scored a NaN, i.e. saw
    a non-finite index key; NaN packs to the largest key, so it is each such row's first)."""
    T, S = keys.shape
    k = min(topk, S)
    top = torch.topk(keys, k, dim=1, sorted=True).values
    nan_rows = (top[:, 0] >> 32) > INF_BITS
    idx = 0xFFFFFFFF - (top & 0xFFFFFFFF)
    idx = torch.where(idx <= token_position.to(torch.int64)[:, None], idx, -1).to(torch.int32)
    if k < topk:
        idx = torch.cat([idx, idx.new_full((T, topk - k), -1)], dim=1)
    return idx, nan_rows


def select_topk(scores: torch.Tensor, token_position: torch.Tensor, topk: int) -> torch.Tensor:
    """[T, topk] int32 positions: the ``topk`` best of each row of ``scores`` [T, S] fp32 among
    positions <= token_position, best first, equal scores lower position first; -1 pads a
    row whose token sees fewer than ``topk`` keys (then all of 0..p are selected)."""
    return topk_of_keys(pack_keys(scores), token_position, topk)


def indexer_topk(q, weights, index_k, index_k_scale, block_table, token_request, token_position,
                 topk: int, *, max_kv: int, **tile) -> torch.Tensor:
    """The indexer step: the score kernel's packed keys, then their top-k; [T, topk] int32
    positions (-1 pad)."""
    keys = index_scores(q, weights, index_k, index_k_scale, block_table, token_request,
                        token_position, max_kv=max_kv, packed=True, **tile)
    return topk_of_keys(keys, token_position, topk)
