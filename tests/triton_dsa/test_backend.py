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


def _kernel_choices(monkeypatch, *, ws_serves: bool, **options) -> list:
    """The kernel keywords the backend hands sparse_mla for one decode step (sparse_mla and
    ws_ready stubbed: the choice alone, no kernel runs)."""
    import attnkit.backends.triton_dsa.backend as mod
    calls = []

    def fake_sparse_mla(q_cat, *args, L, **kw):
        calls.append(kw)
        return q_cat.new_zeros(q_cat.shape[0], q_cat.shape[1], L)

    monkeypatch.setattr(mod, "sparse_mla", fake_sparse_mla)
    monkeypatch.setattr(mod, "ws_ready", lambda *a, **k: ws_serves)
    layer = make_dsa_layer(topk=4, device=DEV, seed=2)
    dsa = make_dsa_case(layer, prefix_lens=[6, 9], new_lens=[1, 1], device=DEV, seed=2)
    backend = TritonDSABackend(**options)
    monkeypatch.setattr(backend, "_select", lambda indexer, cache, lid, st, topk:
                        (torch.zeros(2, topk, dtype=torch.int32, device=DEV),      # positions,
                         torch.zeros(2, dtype=torch.bool, device=DEV)))           # no NaN rows
    backend.forward(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache, backend.prepare(dsa.meta, dsa.cache),
                    indexer=dsa.indexer)
    return calls


def test_the_sparse_kernel_follows_the_table_then_what_can_run(monkeypatch):
    """No plan: declaration order (sparse_ws where ws_ready, else sparse_tile); a table naming
    sparse_tile alone runs it; a Triton tile override runs the Triton kernel; num_splits
    applies to either."""
    from attnkit.backends.triton_dsa.configs import SPARSE_WS
    from attnkit.registry.kernels import KernelTable

    (ws,) = _kernel_choices(monkeypatch, ws_serves=True)
    assert ws["kernel"] == SPARSE_WS
    (tile,) = _kernel_choices(monkeypatch, ws_serves=False)
    assert tile.get("kernel", "triton") == "triton" and "block_n" in tile
    only_tile = {"decode": KernelTable.only("decode", "sparse_tile")}
    (tile,) = _kernel_choices(monkeypatch, ws_serves=True, kernels=only_tile)
    assert tile.get("kernel", "triton") == "triton"
    (tile,) = _kernel_choices(monkeypatch, ws_serves=True, block_n=32)
    assert tile.get("kernel", "triton") == "triton" and tile["block_n"] == 32
    (ws,) = _kernel_choices(monkeypatch, ws_serves=True, num_splits=3)
    assert ws["kernel"] == SPARSE_WS and ws["num_splits"] == 3


def test_a_table_naming_an_undeclared_variant_is_refused():
    from attnkit.registry.kernels import KernelTable
    with pytest.raises(AttnkitError) as err:
        TritonDSABackend(kernels={"decode": KernelTable.only("decode", "ws")})
    assert err.value.code == "AK407"
