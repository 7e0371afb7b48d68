"""The shared runtime check layer (backends/envelope.py): one code per concept, derived from a
backend's declaration. Each concept is proven on a declaration narrowed by data alone (the
backend code is torch_native's, unchanged), so the refusal can only come from the data."""
import dataclasses

import pytest
import torch
from factories import make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.backends.torch_native.backend import TorchNativeBackend
from attnkit.backends.torch_native.declaration import DECLARATION
from attnkit.errors import CATALOG, AttnkitError
from attnkit.kvcache.paged import PagedKVCache
from attnkit.registry.capabilities import MultipleOf


def narrowed(**caps):
    """torch_native with its declaration's capabilities replaced by ``caps``."""
    decl = dataclasses.replace(DECLARATION, name="narrow", capabilities=dataclasses.replace(
        DECLARATION.capabilities, **caps))
    return type("Narrow", (TorchNativeBackend,), {"declaration": decl})()


def refusal(backend, case, **kw):
    with pytest.raises(AttnkitError) as err:
        backend.forward(case.q, case.k, case.v, case.layer, case.cache,
                        backend.prepare(case.meta, case.cache))
    assert err.value.code in CATALOG and not CATALOG[err.value.code].merged_into
    for key, want in kw.items():
        assert getattr(err.value, key) == want, (key, err.value)
    return err.value


def _case(layer=None, **kw):
    layer = layer or make_layer(num_heads=4, num_kv_heads=2, head_dim=16)
    return make_case(layer, **({"prefix_lens": [3, 0], "new_lens": [1, 5], "page_size": 4} | kw))


def test_the_full_declaration_serves_what_is_narrowed_below():
    """The oracle can pass: every case below runs on torch_native's own declaration."""
    backend = TorchNativeBackend()
    for case in (_case(), _case(make_layer(kind="mla", num_heads=2)),
                 _case(make_layer(num_heads=2, head_dim=16, sliding_window=3)),
                 _case(make_layer(num_heads=2, head_dim=16, v_head_dim=8)),
                 _case(dtype="fp16"), _case(kv_dtype="fp8_e4m3")):
        backend.forward(*case.args(), backend.prepare(case.meta, case.cache))


def test_kind_not_served_is_ak440():
    err = refusal(narrowed(kinds=("mha",)), _case(make_layer(kind="mla", num_heads=2)),
                  code="AK440", field="layer.kind")
    assert "torch_native" in err.details["backends"]


def test_feature_not_served_is_ak440():
    case = _case(make_layer(num_heads=2, head_dim=16, sliding_window=3))
    refusal(narrowed(features=frozenset()), case, code="AK440", field="layer.features",
            actual=["sliding_window"])


def test_compute_dtype_not_served_is_ak444():
    refusal(narrowed(dtypes=("fp32",)), _case(dtype="fp16"), code="AK444", field="q.dtype",
            actual="fp16")


def test_kv_cache_dtype_not_served_is_ak444_at_prepare():
    case = _case(kv_dtype="fp8_e4m3")
    with pytest.raises(AttnkitError) as err:
        narrowed(kv_cache_dtypes=("fp32",)).prepare(case.meta, case.cache)
    assert (err.value.code, err.value.field, err.value.actual) == ("AK444", "kv_cache_dtype", "fp8_e4m3")


@pytest.mark.parametrize("caps,layer_kw,field", [
    (dict(head_dims=(64,)), dict(head_dim=16), "layer.spec.head_dim"),
    (dict(v_head_dims=None), dict(head_dim=16, v_head_dim=8), "layer.spec.v_head_dim"),
    (dict(v_head_dims=(4,)), dict(head_dim=16, v_head_dim=8), "layer.spec.v_head_dim"),
    (dict(mla_dims=((512, 64),)), dict(kind="mla"), "layer.spec.mla_dims"),
], ids=["head_dim", "v_head_dim-none", "v_head_dim-other", "mla_dims"])
def test_head_dim_not_served_is_ak445(caps, layer_kw, field):
    refusal(narrowed(**caps), _case(make_layer(num_heads=2, **layer_kw)), code="AK445", field=field)


