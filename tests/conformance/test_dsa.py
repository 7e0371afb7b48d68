"""Every backend declaring sparse_topk against the float64 DSA reference (docs/dsa.md).

Cases come from the declarations (dsa_cases.py). Each accuracy case checks the output against
``attnkit.reference_dsa`` by the compute dtype's tolerances, and the cache after the step: the
latent and the index keys (with their fp8 scales) hold what the reference says they must.
CUDA cases are marked ``gpu``.
"""
from __future__ import annotations

import pytest
import torch

from attnkit import reference, reference_dsa
from attnkit.backends.sparse import IndexerInputs
from attnkit.errors import AttnkitError
from attnkit.model.spec import MLAConfig
from attnkit.registry import declarations, load_backend
from attnkit.registry.kernels import KernelTable
from conformance_cases import DEFAULT_FP8_TOLERANCE, params, torch_device
from dsa_cases import DSAConf, all_cases, lengths
from dsa_factory import make_dsa_case, make_dsa_layer
from factories import assert_close

ACCURACY, PROBES = all_cases()


def build(c: DSAConf):
    rank, rope = c.mla_dims
    width = 128 if rank >= 512 else 32
    layer = make_dsa_layer(topk=c.topk, index_heads=c.sparse_dims[0], index_dim=c.sparse_dims[1],
                           num_heads=c.heads, mla=MLAConfig(rank, rope, width, width), dtype=c.dtype,
                           device=torch_device(c.device), seed=c.seed)
    prefix, new = lengths(c)
    return make_dsa_case(layer, prefix_lens=prefix, new_lens=new, page_size=c.page_size,
                         dtype=c.dtype, kv_dtype=c.kv_dtype, index_dtype=c.index_dtype,
                         device=torch_device(c.device), seed=c.seed, garbage=c.edge == "garbage",
                         ties=c.edge == "ties")


def run(c: DSAConf, dsa):
    """The backend's forward; a variant case hands it that variant alone for every role."""
    options = {}
    if c.variant is not None:
        k = next(k for k in declarations()[c.backend].variants if k.name == c.variant)
        options["kernels"] = {role: KernelTable.only(role, k.name) for role in k.roles}
    backend = load_backend(c.backend, **options)
    step = backend.prepare(dsa.meta, dsa.cache)
    return backend.forward(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache, step, indexer=dsa.indexer)


@pytest.mark.parametrize("conf", params(ACCURACY))
def test_matches_dsa_reference(conf: DSAConf):
    dsa = build(conf)
    latent_after = reference.stored_kv(dsa.k, None, dsa.layer, dsa.cache, dsa.meta)
    index_after = reference_dsa.stored_index(dsa.indexer.k, dsa.layer, dsa.cache, dsa.meta)
    out = run(conf, dsa)
    spec = dsa.layer.spec
    assert tuple(out.shape) == (dsa.meta.num_tokens, spec.num_heads * spec.mla.v_head_dim)
    assert torch.isfinite(out).all(), "non-finite output"
    assert_close(out, dsa.reference, dtype=conf.dtype, kv_dtype=conf.kv_dtype,
                 fp8=DEFAULT_FP8_TOLERANCE, what=conf.id)
    got_latent = reference.stored_kv(None, None, dsa.layer, dsa.cache, dsa.meta)[0]
    torch.testing.assert_close(got_latent, latent_after[0], rtol=0, atol=0, equal_nan=True)
    got_index = reference_dsa.stored_index(None, dsa.layer, dsa.cache, dsa.meta)
    tol = 0.07 if conf.index_dtype == "fp8_e4m3" else 0    # a kernel may round fp8 its own way: 1 ulp
    torch.testing.assert_close(got_index, index_after, rtol=tol, atol=0, equal_nan=True)


@pytest.mark.parametrize("conf", params(PROBES))
def test_undeclared_dsa_input_is_refused(conf: DSAConf):
    dsa = build(conf)
    with pytest.raises(AttnkitError):
        run(conf, dsa)


