"""PagedKVCache checks its arguments: each bad one is an AttnkitError naming argument and value."""
import math

import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.kvcache.paged import TORCH_KV_DTYPES, PagedKVCache
from attnkit.model.spec import LayerAttention, MLAConfig

SPEC = LayerAttention(0, 4, 2, 16)


def _raises(code, layers=(SPEC,), **kwargs):
    kwargs = dict(num_pages=4, page_size=4) | kwargs
    with pytest.raises(AttnkitError) as err:
        PagedKVCache(list(layers), **kwargs)
    assert err.value.code == code
    return err.value


@pytest.mark.parametrize("dtype", ["fp4", "int8", "float64", None, 3])   # "fp8" is fp8_e4m3 (test_fp8_storage)
def test_bad_dtype_names_valid_choices(dtype):
    err = _raises("AK430", dtype=dtype)
    assert err.field == "dtype" and str(dtype) in err.message
    for name in TORCH_KV_DTYPES:
        assert name in err.message


@pytest.mark.parametrize("dtype", list(TORCH_KV_DTYPES) + list(TORCH_KV_DTYPES.values()))
def test_valid_dtypes_accepted(dtype):
    cache = PagedKVCache([SPEC], num_pages=1, page_size=1, dtype=dtype)
    assert cache.k[0].dtype == TORCH_KV_DTYPES.get(dtype, dtype)


@pytest.mark.parametrize("field, value", [("num_pages", -1), ("num_pages", 0), ("num_pages", 2.5),
                                          ("page_size", 0), ("page_size", -16), ("page_size", None)])
def test_bad_sizes(field, value):
    err = _raises("AK430", **{field: value})
    assert err.field == field and str(value) in err.message and ">= 1" in err.message


def test_mla_layer_without_mla_sizes():
    err = _raises("AK419", layers=[LayerAttention(0, 4, 1, 16, kind="mla")])
    assert "mla" in err.message and "layer 0" in err.message


def test_mla_layer_with_sizes_still_builds():
    spec = LayerAttention(0, 4, 1, 24, kind="mla", mla=MLAConfig(kv_lora_rank=32, qk_rope_head_dim=8,
                                                                qk_nope_head_dim=16, v_head_dim=16))
    assert PagedKVCache([spec], num_pages=2, page_size=4).latent[0].shape == (2, 4, 40)


@pytest.mark.parametrize("which", ["k_scales", "v_scales"])
@pytest.mark.parametrize("scale", [0.0, -1.0, math.nan, math.inf, "2", None])
def test_bad_fp8_scales(which, scale):
    err = _raises("AK430", dtype="fp8_e4m3", **{which: {0: scale}})
    assert err.field == f"{which}[0]" and str(scale) in err.message and "> 0" in err.message


def test_scale_for_unknown_layer_rejected():
    err = _raises("AK430", dtype="fp8_e4m3", k_scales={7: 0.5})
    assert err.field == "k_scales" and "7" in err.message


def test_good_scales_kept():
    cache = PagedKVCache([SPEC], num_pages=1, page_size=1, dtype="fp8_e5m2",
                         k_scales={0: 0.25}, v_scales={0: torch.tensor(2.0)})
    assert cache.k_scales[0] == 0.25 and float(cache.v_scales[0]) == 2.0
