"""torch_native's DSA scores (backends/torch_native/sparse.py): equal index keys score bitwise
equal, so the tie rule (the lower position) decides, never rounding noise; -0.0 ties 0.0."""
import torch

from attnkit.backends.torch_native.sparse import CHUNK_ELEMENTS, index_scores, topk_mask


def test_equal_keys_score_bitwise_equal_across_chunks(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    pool = torch.randn(3, 128, generator=gen)
    keys = pool[torch.randint(0, 3, (301,), generator=gen)]
    q, w = torch.randn(5, 64, 128, generator=gen), torch.randn(5, 64, generator=gen)
    monkeypatch.setattr("attnkit.backends.torch_native.sparse.CHUNK_ELEMENTS", 5 * 64 * 128 * 7)
    scores = index_scores(q, w, keys)                          # chunks of 7 keys
    for j in range(3):
        same = (keys == pool[j]).all(dim=1)
        col = scores[:, same]
        assert (col == col[:, :1]).all()
    torch.testing.assert_close(scores, torch.einsum("nhd,sd->nhs", q.double(), keys.double())
                               .clamp(min=0).mul(w.double()[:, :, None]).sum(1).float())
    assert CHUNK_ELEMENTS >= 1 << 20


def test_ties_go_to_the_lower_position_and_negative_zero_ties_zero():
    q = torch.tensor([[[1.0]], [[1.0]]])                       # [n=2, H=1, D=1]
    w = torch.tensor([[-1.0], [1.0]])                          # -1 * relu(...) gives -0.0 at 0
    keys = torch.tensor([[-1.0], [2.0], [-3.0], [2.0], [0.0]])
    mask = topk_mask(q, w, keys, torch.tensor([4, 4]), 2)
    # token 0: scores -0, -2, -0, -2, -0 -> positions 0 and 2 (ties among the zeros, lowest first)
    # token 1: scores 0, 2, 0, 2, 0 -> positions 1 and 3
    assert mask.tolist() == [[True, False, True, False, False], [False, True, False, True, False]]
    scores = index_scores(q, w, keys)
    assert not torch.signbit(scores[scores == 0]).any()      # no -0.0 (a radix sort orders it below 0.0)
