"""Inputs triton_mla cannot serve raise AttnkitError before any kernel runs: the shared codes
(AK440, AK443-AK446, AK411) that replaced its own AK460-AK466."""
import pytest
import torch
from factories import make_case, make_layer

from attnkit.backends.base import RuntimeLayer
from attnkit.backends.triton_mla.backend import TritonMLABackend
from attnkit.errors import CATALOG, AttnkitError
from attnkit.model.spec import MLAConfig
from attnkit.registry import declarations, load_backend

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _case(**kw):
    layer = make_layer(kind="mla", num_heads=4, dtype="fp32", device=DEV, **kw)
    return make_case(layer, prefix_lens=[5], new_lens=[1], page_size=16, dtype="fp32", device=DEV)


def _raises(code, case, q=None, k=None, v=None, layer=None, backend=None):
    backend = backend or TritonMLABackend()
    with pytest.raises(AttnkitError) as err:
        backend.forward(case.q if q is None else q, case.k if k is None else k, v,
                        layer or case.layer, case.cache, backend.prepare(case.meta, case.cache))
    assert err.value.code == code and code in CATALOG
    return err.value


def test_registered_and_loadable():
    decl = declarations()["triton_mla"]
    assert decl.capabilities.kinds == ("mla",)
    assert isinstance(load_backend("triton_mla"), TritonMLABackend)


def test_missing_up_projection_rejected():
    case = _case()
    _raises("AK443", case, layer=RuntimeLayer(spec=case.layer.spec, w_kc=case.layer.w_kc))


def test_undeclared_mla_dims_rejected():
    case = _case(mla=MLAConfig(kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16,
                               v_head_dim=16))
    _raises("AK445", case)


def test_fp8_e5m2_cache_rejected():
    layer = make_layer(kind="mla", num_heads=4, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[5], new_lens=[1], page_size=16, dtype="fp16",
                     kv_dtype="fp8_e5m2", device=DEV)
    _raises("AK444", case)


def test_sliding_window_rejected():
    case = _case(sliding_window=8)
    _raises("AK440", case)


def test_chunked_local_rejected_not_ignored():
    """Every feature outside the declaration is refused, chunked local attention included
    (a list of known-unserved features once let it through as full attention)."""
    err = _raises("AK440", _case(attention_chunk=4))
    assert err.actual == ["chunked_local"]


def test_shape_mismatch_rejected():
    case = _case()
    bad = RuntimeLayer(spec=case.layer.spec, w_kc=case.layer.w_kc.transpose(1, 2),
                         w_vc=case.layer.w_vc)
    _raises("AK411", case, layer=bad)   # caught by the shared validation before the backend


def test_page_size_rejected():
    layer = make_layer(kind="mla", num_heads=4, dtype="fp32", device=DEV)
    case = make_case(layer, prefix_lens=[5], new_lens=[1], page_size=8, dtype="fp32", device=DEV)
    _raises("AK446", case)
