"""TritonBackend: modes, refusals (the shared codes AK440, AK444, AK445, AK447 that replaced
its own AK450-AK453) and the declaration."""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.backends.triton.backend import TritonBackend
from attnkit.errors import CATALOG, AttnkitError
from attnkit.kvcache.paged import PagedKVCache


def _fp16_case(**layer_kw):
    layer = make_layer(num_heads=2, num_kv_heads=1, head_dim=64, dtype="fp16", **layer_kw)
    return make_case(layer, prefix_lens=[3], new_lens=[2], page_size=4, dtype="fp16")


def test_idle_step_returns_an_empty_output():
    case = _fp16_case()
    backend = TritonBackend()
    empty = make_case(case.layer, prefix_lens=[], new_lens=[], page_size=4, dtype="fp16")
    assert empty.meta.mode is ForwardMode.IDLE
    out = backend.forward(empty.q, empty.k, empty.v, empty.layer, empty.cache,
                          backend.prepare(empty.meta, empty.cache))
    assert out.shape == (0, 2 * 64)


@pytest.mark.parametrize("kind", ["mla", "cross"])
def test_mla_and_cross_layers_are_refused_with_ak440(kind):
    layer = (make_layer(kind="mla", num_heads=2, dtype="fp16") if kind == "mla" else
             make_layer(num_heads=2, num_kv_heads=1, head_dim=64, role="cross", dtype="fp16"))
    case = make_case(layer, prefix_lens=[3], new_lens=[2], page_size=4, dtype="fp16",
                     encoder_lens=[4] if kind == "cross" else None)
    backend = TritonBackend()
    before = [b.clone() for b in (*case.cache.k.values(), *case.cache.v.values(), *case.cache.latent.values())]
    with pytest.raises(AttnkitError) as err:
        backend.forward(*case.args(), backend.prepare(case.meta, case.cache))
    assert err.value.code == "AK440"
    assert err.value.field == ("layer.kind" if kind == "mla" else "layer.features")
    after = (*case.cache.k.values(), *case.cache.v.values(), *case.cache.latent.values())
    assert all(torch.equal(a, b) for a, b in zip(after, before))      # refused before any write


def test_a_feature_outside_the_declaration_is_refused_with_ak440(monkeypatch):
    """The kernels serve exactly the declared features: one the declaration lacks (here
    chunked_local, taken out of it) is refused, never computed as plain attention."""
    from dataclasses import replace

    from attnkit.backends.triton.declaration import DECLARATION

    caps = DECLARATION.capabilities
    monkeypatch.setattr(TritonBackend, "declaration", replace(
        DECLARATION, capabilities=replace(caps, features=caps.features - {"chunked_local"})))
    case = _fp16_case(attention_chunk=2)
    backend = TritonBackend()
    with pytest.raises(AttnkitError) as err:
        backend.forward(*case.args(), backend.prepare(case.meta, case.cache))
    assert err.value.code == "AK440" and err.value.actual == ["chunked_local"]


def test_cpu_without_the_interpreter_is_refused_with_ak447(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("CPU-only behaviour")
    case = _fp16_case()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    backend = TritonBackend()
    with pytest.raises(AttnkitError) as err:
        backend.forward(*case.args(), backend.prepare(case.meta, case.cache))
    assert err.value.code == "AK447"


@pytest.mark.parametrize("head_dim", [48, 512])
def test_undeclared_head_dims_are_refused_with_ak445(head_dim):
    layer = make_layer(num_heads=1, num_kv_heads=1, head_dim=head_dim, dtype="fp16")
    case = make_case(layer, prefix_lens=[0], new_lens=[1], page_size=4, dtype="fp16")
    backend = TritonBackend()
    with pytest.raises(AttnkitError) as err:
        backend.forward(*case.args(), backend.prepare(case.meta, case.cache))
    assert err.value.code == "AK445"


def test_unserved_cache_dtype_is_refused_with_ak444():
    case = _fp16_case()
    spec = case.layer.spec
    cache = PagedKVCache([spec], num_pages=case.cache.num_pages, page_size=4, dtype=torch.int8)
    backend = TritonBackend()
    with pytest.raises(AttnkitError) as err:
        backend.forward(case.q, case.k, case.v, case.layer, cache, backend.prepare(case.meta, cache))
    assert err.value.code == "AK444"


def test_codes_are_catalogued_and_the_declaration_names_this_backend():
    from attnkit.backends.triton.declaration import DECLARATION
    from attnkit.registry import declarations

    assert all(CATALOG[f"AK45{i}"].merged_into for i in range(4))      # pages kept, merged
    assert declarations()["triton"] is DECLARATION
    assert DECLARATION.impl == f"{TritonBackend.__module__}:{TritonBackend.__name__}"
    assert DECLARATION.capabilities.platforms == ("cuda",)


def test_views_of_a_fused_qkv_projection_and_a_strided_q(run_triton):
    """q/k/v sliced out of one [T, (H_q + 2 H_kv) * D] tensor (the usual fused projection),
    and a q whose head dim is not the innermost stride, give the same result."""
    case = make_case(make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16"),
                     prefix_lens=[5, 0], new_lens=[3, 6], page_size=4, dtype="fp16")
    t, d = case.q.shape[0], 64
    fused = torch.cat([case.q.reshape(t, -1), case.k.reshape(t, -1), case.v.reshape(t, -1)], dim=1)
    case.q = fused[:, :4 * d].view(t, 4, d)
    case.k = fused[:, 4 * d:6 * d].view(t, 2, d)
    case.v = fused[:, 6 * d:].view(t, 2, d)
    assert not case.q.is_contiguous() and case.k.stride(0) == 8 * d
    assert_close(run_triton(case), case.reference(), dtype="fp16", what="fused qkv views")
    case.q = case.q.transpose(1, 2).contiguous().transpose(1, 2)      # stride(-1) == 4
    assert case.q.stride(-1) != 1
    assert_close(run_triton(case), case.reference(), dtype="fp16", what="strided q")
