"""The two kernel features dual_chunk runs on, tested at the launcher level against dense
float64 softmax (interpreter on CPU; marker gpu on CUDA):
- extend_attention(lse=...): every launched row's log-sum-exp; rows of requests without a
  query block keep their out / lse untouched;
- decode_attention's part axis (part_starts): one softmax over the union of several key
  ranges, each with its own query, over many splits (more than the plain backend's 64, so the
  reduction's BLOCK_S is 128), with a part that has no splits between two that have, and the
  fused K/V write into the last key of part 0.
"""
import math

import pytest
import torch

from attnkit.backends._triton import LOG2E, padded_dim
from attnkit.backends.triton.backend import query_blocks, split_buffers
from attnkit.backends.triton.decode import decode_attention, decode_config
from attnkit.backends.triton.extend import extend_attention, extend_config

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
H_Q, H_KV, D, PAGE = 4, 2, 16, 4
SCALE = 1 / math.sqrt(D)


def paged(lens, num_pages, gen, device):
    """Random caches [P, PAGE, H_KV, D] and, per range length, a block-table row of distinct
    random pages (rows padded with page 0 to one width) -> (k_cache, v_cache, tables [N, W])."""
    k = torch.randn(num_pages, PAGE, H_KV, D, generator=gen)
    v = torch.randn(num_pages, PAGE, H_KV, D, generator=gen)
    order = torch.randperm(num_pages, generator=gen).tolist()
    width = max(1, max(-(-n // PAGE) for n in lens))
    rows = []
    for n in lens:
        need = -(-n // PAGE)
        rows.append(order[:need] + [0] * (width - need))
        order = order[need:]
    tables = torch.tensor(rows, dtype=torch.int32)
    return k.to(device), v.to(device), tables.to(device)


def gather(cache, row, n):
    """[n, H_KV, D] float64: keys 0..n-1 of one block-table row."""
    pages = cache[row[:-(-n // PAGE)].long().to(cache.device)].reshape(-1, H_KV, D)
    return pages[:n].double().cpu()


def dense(qs, keys, values, masks=None):
    """One softmax over the concatenated parts: qs [P] of [H_Q, D]; keys/values [P] of
    [n_p, H_KV, D]; -> (out [H_Q, D], lse [H_Q]) float64."""
    logits, vals = [], []
    for p, (q, k, v) in enumerate(zip(qs, keys, values)):
        k = k.repeat_interleave(H_Q // H_KV, 1)
        s = torch.einsum("hd,nhd->hn", q.double().cpu(), k) * SCALE
        if masks is not None:
            s = s.masked_fill(~masks[p], float("-inf"))
        logits.append(s)
        vals.append(v.repeat_interleave(H_Q // H_KV, 1))
    s, v = torch.cat(logits, 1), torch.cat(vals, 0)
    return torch.einsum("hn,nhd->hd", s.softmax(-1), v), s.logsumexp(-1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [True, False])
def test_extend_writes_each_rows_lse_and_leaves_unlaunched_requests_alone(device, causal):
    gen = torch.Generator().manual_seed(0)
    q_lens, kv_lens = [5, 3, 20], [5, 40, 23]          # request 1 gets no query block
    k_cache, v_cache, tables = paged(kv_lens, 40, gen, device)
    q = torch.randn(sum(q_lens), H_Q, D, generator=gen).to(device)
    out = torch.full((q.shape[0], H_Q, D), 7.0, device=device)
    lse = torch.full((q.shape[0], H_Q), 3.0, device=device)
    cfg = extend_config(D, torch.float32, interpret=device == "cpu")
    block_req, block_m = query_blocks(q_lens, kv_lens, cfg["BLOCK_M"], requests=[0, 2], device=device)
    qsl = torch.tensor([0, 5, 8, 28], dtype=torch.int32, device=device)
    extend_attention(q, k_cache, v_cache, out, block_req=block_req, block_m=block_m,
                     query_start_loc=qsl, seq_lens=torch.tensor(kv_lens, dtype=torch.int32, device=device),
                     block_tables=tables, qk_scale=SCALE * LOG2E, v_scale=1.0, softcap=None,
                     window=None, sinks=None, causal=causal, config=cfg, lse=lse)
    assert (out[5:8] == 7.0).all() and (lse[5:8] == 3.0).all()
    for r, row in [(0, 0), (2, 8)]:
        keys, vals = gather(k_cache, tables[r].cpu(), kv_lens[r]), gather(v_cache, tables[r].cpu(), kv_lens[r])
        for j in range(q_lens[r]):
            pos = kv_lens[r] - q_lens[r] + j
            mask = (torch.arange(kv_lens[r]) <= pos if causal else torch.ones(kv_lens[r], dtype=torch.bool))
            want_o, want_lse = dense([q[row + j]], [keys], [vals], [mask.expand(H_Q, -1)])
            torch.testing.assert_close(out[row + j].double().cpu(), want_o, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(lse[row + j].double().cpu(), want_lse, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [False, True], ids=["write-first", "fused-write"])
def test_decode_part_axis_is_one_softmax_over_every_part(device, fused):
    gen = torch.Generator().manual_seed(1)
    # per request, keys of parts 0, 1, 2; part 1 is empty for every request (no splits)
    part_lens = [[17, 0, 1100], [1, 0, 300], [9, 0, 0]]
    flat = [n for lens in part_lens for n in lens]
    k_cache, v_cache, rows = paged(flat, 400, gen, device)
    num_reqs, num_parts = len(part_lens), 3
    tables = rows.view(num_reqs, num_parts, -1).transpose(0, 1).contiguous()     # [3, B, W]
    seq_lens = torch.tensor(part_lens, dtype=torch.int32).t().contiguous().to(device)   # [3, B]
    q = torch.randn(num_reqs, num_parts, H_Q, D, generator=gen).to(device)
    cfg = decode_config(D, torch.float32, interpret=device == "cpu") | dict(BLOCK_N=16)
    chunk = 16                    # one tile per split: 2 + 0 + 69 slots
    starts = [0]
    for p in range(num_parts):
        starts.append(starts[-1] + -(-max(lens[p] for lens in part_lens) // chunk))
    assert starts[1] == starts[2] and starts[-1] > 64
    partials = split_buffers({}, num_reqs, H_Q, padded_dim(D), starts[-1], device=device)
    new_kv = None
    if fused:   # the last key of part 0 is this step's: not in the cache yet
        k_new = torch.randn(num_reqs, H_KV, D, generator=gen).to(device)
        v_new = torch.randn(num_reqs, H_KV, D, generator=gen).to(device)
        last = [lens[0] - 1 for lens in part_lens]
        slots = torch.tensor([int(tables[0, b, n // PAGE]) * PAGE + n % PAGE for b, n in enumerate(last)],
                             dtype=torch.int64, device=device)
        for cache in (k_cache, v_cache):
            cache.view(-1, H_KV, D)[slots] = 1e4           # stale rows: must not be read
        new_kv = (k_new, v_new, slots)
    out = torch.empty(num_reqs, H_Q, D, device=device)
    decode_attention(q, k_cache, v_cache, out, seq_lens=seq_lens, block_tables=tables,
                     qk_scale=SCALE * LOG2E, v_scale=1.0, softcap=None, window=None, sinks=None,
                     num_splits=starts[-1], chunk=chunk, partials=partials, config=cfg,
                     new_kv=new_kv, part_starts=torch.tensor(starts, dtype=torch.int32, device=device))
    if fused:
        torch.testing.assert_close(k_cache.view(-1, H_KV, D)[slots], k_new)
        torch.testing.assert_close(v_cache.view(-1, H_KV, D)[slots], v_new)
    for b, lens in enumerate(part_lens):
        parts = [p for p in range(num_parts) if lens[p]]
        keys = [gather(k_cache, tables[p, b].cpu(), lens[p]) for p in parts]
        vals = [gather(v_cache, tables[p, b].cpu(), lens[p]) for p in parts]
        want, _ = dense([q[b, p] for p in parts], keys, vals)
        torch.testing.assert_close(out[b].double().cpu(), want, atol=1e-5, rtol=1e-5)
