"""triton_dsa's envelope beyond the conformance suite: it serves DSA layers only (AK440 at run
time, a reason in the plan), and refuses bad launch options when made (AK407)."""
import dataclasses

import pytest
import torch
from dsa_factory import make_dsa_case, make_dsa_layer

from attnkit.backends.base import RuntimeLayer
from attnkit.backends.triton_dsa.backend import TritonDSABackend
from attnkit.backends.triton_dsa.declaration import check
from attnkit.errors import AttnkitError
from attnkit.model.loader import load_model

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def test_a_plain_mla_layer_is_refused():
    layer = make_dsa_layer(topk=4, device=DEV)
    dsa = make_dsa_case(layer, prefix_lens=[5], new_lens=[1], device=DEV)
    plain = RuntimeLayer(dataclasses.replace(layer.spec, sparse_topk=None), w_kc=layer.w_kc,
                         w_vc=layer.w_vc)
    backend = TritonDSABackend()
    before = dsa.cache.latent[0].clone()
    with pytest.raises(AttnkitError) as err:
        backend.forward(dsa.q, dsa.k, dsa.v, plain, dsa.cache, backend.prepare(dsa.meta, dsa.cache))
    assert err.value.code == "AK440"
    assert torch.equal(dsa.cache.latent[0].nan_to_num(), before.nan_to_num())   # nothing written


@pytest.mark.parametrize("option", [dict(block_h=24), dict(block_n=8), dict(num_warps=3),
                                    dict(num_splits=0), dict(index_block_n=48)])
def test_bad_launch_options_are_refused(option):
    with pytest.raises(AttnkitError) as err:
        TritonDSABackend(**option)
    assert err.value.code == "AK407"


def test_the_planner_hook_names_dense_layers():
    dsa_model = load_model("deepseek-v3.2")
    assert check(model=dsa_model, platform=None, phase="decode", settings={}) == []
    reasons = check(model=load_model("deepseek-v3"), platform=None, phase="decode", settings={})
    assert reasons and reasons[0][0] == "sparse_topk" and "dense layers" in reasons[0][3]


def test_the_indexer_runs_in_token_chunks_within_its_memory_bound():
    """keys_bytes small enough for 3 tokens a chunk: a mixed step (a 9-token prefill tile
    split across chunks, decodes) gives the output of one chunk, and the reference's."""
    from factories import assert_close
    layer = make_dsa_layer(topk=4, index_heads=4, index_dim=32, device=DEV, seed=5)
    dsa = make_dsa_case(layer, prefix_lens=[0, 20, 7], new_lens=[9, 1, 2], page_size=16,
                        device=DEV, seed=5)
    outs = []
    for keys_bytes in (1 << 30, 8 * 64 * 3):
        cache = dsa.cache
        backend = TritonDSABackend(keys_bytes=keys_bytes)
        outs.append(backend.forward(dsa.q, dsa.k, dsa.v, dsa.layer, cache,
                                    backend.prepare(dsa.meta, cache), indexer=dsa.indexer))
    assert torch.equal(outs[0], outs[1])
    assert_close(outs[1], dsa.reference, dtype="fp32", what="chunked")
