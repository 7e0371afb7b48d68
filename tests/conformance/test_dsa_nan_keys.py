"""A NaN or inf in an index key a token scores (docs/dsa.md, "Non-finite inputs"): the token's
output row is NaN in the reference and in every backend declaring sparse_topk, and no other
token changes. Before, the NaN score ranked wherever the sort put it (torch: first; the
kernel's relu turned it into 0 on the GPU) and the token silently attended to some selection."""
from __future__ import annotations

import pytest
import torch

from attnkit import reference_dsa
from attnkit.backends.batch import slots_of
from attnkit.backends.sparse import IndexerInputs
from attnkit.registry import load_backend
from dsa_factory import make_dsa_case, make_dsa_layer
from factories import assert_close

NAN, INF = float("nan"), float("inf")
# requests: a 9-token prefill, then two decodes over 20 and 30 cached tokens (top-k 8)
PREFIX, NEW = [0, 20, 30], [9, 1, 1]
# token rows that see a bad key: request 0's tokens at positions >= 6 (its new key 6 is NaN),
# request 1's decode (its cached key 5), request 2's decode (its cached key 29)
BLIND = [6, 7, 8, 9, 10]
RUNS = [("torch_native", "cpu", ()), ("triton_dsa", "cpu", (pytest.mark.interpreter,)),
        ("triton_dsa", "cuda", (pytest.mark.gpu,))]


def _slot(dsa, request: int, position: int) -> int:
    return slots_of(dsa.requests[request].block_table, [position], dsa.meta.page_size)[0]


def _spoil(dsa, *, fp8: bool, nan_byte: bool = True) -> IndexerInputs:
    """NaN / inf in three index keys the step's tokens score; returns the spoiled inputs.
    nan_byte False: an fp8 key's NaN goes into its scale, not its stored e4m3 byte (the Triton
    interpreter's fp8 emulation reads a NaN byte as a finite number; the GPU's cvt does not)."""
    lid, cache = dsa.layer.layer_id, dsa.cache
    flat = cache.index_k[lid].view(-1, cache.index_k[lid].shape[-1])
    if fp8 and not nan_byte:
        cache.index_k_scale[lid].view(-1)[_slot(dsa, 1, 5)] = NAN
    else:
        flat[_slot(dsa, 1, 5), 3] = NAN
    if fp8:                                  # an fp8 key reads stored * scale: spoil the scale
        cache.index_k_scale[lid].view(-1)[_slot(dsa, 2, 29)] = INF
    else:
        flat[_slot(dsa, 2, 29), 0] = -INF
    k = dsa.indexer.k.clone()
    k[6, 1] = NAN                            # a new key of the prefill, seen from position 6 on
    return IndexerInputs(dsa.indexer.q, dsa.indexer.weights, k)


@pytest.mark.parametrize("index_dtype", ["fp32", "fp8_e4m3"])
@pytest.mark.parametrize("name,device", [pytest.param(n, d, marks=m, id=f"{n}-{d}") for n, d, m in RUNS])
def test_nan_index_keys_give_nan_rows(name, device, index_dtype):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    layer = make_dsa_layer(topk=8, seed=5, device=device)
    dsa = make_dsa_case(layer, prefix_lens=PREFIX, new_lens=NEW, index_dtype=index_dtype,
                        device=device, seed=5)
    ix = _spoil(dsa, fp8=index_dtype == "fp8_e4m3", nan_byte=(name, device) != ("triton_dsa", "cpu"))
    ref = reference_dsa.attention(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache, dsa.meta, indexer=ix)
    assert reference_dsa.unscorable(dsa.layer, dsa.cache, dsa.meta, indexer=ix) == \
        [t in BLIND for t in range(dsa.meta.num_tokens)]
    backend = load_backend(name)
    out = backend.forward(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache,
                          backend.prepare(dsa.meta, dsa.cache), indexer=ix)
    blind = torch.tensor(BLIND, device=out.device)
    good = torch.tensor([t for t in range(out.shape[0]) if t not in BLIND], device=out.device)
    assert ref[blind].isnan().all() and out[blind].isnan().all(), name
    assert not ref[good].isnan().any() and not out[good].isnan().any(), name
    assert_close(out[good], ref[good], dtype="fp32", what=name)
    assert_close(out[good], dsa.reference[good], dtype="fp32", what="the other tokens unchanged")


def test_keys_past_a_tokens_position_do_not_blind_it():
    """Only keys the token scores count: a NaN at a position after it (the prefill's own later
    key) or in a slot no request owns leaves its row finite."""
    layer = make_dsa_layer(topk=8, seed=5)
    dsa = make_dsa_case(layer, prefix_lens=[0], new_lens=[9], seed=5, garbage=True)
    k = dsa.indexer.k.clone()
    k[8, 0] = NAN                            # the last token's own key: only it sees it
    ix = IndexerInputs(dsa.indexer.q, dsa.indexer.weights, k)
    assert reference_dsa.unscorable(dsa.layer, dsa.cache, dsa.meta, indexer=ix) == [False] * 8 + [True]
    out = load_backend("torch_native").forward(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache,
                                               load_backend("torch_native").prepare(dsa.meta, dsa.cache),
                                               indexer=ix)
    assert not out[:8].isnan().any() and out[8].isnan().all()
