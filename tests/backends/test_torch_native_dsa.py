"""torch_native's DSA path (backends/torch_native/sparse.py): equal index keys score bitwise
equal, so the tie rule (the lower position) decides, never rounding noise; -0.0 ties 0.0; a
hybrid passes the indexer inputs on; sparse_topk only on causal MLA layers."""
import pytest
import torch

from attnkit.backends.base import RuntimeLayer
from attnkit.backends.hybrid import HybridBackend
from attnkit.backends.torch_native.sparse import CHUNK_ELEMENTS, index_scores, topk_mask
from attnkit.errors import AttnkitError
from attnkit.model.spec import LayerAttention, ModelAttention, SparseTopK
from attnkit.planning.solver import plan
from attnkit.registry import load_backend
from dsa_factory import make_dsa_case, make_dsa_layer
from factories import assert_close, make_case


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


def test_a_hybrid_hands_the_indexer_inputs_to_the_backend_of_the_step():
    layer = make_dsa_layer(topk=4)
    hybrid = HybridBackend(prefill=load_backend("torch_native"), decode=load_backend("torch_native"))
    for prefix, new in (([0, 9], [7, 1]), ([5, 12], [1, 1])):        # MIXED, then DECODE
        dsa = make_dsa_case(layer, prefix_lens=prefix, new_lens=new, page_size=4, seed=len(new) + prefix[1])
        out = hybrid.forward(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache, hybrid.prepare(dsa.meta, dsa.cache),
                             indexer=dsa.indexer)
        assert_close(out, dsa.reference, dtype="fp32")


def test_sparse_topk_is_for_causal_mla_layers_only():
    """model/checks.py: the planner's AK130 and the runtime's AK419 for a DSA MHA layer."""
    mha = LayerAttention(0, 4, 4, 32, sparse_topk=SparseTopK(4, 2, 16))
    with pytest.raises(AttnkitError) as err:
        plan(ModelAttention("m", "x", (mha,)), "cpu", env={})
    assert err.value.code == "AK130" and "sparse_topk" in str(err.value)
    case = make_case(RuntimeLayer(LayerAttention(0, 4, 4, 32)), prefix_lens=[0], new_lens=[3])
    backend = load_backend("torch_native")
    with pytest.raises(AttnkitError) as err:
        backend.forward(case.q, case.k, case.v, RuntimeLayer(mha), case.cache, backend.prepare(case.meta, case.cache))
    assert err.value.code == "AK419"