# ---- the cases can fail: what they hold, and wrong rules they catch (CPU, torch_native) ----

CPU = [c for c in ACCURACY if c.device == "cpu" and c.backend == "torch_native"]


def test_the_cases_cover_every_mode_edge_and_context():
    assert CPU
    assert {c.mode for c in CPU} == {"decode", "prefill", "prefix", "mixed"}
    assert {c.edge for c in CPU} >= {None, "garbage", "ties", "short"}
    assert any(c.index_dtype == "fp8_e4m3" and c.edge == "garbage" for c in CPU)
    for c in CPU:
        prefix, new = lengths(c)
        contexts = [q + 1 for p, n in zip(prefix, new) for q in range(p, p + n)]   # per query
        if c.edge == "short":
            assert max(contexts) <= c.topk, c.id
        else:
            assert min(contexts) <= c.topk < max(contexts), c.id   # shorter and longer than top-k


def test_tie_cases_split_equal_scores_at_the_boundary():
    ties = [c for c in CPU if c.edge == "ties"]
    assert ties
    for c in ties:
        assert build(c).boundary_ties > 0, f"{c.id}: no token's top-k boundary is a tie"


def _wrong_choice(rule):
    def choose(scores, topk):
        n = scores.shape[0]
        values = scores.tolist()
        return sorted(rule(values, n, topk))
    return choose


WRONG_RULES = {
    "ties_to_the_higher_position": lambda v, n, k: (list(range(n)) if n <= k else
                                                    sorted(range(n), key=lambda s: (-v[s], -s))[:k]),
    "one_fewer": lambda v, n, k: sorted(range(n), key=lambda s: (-v[s], s))[:max(k - 1, 1)],
    "lowest_scores": lambda v, n, k: sorted(range(n), key=lambda s: (v[s], s))[:k],
    "no_selection": lambda v, n, k: list(range(n)),
}


@pytest.mark.parametrize("name", sorted(WRONG_RULES))
def test_a_wrong_selection_rule_fails_the_cases(name, monkeypatch):
    """The reference with a wrong top-k rule misses the right reference on some case of each
    kind it concerns (every rule: some non-tie case; the tie rule: every tie case whose
    boundary splits a tie)."""
    failed = []
    for c in CPU:
        dsa = build(c)
        with monkeypatch.context() as patch:
            patch.setattr(reference_dsa, "_choose", _wrong_choice(WRONG_RULES[name]))
            wrong = reference_dsa.attention(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache, dsa.meta,
                                            indexer=dsa.indexer)
        try:
            assert_close(wrong, dsa.reference, dtype=c.dtype, kv_dtype=c.kv_dtype, what=c.id)
        except AssertionError:
            failed.append(c)
    assert failed, f"{name}: no case tells it apart"
    if name == "ties_to_the_higher_position":
        assert any(c.edge == "ties" for c in failed)


def test_a_dsa_layer_needs_its_indexer_inputs():
    """AK448: no indexer for a DSA layer, one for a plain layer, wrong shapes / dtypes."""
    c = next(c for c in CPU if c.mode == "decode")
    dsa = build(c)
    backend = load_backend("torch_native")
    step = backend.prepare(dsa.meta, dsa.cache)
    ix = dsa.indexer
    bad = [None, "q", IndexerInputs(ix.q[:, :1], ix.weights, ix.k),
           IndexerInputs(ix.q, ix.weights.double(), ix.k), IndexerInputs(ix.q, ix.weights, ix.k[:, :3]),
           IndexerInputs(ix.q, ix.weights, ix.k.unsqueeze(1))]
    before = dsa.cache.index_k[0].clone()
    for indexer in bad:
        with pytest.raises(AttnkitError) as err:
            backend.forward(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache, step, indexer=indexer)
        assert err.value.code == "AK448"
    assert torch.equal(dsa.cache.index_k[0], before)        # nothing written on a refusal


