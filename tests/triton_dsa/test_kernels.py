"""triton_dsa's kernels against the float64 DSA formula of dsa_kernel_cases.py (interpreter on CPU):
indexer scores, deterministic top-k, sparse MLA attention; NaN in unowned pages and stale
slots never reaches a result."""
import pytest
import torch
from dsa_kernel_cases import FP8, make, ref_attention, ref_logits, ref_scores, ref_topk

from attnkit.backends.triton_dsa.indexer import index_scores, indexer_topk, select_topk
from attnkit.backends.triton_dsa.sparse_mla import sparse_mla

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _scores(case, **tile):
    return index_scores(case.q_idx, case.weights, case.index_k, case.index_k_scale,
                        case.block_table, case.token_request, case.token_position,
                        max_kv=case.max_kv, **tile)


@pytest.mark.parametrize("block_t", [1, 4])
@pytest.mark.parametrize("page", [1, 16])
def test_index_scores(block_t, page):
    """Decode tokens and a prefill chunk (several tokens a tile, tiles cut at requests)."""
    case = make(prefix=[37, 0, 5], new=[1, 6, 3], page=page, device=DEV, seed=page + block_t)
    scores = _scores(case, block_t=block_t, block_n=16).cpu()
    for t in range(case.token_request.numel()):
        p = int(case.token_position[t])
        torch.testing.assert_close(scores[t, :p + 1].double(), ref_scores(case, t),
                                   rtol=1e-5, atol=1e-5)
        assert torch.isneginf(scores[t, p + 1:]).all(), "positions after the token must be -inf"


def test_index_scores_fp8_keys():
    """fp8 e4m3 keys with a per-token scale (dequantized in the oracle from the same bytes)."""
    case = make(prefix=[40, 9], new=[1, 1], page=16, index_dtype=FP8, device=DEV, seed=3)
    scores = _scores(case, block_n=16).cpu()
    for t in range(2):
        p = int(case.token_position[t])
        torch.testing.assert_close(scores[t, :p + 1].double(), ref_scores(case, t),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("topk", [8, 64])
def test_topk_ties_lower_position(topk):
    """Integer inputs make fp32 scores exact and ties common: the selection must be the
    oracle's exactly (ties to the lower position); a token seeing <= topk keys takes all."""
    case = make(prefix=[50, 3, 0], new=[1, 1, 4], page=16, device=DEV, seed=11, integer=True)
    idx = indexer_topk(case.q_idx, case.weights, case.index_k, None, case.block_table,
                       case.token_request, case.token_position, topk, max_kv=case.max_kv,
                       block_n=16).cpu()
    for t in range(idx.shape[0]):
        want = ref_topk(case, t, topk)
        assert idx[t, :len(want)].tolist() == want
        assert (idx[t, len(want):] == -1).all()


def test_select_topk_signed_zero_and_negative():
    """-0.0 ties +0.0; negative scores order below positive ones; nothing past p."""
    scores = torch.tensor([[-0.0, 0.0, -1.0, 2.0, float("-inf")]])
    pos = torch.tensor([3], dtype=torch.int32)
    assert select_topk(scores, pos, 3).tolist() == [[3, 0, 1]]
    assert select_topk(scores, pos, 6).tolist() == [[3, 0, 1, 2, -1, -1]]


def _selection(case, topk, g):
    """Random distinct positions <= p per token, -1 padded (some tokens select fewer)."""
    T = case.token_request.numel()
    idx = torch.full((T, topk), -1, dtype=torch.int32)
    for t in range(T):
        p = int(case.token_position[t])
        n = min(topk, p + 1, 1 + int(torch.randint(0, topk, (1,), generator=g)))
        idx[t, torch.randperm(topk, generator=g)[:n]] = torch.randperm(p + 1, generator=g)[:n].int()
    return idx


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("page", [1, 16])
def test_sparse_mla(splits, page):
    """Scattered -1 pads, splits (some empty), NaN in unowned pages and stale slots, and NaN
    in every latent row a token did NOT select."""
    case = make(prefix=[70, 2, 30], new=[1, 1, 5], page=page, device=DEV, seed=splits + page)
    g = torch.Generator().manual_seed(5)
    idx = _selection(case, 32, g)
    want = [ref_attention(case, t, [int(i) for i in idx[t] if i >= 0]) for t in range(len(idx))]
    latent = case.latent.clone()
    chosen = torch.zeros(latent.shape[:2], dtype=torch.bool)
    for t in range(len(idx)):
        r = int(case.token_request[t])
        for i in idx[t][idx[t] >= 0].tolist():
            chosen[int(case.block_table[r, i // page]), i % page] = True
    latent[~chosen.to(latent.device)] = float("nan")        # only selected rows stay finite
    out = sparse_mla(case.q_lat, latent, case.block_table, case.token_request,
                     idx.to(DEV), scale=case.scale, L=case.L, num_splits=splits, block_h=16,
                     block_n=16).cpu()
    for t in range(len(idx)):
        torch.testing.assert_close(out[t].double(), want[t], rtol=2e-4, atol=2e-4)


def test_sparse_mla_fp16_lse_and_empty_token():
    """fp16, the natural-log LSE, and a token whose list is all -1 (output 0, LSE -inf)."""
    case = make(prefix=[20, 9], new=[1, 1], page=16, dtype=torch.float16, device=DEV, seed=9)
    idx = torch.full((2, 16), -1, dtype=torch.int32)
    idx[0, :10] = torch.arange(10, 20, dtype=torch.int32)
    out, lse = sparse_mla(case.q_lat, case.latent, case.block_table, case.token_request,
                          idx.to(DEV), scale=case.scale, L=case.L, num_splits=2, block_h=16,
                          block_n=16, return_lse=True)
    want = ref_attention(case, 0, range(10, 20))
    torch.testing.assert_close(out[0].cpu().double(), want, rtol=2e-2, atol=2e-2)
    assert (out[1] == 0).all() and torch.isneginf(lse[1]).all()
    ref_lse = torch.logsumexp(ref_logits(case, 0, range(10, 20))[0], dim=-1)
    torch.testing.assert_close(lse[0].cpu().double(), ref_lse, rtol=1e-3, atol=1e-3)


def test_indexer_then_attention_isolation():
    """Two requests: changing request 1's caches changes nothing in request 0's output."""
    case = make(prefix=[40, 40], new=[1, 1], page=16, device=DEV, seed=21)
    def run(c):
        idx = indexer_topk(c.q_idx, c.weights, c.index_k, None, c.block_table, c.token_request,
                           c.token_position, 16, max_kv=c.max_kv, block_n=16)
        return sparse_mla(c.q_lat, c.latent, c.block_table, c.token_request, idx,
                          scale=c.scale, L=c.L, block_h=16, block_n=16)
    before = run(case)
    for p in case.block_table[1].unique().tolist():
        case.index_k[p] = float("nan")
        case.latent[p] = float("nan")
    after = run(case)
    assert torch.equal(before[0], after[0])
    assert torch.isnan(after[1]).any()


def test_kernel_packed_keys_equal_pack_keys_of_its_scores():
    """The score kernel's int64 keys (packed=True) are pack_keys of its float scores, bit for
    bit, -inf past each token's position included (block_t 4: a prefill tile)."""
    from attnkit.backends.triton_dsa.indexer import pack_keys
    case = make(prefix=[30, 0], new=[1, 9], page=16, device=DEV, seed=13, integer=True)
    scores = _scores(case, block_t=4, block_n=16)
    keys = _scores(case, block_t=4, block_n=16, packed=True)
    assert keys.dtype == torch.int64 and torch.equal(keys, pack_keys(scores))
