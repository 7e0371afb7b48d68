"""triton_dsa's kernels on a CUDA GPU at DeepSeek-V3.2 sizes (L 512, R 64, 128 heads, indexer
64 heads x 128, top-k 2048) against the float64 oracle of dsa_kernel_cases.py."""
import pytest
import torch
from dsa_kernel_cases import FP8, make, ref_attention, ref_scores, ref_topk

from attnkit.backends.triton_dsa.indexer import index_scores, indexer_topk
from attnkit.backends.triton_dsa.sparse_mla import sparse_mla, sparse_tile, ws_tile

pytestmark = pytest.mark.gpu
V32 = dict(heads=128, L=512, R=64, idx_heads=64, idx_dim=128)


def _case(prefix, new, *, page=64, dtype=torch.bfloat16, index_dtype=None, seed=0, **kw):
    return make(prefix=prefix, new=new, page=page, dtype=dtype, index_dtype=index_dtype,
                device="cuda", seed=seed, **{**V32, **kw})


def _check_selection(case, idx, topk, *, tol):
    """Every token's selection: distinct positions <= p, as many as min(topk, p + 1), none
    scoring (float64) below the oracle's topk-th best by more than ``tol``."""
    for t in range(idx.shape[0]):
        p = int(case.token_position[t])
        sel = idx[t][idx[t] >= 0].cpu()
        assert sel.numel() == min(topk, p + 1) and sel.unique().numel() == sel.numel()
        assert int(sel.max()) <= p
        ref = ref_scores(case, t)
        kth = ref[ref_topk(case, t, topk)[-1]]
        assert float(ref[sel.long()].min()) >= float(kth) - tol * float(ref.abs().max())


@pytest.mark.parametrize("index_dtype", [None, FP8])
@pytest.mark.parametrize("block_t", [1, 8])
def test_indexer_v32(index_dtype, block_t):
    case = _case([3000, 100, 0], [1, 1, 40], index_dtype=index_dtype, seed=1)
    scores = index_scores(case.q_idx, case.weights, case.index_k, case.index_k_scale,
                          case.block_table, case.token_request, case.token_position,
                          max_kv=case.max_kv, block_t=block_t, block_n=64)
    for t in (0, 1, 2, 41):
        p = int(case.token_position[t])
        ref = ref_scores(case, t)
        torch.testing.assert_close(scores[t, :p + 1].double().cpu(), ref, rtol=2e-2,
                                   atol=2e-2 * float(ref.abs().max()))
        assert torch.isneginf(scores[t, p + 1:]).all()
    idx = indexer_topk(case.q_idx, case.weights, case.index_k, case.index_k_scale,
                       case.block_table, case.token_request, case.token_position, 2048,
                       max_kv=case.max_kv, block_t=block_t)
    _check_selection(case, idx, 2048, tol=2e-2)


@pytest.mark.parametrize("splits", ["auto", 1, 7])
@pytest.mark.parametrize("page", [1, 64])
def test_sparse_mla_v32(splits, page):
    """128 heads over 2048 selected rows (short requests: all their rows, -1 padded)."""
    case = _case([5000, 300, 2047], [1, 1, 1], page=page, seed=2)
    g = torch.Generator().manual_seed(3)
    idx = torch.full((3, 2048), -1, dtype=torch.int32)
    for t, s in enumerate(case.seq_lens):
        n = min(2048, s)
        idx[t, torch.randperm(2048, generator=g)[:n]] = torch.randperm(s, generator=g)[:n].int()
    tile = sparse_tile(case.q_lat, 2048, L=512)
    if splits != "auto":
        tile["num_splits"] = splits
    out = sparse_mla(case.q_lat, case.latent, case.block_table, case.token_request,
                     idx.cuda(), scale=case.scale, L=512, **tile)
    for t in range(3):
        want = ref_attention(case, t, [int(i) for i in idx[t] if i >= 0])
        torch.testing.assert_close(out[t].double().cpu(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("kernel", ["triton", "sparse_ws"])
def test_dsa_prefill_end_to_end(kernel):
    """A 64-token prefill chunk over a 2500-token prefix: indexer, top-k, sparse attention
    (the Triton kernel, or the Gluon kernel: 128 programs of one request's tokens)."""
    if kernel == "sparse_ws":
        _skip_unless_sparse_ws()
    case = _case([2500], [64], seed=4)
    idx = indexer_topk(case.q_idx, case.weights, case.index_k, None, case.block_table,
                       case.token_request, case.token_position, 2048, max_kv=case.max_kv,
                       block_t=8)
    tile = sparse_tile(case.q_lat, 2048, L=512) if kernel == "triton" else ws_tile(case.q_lat, 2048)
    out = sparse_mla(case.q_lat, case.latent, case.block_table, case.token_request, idx,
                     scale=case.scale, L=512, **tile)
    for t in (0, 63):
        want = ref_attention(case, t, [int(i) for i in idx[t].cpu() if i >= 0])
        torch.testing.assert_close(out[t].double().cpu(), want, rtol=2e-2, atol=2e-2)


def _skip_unless_sparse_ws():
    """The Gluon kernel runs where its variant is declared: sm_90 with Triton 3.6."""
    import triton

    from attnkit.backends.triton_dsa.declaration import VARIANTS
    from attnkit.registry.kernels import in_version_range
    bounds = next(k.triton for k in VARIANTS if k.name == "sparse_ws")
    if torch.cuda.get_device_capability() != (9, 0) or not in_version_range(triton.__version__, bounds):
        pytest.skip("sparse_ws is declared for sm_90 with Triton >= %s, < %s" % bounds)


def _gluon_forms():
    from attnkit.backends.triton_dsa.sparse_gluon import GLUON_FORMS
    return sorted(GLUON_FORMS)


@pytest.mark.parametrize("splits", [1, 7])
@pytest.mark.parametrize("page", [1, 64])
@pytest.mark.parametrize("form", _gluon_forms())
def test_sparse_gluon_v32(form, splits, page):
    """Each Gluon form over 2048 selected rows with NaN in every unowned page and stale slot,
    -1 pads, one split (the final rows written directly) and seven (the LSE merge)."""
    _skip_unless_sparse_ws()
    case = _case([5000, 300, 2047], [1, 1, 1], page=page, seed=2)
    g = torch.Generator().manual_seed(3)
    idx = torch.full((3, 2048), -1, dtype=torch.int32)
    for t, s in enumerate(case.seq_lens):
        n = min(2048, s)
        idx[t, torch.randperm(2048, generator=g)[:n]] = torch.randperm(s, generator=g)[:n].int()
    out = sparse_mla(case.q_lat, case.latent, case.block_table, case.token_request, idx.cuda(),
                     scale=case.scale, L=512, num_splits=splits, kernel=form)
    for t in range(3):
        want = ref_attention(case, t, [int(i) for i in idx[t] if i >= 0])
        torch.testing.assert_close(out[t].double().cpu(), want, rtol=2e-2, atol=2e-2)


def test_sparse_ws_serves_the_v32_shape_here():
    """On an sm_90 with the Triton the variant declares, the backend's runtime check admits
    the Gluon kernel at DeepSeek-V3.2's shape (so the sparse_ws conformance cases run it),
    and not for an fp8 cache or 16 heads."""
    from attnkit.backends.triton_dsa.sparse_mla import ws_ready
    _skip_unless_sparse_ws()
    case = _case([300], [1], seed=5)
    assert ws_ready(case.q_lat, case.latent, L=512)
    assert not ws_ready(case.q_lat, case.latent.to(FP8), L=512)
    assert not ws_ready(case.q_lat[:, :16], case.latent, L=512)