def test_a_plain_mla_layer_takes_no_indexer_inputs():
    import dataclasses

    from attnkit.backends.base import RuntimeLayer

    dsa = build(next(c for c in CPU if c.mode == "decode"))
    plain = RuntimeLayer(dataclasses.replace(dsa.layer.spec, sparse_topk=None), w_kc=dsa.layer.w_kc,
                         w_vc=dsa.layer.w_vc)
    backend = load_backend("torch_native")
    with pytest.raises(AttnkitError) as err:
        backend.forward(dsa.q, dsa.k, dsa.v, plain, dsa.cache, backend.prepare(dsa.meta, dsa.cache),
                        indexer=dsa.indexer)
    assert err.value.code == "AK448"


def test_the_dense_reference_refuses_a_dsa_layer():
    dsa = build(CPU[0])
    with pytest.raises(AttnkitError) as err:
        reference.attention(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache, dsa.meta)
    assert err.value.code == "AK420"


def test_equal_index_keys_score_exactly_equal_in_the_reference():
    """The tie rule needs exact ties: positions holding the same key score bitwise the same
    (a float64 matmul over 18 positions rounded its last two columns differently, so the
    reference broke ties by noise instead of toward the lower position)."""
    from dsa_factory import make_dsa_layer
    layer = make_dsa_layer(topk=8, index_heads=64, index_dim=128, mla=MLAConfig(64, 16, 32, 32))
    dsa = make_dsa_case_ties(layer)
    keys = reference_dsa.stored_index(dsa.indexer.k, layer, dsa.cache, dsa.meta)
    scores = reference_dsa.index_scores(layer, dsa.cache, dsa.meta, indexer=dsa.indexer)
    row = dsa.meta.block_tables_cpu[0]
    page = dsa.meta.page_size
    for t, s in enumerate(scores):
        ks = keys[[row[p // page] * page + p % page for p in range(len(s))]]
        for a in range(len(s)):
            for b in range(a):
                if torch.equal(ks[a], ks[b]):
                    assert s[a].item() == s[b].item(), (t, a, b)


def make_dsa_case_ties(layer):
    from dsa_factory import make_dsa_case
    return make_dsa_case(layer, prefix_lens=[0], new_lens=[23], page_size=16, ties=True, seed=3)


@pytest.mark.parametrize("name", ["torch_native", pytest.param("triton_dsa", marks=pytest.mark.interpreter)])
def test_non_finite_indexer_inputs_give_nan_rows_not_a_silent_selection(name):
    """Found by the probe: a NaN indexer weight made every score of its token NaN, and the token
    silently attended to positions 0..topk-1 with a finite output (the reference too). Now a
    token whose indexer q or weights hold a NaN / inf gets an all-NaN row, in every backend
    and the reference; the other tokens are unchanged."""
    if name == "triton_dsa" and not torch.cuda.is_available():
        pytest.importorskip("triton")
    layer = make_dsa_layer(topk=8, seed=3)
    dsa = make_dsa_case(layer, prefix_lens=[0, 20], new_lens=[9, 1], seed=3)
    q, w = dsa.indexer.q.clone(), dsa.indexer.weights.clone()
    w[9, 0] = float("nan")                  # the decode token: 21 candidates, top-k 8
    q[3, 1, 0] = float("inf")               # a prefill token at position 3 (all 0..3 visible)
    ix = IndexerInputs(q, w, dsa.indexer.k)
    ref = reference_dsa.attention(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache, dsa.meta, indexer=ix)
    backend = load_backend(name)
    out = backend.forward(dsa.q, dsa.k, dsa.v, dsa.layer, dsa.cache, backend.prepare(dsa.meta, dsa.cache),
                          indexer=ix)
    bad = torch.tensor([3, 9])
    good = torch.tensor([t for t in range(out.shape[0]) if t not in (3, 9)])
    assert ref[bad].isnan().all() and out[bad].isnan().all()
    assert not ref[good].isnan().any()
    assert_close(out[good], ref[good], dtype="fp32", what=name)
    assert_close(out[good], dsa.reference[good], dtype="fp32", what="the finite tokens unchanged")
