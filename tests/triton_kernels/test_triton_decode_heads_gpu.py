"""Decode variant split_heads (decode_heads.py) on a CUDA GPU: bf16 / fp16, head dims 64 and
128, GQA groups, page sizes, the rule's split counts, and CUDA-graph replays (the tickets
of one replay left for the next), against the float64 reference."""

import pytest
from factories import assert_close, assert_replays_match, make_case, make_layer

pytestmark = pytest.mark.gpu

DECODE = dict(prefix_lens=[300, 1, 2500, 77], new_lens=[1, 1, 1, 1])


def _backend(**options):
    from attnkit.backends.triton.backend import TritonBackend
    return TritonBackend(decode_variant="split_heads", **options)


def _ran_heads(step) -> bool:
    return [key[0] for key in step.prepared.splits] == ["heads"]


@pytest.mark.parametrize("head_dim,heads,kv_heads", [(128, 32, 8), (64, 32, 8), (128, 8, 1), (64, 16, 16)])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("num_splits", [None, 1, 5])
def test_split_heads_matches_reference(head_dim, heads, kv_heads, dtype, num_splits):
    layer = make_layer(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, device="cuda")
    case = make_case(layer, dtype=dtype, device="cuda", page_size=16, **DECODE)
    backend = _backend(num_splits=num_splits)
    step = backend.prepare(case.meta, case.cache)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert _ran_heads(step)
    assert_close(out, case.reference(), dtype=dtype, what=f"d{head_dim} {heads}/{kv_heads} {dtype} S={num_splits}")


@pytest.mark.parametrize("page_size", [1, 8, 32, 64])
def test_split_heads_page_sizes(page_size):
    layer = make_layer(num_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16", device="cuda")
    case = make_case(layer, dtype="bf16", device="cuda", page_size=page_size, **DECODE)
    backend = _backend()
    step = backend.prepare(case.meta, case.cache)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert _ran_heads(step)
    assert_close(out, case.reference(), dtype="bf16", what=f"page {page_size}")


def test_split_heads_replays_in_a_cuda_graph():
    """B=16 at 1k keys (the rule's 8 splits: 128 programs), captured: each replay with new
    queries gives the reference (a replay that read stale partials or tickets would not)."""
    layer = make_layer(num_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16", device="cuda")
    case = make_case(layer, dtype="bf16", device="cuda", prefix_lens=[1023] * 16, new_lens=[1] * 16,
                     page_size=16)
    backend = _backend()
    step = backend.prepare(case.meta, case.cache)
    assert_replays_match(backend, case, step, dtype="bf16", what="")
    assert _ran_heads(step)
    assert step.prepared.counters.abs().sum().item() == 0


def test_split_heads_takes_a_decode_config_with_the_split_kernels_switches():
    """A decode_config override naming decode.py's switches (PACK, EDGE_MASK, PDL) still runs
    split_heads: its tile keys are taken, the split kernel's switches left out of its launch
    (Triton on a GPU raises KeyError on a keyword the kernel does not take)."""
    layer = make_layer(num_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16", device="cuda")
    case = make_case(layer, dtype="bf16", device="cuda", page_size=16, **DECODE)
    backend = _backend(decode_config=dict(BLOCK_N=16, num_stages=5, PACK=2, EDGE_MASK=True, PDL=True))
    step = backend.prepare(case.meta, case.cache)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert _ran_heads(step)
    assert_close(out, case.reference(), dtype="bf16", what="switches in the override")
