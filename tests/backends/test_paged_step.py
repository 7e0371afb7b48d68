"""The per-step state of the pure-torch backends (paged_torch.PagedStep / KVIndex, sdpa's
TokenGrid): built once per step and shared by layers, reading exactly what the per-layer
page reads read, rebuilt for a StepState that carries another step's plan; and the per-layer
input checks still catching a bad input on any layer of a prepared step.
"""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends import paged_torch
from attnkit.backends.base import StepState
from attnkit.backends.batch import Request, build_batch
from attnkit.backends.paged_torch import KVIndex, gather_kv, read_kv
from attnkit.backends.sdpa.backend import SdpaBackend, TokenGrid
from attnkit.backends.torch_native.backend import TorchNativeBackend
from attnkit.errors import AttnkitError
from attnkit.kvcache.paged import PagedKVCache

BACKENDS = [TorchNativeBackend, SdpaBackend]
RAGGED = dict(prefix_lens=[0, 21, 5], new_lens=[9, 1, 4])


@pytest.mark.parametrize("kind", ["mha", "mla"])
@pytest.mark.parametrize("page_size", [1, 4, 16])
@pytest.mark.parametrize("kv_dtype", [None, "fp8_e4m3"])
def test_gather_kv_reads_what_read_kv_reads(kind, page_size, kv_dtype):
    layer = make_layer(kind=kind, num_heads=4, num_kv_heads=2, head_dim=16)
    case = make_case(layer, page_size=page_size, kv_dtype=kv_dtype, **RAGGED)
    meta, f32 = case.meta, torch.float32
    index = KVIndex.build(meta.block_tables, meta.seq_lens_cpu, page_size)
    batched = [t[:, :index.kv_max] for t in gather_kv(case.cache, layer, index.slots, f32) if t is not None]
    want = [t for t in read_kv(case.cache, layer, meta.block_tables, index.kv_max, f32) if t is not None]
    assert all(torch.equal(a, b) for a, b in zip(batched, want, strict=True))
    for i, s in enumerate(meta.seq_lens_cpu):
        one = [t for t in gather_kv(case.cache, layer, index.request_slots(i), f32) if t is not None]
        want = [t[0] for t in read_kv(case.cache, layer, meta.block_tables[i:i + 1], s, f32) if t is not None]
        assert all(torch.equal(a, b) for a, b in zip(one, want, strict=True))


@pytest.mark.parametrize("backend_cls", BACKENDS)
@pytest.mark.parametrize("role", ["decoder", "cross"])
def test_kv_index_built_once_per_step(backend_cls, role, monkeypatch):
    calls = []
    build = KVIndex.build.__func__

    def spy(cls, *args, **kwargs):
        calls.append(1)
        return build(cls, *args, **kwargs)

    monkeypatch.setattr(paged_torch.KVIndex, "build", classmethod(spy))
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, role=role)
    extra = dict(encoder_lens=[11, 3]) if role == "cross" else {}
    case = make_case(layer, prefix_lens=[0, 5], new_lens=[6, 1], page_size=4, **extra)
    backend = backend_cls()
    step = backend.prepare(case.meta, case.cache)
    for _ in range(3):                    # three layers of one step (the same one, rewritten)
        out = backend.forward(*case.args(), step)
        assert_close(out, case.reference(), dtype="fp32")
    assert len(calls) == 1


@pytest.mark.parametrize("backend_cls", BACKENDS)
def test_plan_of_another_step_is_not_reused(backend_cls):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16)
    first = make_case(layer, prefix_lens=[9, 9], new_lens=[1, 1], page_size=4, seed=1)
    second = make_case(layer, **RAGGED, page_size=4, seed=2)
    backend = backend_cls()
    old = backend.prepare(first.meta, first.cache)
    backend.forward(*first.args(), old)
    step = StepState(second.meta, prepared=old.prepared)             # a stale plan, by hand
    assert_close(backend.forward(*second.args(), step), second.reference(), dtype="fp32")
    assert step.prepared is not old.prepared
    plan = step.prepared.paged if isinstance(step.prepared, TokenGrid) else step.prepared
    assert plan.meta is second.meta


def test_sdpa_grid_is_a_view_when_every_request_has_as_many_tokens():
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16)
    even = make_case(layer, prefix_lens=[9, 3, 30], new_lens=[1, 1, 1], page_size=4)
    ragged = make_case(layer, **RAGGED, page_size=4)
    assert TokenGrid.build(even.meta, "cpu").uniform
    assert TokenGrid.build(even.meta, "cpu").q_index is None
    assert not TokenGrid.build(ragged.meta, "cpu").uniform
    for case in (even, ragged):
        backend = SdpaBackend()
        out = backend.forward(*case.args(), backend.prepare(case.meta, case.cache))
        assert_close(out, case.reference(), dtype="fp32")


def two_layer_step(backend):
    """A prepared decode step over a cache of two MHA layers (ids 0 and 1)."""
    layers = [make_layer(num_heads=4, num_kv_heads=2, head_dim=16, layer_id=i) for i in (0, 1)]
    cache = PagedKVCache([l.spec for l in layers], num_pages=8, page_size=4, dtype=torch.float32)
    meta = build_batch([Request(5, 1, [3, 1]), Request(2, 1, [6])], page_size=4)
    return layers, cache, meta, backend.prepare(meta, cache)


@pytest.mark.parametrize("backend_cls", BACKENDS)
@pytest.mark.parametrize("bad,code", [("q_heads", "AK413"), ("k_dtype", "AK410"),
                                      ("v_shape", "AK411"), ("layer_id", "AK418")])
def test_bad_input_on_a_later_layer_of_a_prepared_step_is_caught(backend_cls, bad, code):
    """prepare checks the step once; every layer's own inputs are still checked."""
    backend = backend_cls()
    layers, cache, meta, step = two_layer_step(backend)
    q, k, v = torch.randn(2, 4, 16), torch.randn(2, 2, 16), torch.randn(2, 2, 16)
    backend.forward(q, k, v, layers[0], cache, step)                  # layer 0 is fine
    layer = layers[1]
    if bad == "q_heads":
        q = torch.randn(2, 2, 16)
    elif bad == "k_dtype":
        k = k.half()
    elif bad == "v_shape":
        v = torch.randn(1, 2, 16)
    else:
        layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, layer_id=7)
    with pytest.raises(AttnkitError) as err:
        backend.forward(q, k, v, layer, cache, step)
    assert err.value.code == code
