"""Extend kernel (EXTEND / MIXED / VERIFY) against the float64 reference.

On CPU these run through the Triton interpreter (see conftest.py): fp16/fp32 only, since the
interpreter computes tl.dot on bf16 operands wrongly; bf16 runs in test_triton_gpu.py.
"""
import zlib

import pytest
from factories import assert_close, make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.backends.triton.extend import EXTEND_VARIANTS, pick_extend_variant
from attnkit.backends.triton.decode import pick_decode_variant

# v1 reads every key through the block table; v2 reads the new tokens from k / v.
VARIANTS = pytest.mark.parametrize("variant", EXTEND_VARIANTS)

CASES = {
    # name: (layer options, case options)
    "gqa-page16-prefix": (dict(num_heads=4, num_kv_heads=2, head_dim=64),
                          dict(prefix_lens=[0, 21], new_lens=[19, 6], page_size=16)),
    "mha-page1": (dict(num_heads=2, num_kv_heads=2, head_dim=64),
                  dict(prefix_lens=[5, 0], new_lens=[7, 3], page_size=1)),
    "mqa-odd-page-window": (dict(num_heads=4, num_kv_heads=1, head_dim=64, sliding_window=6),
                            dict(prefix_lens=[11, 2], new_lens=[17, 5], page_size=5)),
    "softcap-sinks": (dict(num_heads=4, num_kv_heads=2, head_dim=64, logit_softcap=4.0, sinks=True),
                      dict(prefix_lens=[9, 30], new_lens=[12, 4], page_size=4, q_scale=6.0)),
    "encoder-non-causal": (dict(num_heads=2, num_kv_heads=1, head_dim=64, role="encoder"),
                           dict(prefix_lens=[0, 0], new_lens=[20, 7], page_size=8)),
    "head-dim-96-dv-64": (dict(num_heads=2, num_kv_heads=1, head_dim=96, v_head_dim=64),
                          dict(prefix_lens=[3], new_lens=[18], page_size=16)),
    "window-sinks-softcap-all": (dict(num_heads=4, num_kv_heads=2, head_dim=64, sliding_window=9,
                                      logit_softcap=3.0, sinks=True),
                                 dict(prefix_lens=[25], new_lens=[20], page_size=7)),
    "window-non-causal-page3": (dict(num_heads=2, num_kv_heads=1, head_dim=64,
                                               sliding_window=5, role="encoder"),
                                          dict(prefix_lens=[0, 0], new_lens=[23, 3], page_size=3)),
}


@VARIANTS
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_extend_matches_reference(run_triton, name, dtype, variant):
    layer_kw, case_kw = CASES[name]
    case = make_case(make_layer(**layer_kw, dtype=dtype), dtype=dtype, seed=zlib.crc32(name.encode()) % 97, **case_kw)
    assert_close(run_triton(case, extend_variant=variant), case.reference(), dtype=dtype,
                 what=f"{name} {variant}")


@VARIANTS
def test_mixed_batch_of_decode_and_prefill(run_triton, variant):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[30, 0, 17], new_lens=[1, 13, 1], page_size=16, dtype="fp16")
    assert case.meta.mode is ForwardMode.MIXED
    assert_close(run_triton(case, extend_variant=variant), case.reference(), dtype="fp16", what="mixed")


@VARIANTS
def test_verify_draft_tokens_are_causal_among_themselves(run_triton, variant):
    layer = make_layer(num_heads=4, num_kv_heads=1, head_dim=64, sliding_window=12, dtype="fp16")
    case = make_case(layer, prefix_lens=[19, 40], new_lens=[4, 4], page_size=16, dtype="fp16",
                     mode=ForwardMode.VERIFY)
    assert_close(run_triton(case, extend_variant=variant), case.reference(), dtype="fp16",
                 what="verify")


def test_unknown_variant_is_ak407():
    from attnkit.backends.triton.backend import TritonBackend
    from attnkit.errors import AttnkitError
    with pytest.raises(AttnkitError) as info:
        TritonBackend(extend_variant="v3")
    assert info.value.code == "AK407" and info.value.field == "extend_variant"


@pytest.mark.parametrize("pick,new_len", [(pick_extend_variant, 5), (pick_decode_variant, 1)],
                         ids=["extend", "decode"])
def test_v2_runs_only_where_k_v_equal_what_the_cache_holds(pick, new_len):
    """Both v2 kernels take the new K/V from k / v: fp8 pages round them, so fp8 keeps v1."""
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    same = make_case(layer, prefix_lens=[3], new_lens=[new_len], page_size=4, dtype="fp16")
    fp8 = make_case(layer, prefix_lens=[3], new_lens=[new_len], page_size=4, dtype="fp16",
                    kv_dtype="fp8_e4m3")
    assert pick("v2", same.k, same.v, same.cache, 0) == "v2"
    assert pick("v2", fp8.k, fp8.v, fp8.cache, 0) == "v1"
    assert pick("v1", same.k, same.v, same.cache, 0) == "v1"


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_kv_cache_applies_its_scales(run_triton, kv_dtype):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[14, 3], new_lens=[9, 6], page_size=4, dtype="fp16",
                     kv_dtype=kv_dtype)
    assert_close(run_triton(case), case.reference(), dtype="fp16", kv_dtype=kv_dtype, what=kv_dtype)


@VARIANTS
def test_block_sizes_do_not_change_the_result(run_triton, variant):
    """Query blocks smaller than a request and key tiles that straddle pages and the diagonal."""
    layer = make_layer(num_heads=2, num_kv_heads=1, head_dim=64, sliding_window=11, dtype="fp32")
    case = make_case(layer, prefix_lens=[13], new_lens=[37], page_size=3, dtype="fp32")
    for cfg in (dict(BLOCK_M=16, BLOCK_N=32), dict(BLOCK_M=32, BLOCK_N=16)):
        assert_close(run_triton(case, extend_config=cfg, extend_variant=variant), case.reference(),
                     dtype="fp32", what=f"{cfg} {variant}")