@pytest.mark.parametrize("pages", [(16,), MultipleOf(8)])
def test_page_size_not_served_is_ak446_at_prepare(pages):
    case = _case()
    with pytest.raises(AttnkitError) as err:
        narrowed(page_sizes=pages).prepare(case.meta, case.cache)
    assert (err.value.code, err.value.field, err.value.actual) == ("AK446", "page_size", 4)


def test_device_not_served_is_ak447_at_prepare(monkeypatch):
    case = _case()
    with pytest.raises(AttnkitError) as err:
        narrowed(platforms=("cuda",)).prepare(case.meta, case.cache)
    assert (err.value.code, err.value.field) == ("AK447", "device")
    # a Triton backend runs CPU tensors through the interpreter, and only there
    triton_like = narrowed(platforms=("cuda",), requires=("torch", "triton"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    triton_like.prepare(case.meta, case.cache)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(AttnkitError) as err:
        triton_like.prepare(case.meta, case.cache)
    assert err.value.code == "AK447" and "TRITON_INTERPRET" in err.value.message


def test_phase_and_verify_not_served_are_ak420_at_prepare():
    decode = _case(prefix_lens=[3, 7], new_lens=[1, 1])
    assert decode.meta.mode is ForwardMode.DECODE
    with pytest.raises(AttnkitError) as err:
        narrowed(phases=("prefill",)).prepare(decode.meta, decode.cache)
    assert (err.value.code, err.value.actual) == ("AK420", "decode")
    verify = _case(prefix_lens=[3, 7], new_lens=[2, 2], mode=ForwardMode.VERIFY)
    with pytest.raises(AttnkitError) as err:
        narrowed(features=DECLARATION.capabilities.features - {"verify"}).prepare(verify.meta, verify.cache)
    assert (err.value.code, err.value.actual) == ("AK420", "VERIFY")


def test_a_declared_runtime_check_runs_once_per_layer_spec(monkeypatch):
    """What the data cannot say is the declaration's hook, called once per spec and page size,
    not per layer call or per step."""
    calls = []
    hook = lambda spec, *, page_size: calls.append((spec.layer_id, page_size))  # noqa: E731
    monkeypatch.setattr("attnkit.registry.discovery.load_hook",
                        lambda path: hook if path == "tests:hook" else None)
    backend = type("Hooked", (TorchNativeBackend,), {"declaration": dataclasses.replace(
        DECLARATION, name="hooked", runtime_check="tests:hook")})()
    case = _case()
    for _ in range(3):
        step = backend.prepare(case.meta, case.cache)
        for _ in range(2):
            backend.forward(*case.args(), step)
    assert calls == [(0, 4)]


def test_a_spec_passes_by_identity_not_equality():
    """attention_chunk=True equals 1 (and hashes alike): a memo keyed by equality let the
    bool through once the int had passed."""
    case = _case(make_layer(num_heads=2, head_dim=16, attention_chunk=1))
    backend = TorchNativeBackend()
    backend.forward(*case.args(), backend.prepare(case.meta, case.cache))
    case.layer.spec = dataclasses.replace(case.layer.spec, attention_chunk=True)
    refusal(backend, case, code="AK419", field="layer.spec.attention_chunk")


def test_hybrid_checks_every_inner_backend_against_the_shared_cache():
    from attnkit.backends.hybrid import HybridBackend

    case = _case()
    hybrid = HybridBackend(TorchNativeBackend(), TorchNativeBackend(),
                           extend=narrowed(kv_cache_dtypes=("fp16",)))
    with pytest.raises(AttnkitError) as err:          # extend is idle this step: checked anyway
        hybrid.prepare(case.meta, case.cache)
    assert err.value.code == "AK444" and "hybrid extend" in err.value.message


def test_cache_on_another_layout_is_checked_again():
    """A step forwarded with a cache other than its own is checked against that cache's
    declaration-relevant layout too (page size, dtype)."""
    case = _case()
    backend = narrowed(kv_cache_dtypes=("fp32",))
    step = backend.prepare(case.meta, case.cache)
    other = PagedKVCache([case.layer.spec], num_pages=case.cache.num_pages, page_size=4,
                         dtype=torch.float16)
    with pytest.raises(AttnkitError) as err:
        backend.forward(case.q, case.k, case.v, case.layer, other, step)
    assert err.value.code == "AK444"
