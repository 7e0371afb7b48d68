"""Decode variant stream (decode_stream.py, Gluon, sm_90 + Triton 3.6) on a CUDA GPU: bf16 /
fp16, head dims 64 and 128, GQA groups, pages of 16 / 32 / 64, unequal lengths with NaN / inf
in every slot no request owns, the new K/V written in the kernel or by its own launch, split
counts, tiles, the EARLY prologue, and CUDA-graph replays, against the float64 reference
(factories.Case)."""

import pytest
from factories import assert_close, assert_replays_match, make_case, make_layer

pytestmark = pytest.mark.gpu

DECODE = dict(prefix_lens=[300, 1, 2500, 77, 15, 64], new_lens=[1] * 6)   # 16 keys: one page


def _stream_or_skip():
    import torch
    import triton
    if torch.cuda.get_device_capability() != (9, 0) or not triton.__version__.startswith("3.6."):
        pytest.skip("stream is declared for sm_90 with Triton 3.6")


def _run(backend, case):
    step = backend.prepare(case.meta, case.cache)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert [key[0] for key in step.prepared.splits] == ["stream"]     # the stream kernel ran
    return out, step


def _backend(**options):
    from attnkit.backends.triton.backend import TritonBackend
    return TritonBackend(decode_variant="stream", **options)


@pytest.mark.parametrize("head_dim,heads,kv_heads,dtype", [(128, 32, 8, "bf16"), (64, 32, 8, "bf16"),
                                                          (128, 8, 1, "bf16"), (128, 64, 8, "bf16"),
                                                          (128, 32, 8, "fp16"), (64, 16, 16, "fp16")])
@pytest.mark.parametrize("num_splits", [None, 1, 5])
@pytest.mark.parametrize("fused", [True, False])
def test_stream_matches_reference(head_dim, heads, kv_heads, dtype, num_splits, fused):
    _stream_or_skip()
    layer = make_layer(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, device="cuda")
    case = make_case(layer, dtype=dtype, device="cuda", page_size=16, garbage=True, **DECODE)
    out, _ = _run(_backend(num_splits=num_splits, decode_config=dict(FUSED_WRITE=fused)), case)
    assert_close(out, case.reference(), dtype=dtype,
                 what=f"d{head_dim} {heads}/{kv_heads} {dtype} S={num_splits} fused={fused}")


@pytest.mark.parametrize("page_size", [16, 32, 64])
@pytest.mark.parametrize("tile", [dict(BLOCK_N=64, NUM_STAGES=4), dict(BLOCK_N=128, NUM_STAGES=3),
                                  dict(BLOCK_N=32, NUM_STAGES=8), dict(BLOCK_N=64, NUM_STAGES=2, maxnreg=128)])
def test_stream_pages_and_tiles(page_size, tile):
    _stream_or_skip()
    layer = make_layer(num_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16", device="cuda")
    case = make_case(layer, dtype="bf16", device="cuda", page_size=page_size, garbage=True, **DECODE)
    out, _ = _run(_backend(decode_config=tile), case)
    assert_close(out, case.reference(), dtype="bf16", what=f"page {page_size} {tile}")


def test_stream_writes_the_new_kv_into_the_cache():
    """FUSED_WRITE: each request's new K / V row lands in its slot (read back after the step)."""
    _stream_or_skip()
    import torch
    layer = make_layer(num_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16", device="cuda")
    case = make_case(layer, dtype="bf16", device="cuda", page_size=16, **DECODE)
    _run(_backend(), case)
    slots = case.meta.slot_mapping.long()
    kc = case.cache.k[0].reshape(-1, 8, 128)
    vc = case.cache.v[0].reshape(-1, 8, 128)
    assert torch.equal(kc[slots], case.k) and torch.equal(vc[slots], case.v)


@pytest.mark.parametrize("num_reqs,context,early", [(16, 1024, False), (1, 4096, False), (16, 1024, True)])
def test_stream_replays_in_a_cuda_graph(num_reqs, context, early):
    """Captured (B=16: one split a (request, KV head); B=1: the rule's splits and the reduce
    launch): each replay with new queries gives the reference."""
    _stream_or_skip()
    import torch

    layer = make_layer(num_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16", device="cuda")
    case = make_case(layer, dtype="bf16", device="cuda", prefix_lens=[context - 1] * num_reqs,
                     new_lens=[1] * num_reqs, page_size=16, garbage=True)
    backend = _backend(decode_config=dict(EARLY=early))
    step = backend.prepare(case.meta, case.cache)
    assert_replays_match(backend, case, step, dtype="bf16", what=f"B={num_reqs}")


@pytest.mark.parametrize("head_dim,heads,kv_heads,dtype", [(128, 32, 8, "bf16"), (128, 8, 1, "bf16"),
                                                          (64, 16, 16, "fp16")])
@pytest.mark.parametrize("num_splits", [None, 5])
@pytest.mark.parametrize("fused", [True, False])
def test_stream_early_prologue_matches_reference(head_dim, heads, kv_heads, dtype, num_splits, fused):
    """EARLY (configs.DECODE_STREAM_TILES' switch): the first page ids read within the table's
    width before the length is known, the new key folded in before the key loop."""
    _stream_or_skip()
    layer = make_layer(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, device="cuda")
    case = make_case(layer, dtype=dtype, device="cuda", page_size=16, garbage=True, **DECODE)
    out, _ = _run(_backend(num_splits=num_splits, decode_config=dict(FUSED_WRITE=fused, EARLY=True)), case)
    assert_close(out, case.reference(), dtype=dtype,
                 what=f"EARLY d{head_dim} {heads}/{kv_heads} {dtype} S={num_splits} fused={fused}")


@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("tile", [dict(BLOCK_N=64, NUM_STAGES=4), dict(BLOCK_N=64, NUM_STAGES=2, maxnreg=128)])
def test_stream_early_pages_and_tiles(page_size, tile):
    _stream_or_skip()
    layer = make_layer(num_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16", device="cuda")
    case = make_case(layer, dtype="bf16", device="cuda", page_size=page_size, garbage=True, **DECODE)
    out, _ = _run(_backend(decode_config=tile | dict(EARLY=True)), case)
    assert_close(out, case.reference(), dtype="bf16", what=f"EARLY page {page_size} {tile}")
