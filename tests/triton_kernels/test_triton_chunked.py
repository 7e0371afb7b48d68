"""Chunked local attention (attention_chunk) in the triton extend and decode kernels, against
the float64 reference; on CPU through the Triton interpreter (fp16/fp32, small shapes).

The interpreter's tiles are 16 keys (extend_config / decode_config), so chunk sizes below,
equal to and above a tile, and not a multiple of it, each take a different path through
key_ranges (masked edge, unmasked middle, skipped tiles). test_triton_chunked_gpu.py runs
bf16 and Llama-4-sized shapes.
"""
import math

import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.batch import slots_of
from attnkit.backends.metadata import ForwardMode
from attnkit.backends.triton.decode import DECODE_VARIANTS, decode_config, decode_span
from attnkit.backends.triton.extend import EXTEND_VARIANTS, extend_config

EXTEND = {
    # name: (layer options, case options); every case crosses chunk boundaries
    "c8-page5-prefill": (dict(num_heads=4, num_kv_heads=2, attention_chunk=8),
                         dict(prefix_lens=[0, 0], new_lens=[37, 9], page_size=5)),
    "c24-page7-prefix": (dict(num_heads=4, num_kv_heads=2, attention_chunk=24),
                         dict(prefix_lens=[22, 53], new_lens=[9, 30], page_size=7)),
    "c32-page16-prefix": (dict(num_heads=2, num_kv_heads=1, attention_chunk=32),
                          dict(prefix_lens=[40, 3], new_lens=[50, 61], page_size=16)),
    "c3-mqa-page3": (dict(num_heads=4, num_kv_heads=1, attention_chunk=3),
                     dict(prefix_lens=[4, 0], new_lens=[11, 7], page_size=3)),
    "c16-window5": (dict(num_heads=2, num_kv_heads=1, attention_chunk=16, sliding_window=5),
                    dict(prefix_lens=[13], new_lens=[30], page_size=6)),
    "c8-window12-sinks-softcap": (dict(num_heads=4, num_kv_heads=2, attention_chunk=8,
                                       sliding_window=12, sinks=True, logit_softcap=4.0),
                                  dict(prefix_lens=[15, 6], new_lens=[12, 19], page_size=4,
                                       q_scale=4.0)),
}

DECODE = {
    # positions kv_len - 1: last of a chunk, first of a chunk, inside one, far along
    "c16-page5": (dict(num_heads=4, num_kv_heads=2, attention_chunk=16),
                  dict(prefix_lens=[15, 16, 40, 70], page_size=5)),
    "c24-page16": (dict(num_heads=4, num_kv_heads=1, attention_chunk=24),
                   dict(prefix_lens=[23, 24, 100, 49], page_size=16)),
    "c3-page4-sinks": (dict(num_heads=4, num_kv_heads=2, attention_chunk=3, sinks=True),
                       dict(prefix_lens=[2, 3, 31], page_size=4)),
    "c32-window10": (dict(num_heads=2, num_kv_heads=2, attention_chunk=32, sliding_window=10),
                     dict(prefix_lens=[31, 32, 38, 90], page_size=7)),
}


def _case(layer_kw, case_kw, dtype, seed, **extra):
    layer = make_layer(head_dim=64, dtype=dtype, **layer_kw)
    return make_case(layer, dtype=dtype, seed=seed, **case_kw, **extra)


@pytest.mark.parametrize("variant", EXTEND_VARIANTS)
@pytest.mark.parametrize("name", sorted(EXTEND))
def test_extend_chunked_matches_reference(run_triton, name, variant):
    dtype = ("fp16", "fp32")[sorted(EXTEND).index(name) % 2]
    case = _case(*EXTEND[name], dtype, seed=len(name))
    assert_close(run_triton(case, extend_variant=variant), case.reference(), dtype=dtype,
                 what=f"{name} {dtype} {variant}")


@pytest.mark.parametrize("variant", EXTEND_VARIANTS)
def test_verify_and_mixed_across_a_chunk_boundary(run_triton, variant):
    layer_kw = dict(num_heads=4, num_kv_heads=2, attention_chunk=16)
    verify = _case(layer_kw, dict(prefix_lens=[14, 31, 5], new_lens=[4, 4, 4], page_size=6), "fp16",
                   seed=1, mode=ForwardMode.VERIFY)
    mixed = _case(layer_kw, dict(prefix_lens=[47, 0, 16], new_lens=[1, 35, 1], page_size=6), "fp16",
                  seed=2)
    assert mixed.meta.mode is ForwardMode.MIXED
    for what, case in (("verify", verify), ("mixed", mixed)):
        assert_close(run_triton(case, extend_variant=variant), case.reference(), dtype="fp16",
                     what=f"{what} {variant}")


@pytest.mark.parametrize("variant", DECODE_VARIANTS)
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("name", sorted(DECODE))
def test_decode_chunked_matches_reference(run_triton, name, num_splits, variant):
    dtype = "fp32" if num_splits == 1 else "fp16"
    layer_kw, case_kw = DECODE[name]
    prefix = case_kw["prefix_lens"]
    case = _case(layer_kw, dict(case_kw, new_lens=[1] * len(prefix)), dtype, seed=len(name))
    assert case.meta.mode is ForwardMode.DECODE
    assert_close(run_triton(case, num_splits=num_splits, decode_variant=variant), case.reference(),
                 dtype=dtype, what=f"{name} splits={num_splits} {variant}")


def _poison_before_chunk(case, block_n: int) -> int:
    """Write NaN into every cached K/V row of each request that lies in a whole key tile
    before its first query's chunk start: tiles the kernels must never load (one NaN read
    and masked still turns the output NaN). Returns how many rows were poisoned."""
    spec, lid = case.layer.spec, case.layer.layer_id
    k, v = (buf.view(-1, *buf.shape[2:]) for buf in (case.cache.k[lid], case.cache.v[lid]))
    poisoned = 0
    for r in case.requests:
        start = (r.prefix_len // spec.attention_chunk) * spec.attention_chunk
        below = (start // block_n) * block_n           # keys [0, below) sit in skipped tiles
        slots = torch.tensor(slots_of(r.block_table, range(below), case.meta.page_size), dtype=torch.long)
        k[slots], v[slots] = math.nan, math.nan
        poisoned += below
    return poisoned


@pytest.mark.parametrize("variant", EXTEND_VARIANTS)
def test_extend_never_loads_tiles_before_the_chunk(run_triton, variant):
    case = _case(dict(num_heads=2, num_kv_heads=1, attention_chunk=32),
                 dict(prefix_lens=[70, 37], new_lens=[20, 40], page_size=5), "fp32", seed=3)
    assert _poison_before_chunk(case, extend_config(64, torch.float32, interpret=True)["BLOCK_N"]) >= 96
    out = run_triton(case, extend_variant=variant)
    assert_close(out, case.reference(), dtype="fp32", what=f"poisoned {variant}")


@pytest.mark.parametrize("variant", DECODE_VARIANTS)
@pytest.mark.parametrize("num_splits", [1, 2])
def test_decode_never_loads_tiles_before_the_chunk(run_triton, variant, num_splits):
    case = _case(dict(num_heads=4, num_kv_heads=2, attention_chunk=24),
                 dict(prefix_lens=[80, 50], new_lens=[1, 1], page_size=7), "fp32", seed=4)
    assert _poison_before_chunk(case, decode_config(64, torch.float32, interpret=True)["BLOCK_N"]) >= 96
    out = run_triton(case, num_splits=num_splits, decode_variant=variant)
    assert_close(out, case.reference(), dtype="fp32", what=f"poisoned splits={num_splits} {variant}")


def test_decode_span_starts_at_the_chunk_tile():
    """Split sizing (the backend's own split choice) counts only the keys from the query's
    chunk (and window) tile on."""
    assert decode_span(100, None, None, 16) == 100
    assert decode_span(100, None, 24, 16) == 100 - 96          # query 99: chunk [96, 120)
    assert decode_span(97, None, 24, 16) == 97 - 96            # query 96: first of its chunk
    assert decode_span(96, None, 24, 16) == 96 - 64            # query 95: chunk [72, 96), tile 64
    assert decode_span(100, 10, 64, 16) == 100 - 80            # window edge 90 is later
    assert decode_span(100, 50, 24, 16) == 100 - 96            # chunk start 96 is later
