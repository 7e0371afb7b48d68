"""Bad runtime inputs fail with a coded AttnkitError before any backend code runs."""
import dataclasses

import pytest
import torch

from attnkit.backends.base import AttentionBackend, RuntimeLayer
from attnkit.backends.metadata import ForwardMode
from attnkit.errors import CATALOG, AttnkitError
from factories import make_case, make_layer


class Recorder(AttentionBackend):
    """Counts the calls that got past validation."""
    name = "recorder"

    def __init__(self):
        self.calls = 0

    def _prepare(self, meta, cache):
        self.calls += 1
        return super()._prepare(meta, cache)

    def _forward(self, q, k, v, layer, cache, step):
        self.calls += 1
        return q.new_zeros(q.shape[0], q.shape[1] * layer.spec.value_dim)


@pytest.fixture(scope="module")
def case():
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=8)
    return make_case(layer, prefix_lens=[5, 0], new_lens=[1, 6], page_size=4, seed=1)


def _expect(code, fn, field=None):
    with pytest.raises(AttnkitError) as err:
        fn()
    assert err.value.code == code and code in CATALOG, err.value
    if field is not None:
        assert err.value.field == field
    return err.value


def _forward(case, **over):
    args = dict(q=case.q, k=case.k, v=case.v, layer=case.layer, cache=case.cache, meta=case.meta) | over
    backend = Recorder()
    step = backend.prepare(args["meta"], args["cache"])
    out = backend.forward(args["q"], args["k"], args["v"], args["layer"], args["cache"], step)
    return backend, out


def test_good_inputs_pass(case):
    backend, out = _forward(case)
    assert backend.calls == 2 and out.shape == (7, 32)


@pytest.mark.parametrize("over, code, field", [
    (lambda c: dict(k=c.k.half()), "AK410", "k"),
    (lambda c: dict(q=c.q.to(torch.int32)), "AK410", "q"),
    (lambda c: dict(q=c.q.reshape(7, -1)), "AK411", "q"),
    (lambda c: dict(q=c.q[:6]), "AK411", "q"),
    (lambda c: dict(v=c.v[..., :4]), "AK411", "v"),
    (lambda c: dict(q=c.q.to("meta")), "AK412", "q"),
    (lambda c: dict(k=c.k.repeat_interleave(2, 1), v=c.v.repeat_interleave(2, 1)), "AK413", "k.shape[1]"),
    (lambda c: dict(q=c.q[:, :3]), "AK413", "q.shape[1]"),
    (lambda c: dict(layer=make_layer(num_heads=4, num_kv_heads=2, head_dim=8, layer_id=5)), "AK418", "layer.layer_id"),
    (lambda c: dict(layer=make_layer(num_heads=4, num_kv_heads=4, head_dim=8)), "AK418", "cache[0]"),
    (lambda c: dict(k=None, v=None), "AK411", "k"),
    (lambda c: dict(layer=make_layer(num_heads=4, num_kv_heads=2, head_dim=8, v_head_dim=4)),
     "AK418", "cache[0]"),
])
def test_forward_inputs(case, over, code, field):
    _expect(code, lambda: _forward(case, **over(case)), field)


def test_sinks_shape(case):
    layer = RuntimeLayer(spec=dataclasses.replace(case.layer.spec, sinks=True), sinks=torch.zeros(3))
    _expect("AK411", lambda: _forward(case, layer=layer), "layer.sinks")


def test_gqa_ratio_must_divide():
    layer = make_layer(num_heads=4, num_kv_heads=3, head_dim=8)
    c = make_case(layer, prefix_lens=[0], new_lens=[2], page_size=4)
    _expect("AK413", lambda: _forward(c), "layer.spec.num_kv_heads")


def _meta(case, **fields):
    return dataclasses.replace(case.meta, **fields)


@pytest.mark.parametrize("fields, code, field", [
    (lambda m: dict(block_tables_cpu=[[99, -1], [3, 1]]), "AK414", "meta.block_tables[0]"),
    (lambda m: dict(block_tables_cpu=[m.block_tables_cpu[0], [m.block_tables_cpu[1][0], -1]]),
     "AK414", "meta.block_tables[1]"),
    (lambda m: dict(slot_mapping_cpu=(10_000,) + m.slot_mapping_cpu[1:]), "AK415", "meta.slot_mapping[0]"),
    (lambda m: dict(slot_mapping_cpu=m.slot_mapping_cpu[:1] * 7), "AK415", None),
    (lambda m: dict(device="meta"), "AK412", "meta.device"),
    (lambda m: dict(page_size=8), "AK418", "meta.page_size"),
    (lambda m: dict(mode=ForwardMode.DECODE), "AK406", "meta.mode"),
    (lambda m: dict(mode=ForwardMode.IDLE), "AK406", "meta.mode"),
])
def test_batch_metadata(case, fields, code, field):
    meta = _meta(case, **fields(case.meta))
    backend = Recorder()
    _expect(code, lambda: backend.prepare(meta, case.cache), field)
    assert backend.calls == 0                      # refused before the backend's own code


@pytest.mark.parametrize("fields, field", [
    (lambda m: dict(seq_lens_cpu=(5, 6)), "meta.seq_lens_cpu"),           # request 0: 0 new tokens
    (lambda m: dict(prefix_lens_cpu=(5,)), "meta.prefix_lens_cpu"),         # a count short
    (lambda m: dict(block_tables_cpu=m.block_tables_cpu[:1]), "meta.block_tables_cpu"),
    (lambda m: dict(slot_mapping_cpu=m.slot_mapping_cpu[:-1]), "meta.slot_mapping_cpu"),
    (lambda m: dict(seq_lens_cpu=(6, 6.5)), "meta.seq_lens_cpu"),
    (lambda m: dict(block_tables_cpu=[["a"], [1]]), "meta.block_tables_cpu[0]"),
    (lambda m: dict(slot_mapping_cpu=(2**63,) + m.slot_mapping_cpu[1:]), "meta.slot_mapping"),
    (lambda m: dict(block_tables_cpu=[[2**31, -1], [3, 1]]), "meta.block_tables"),
    (lambda m: dict(page_size=0), "meta.page_size"),
    (lambda m: dict(mode="prefill"), "meta.mode"),
])
def test_malformed_host_values_are_refused_when_the_metadata_is_made(case, fields, field):
    _expect("AK406" if field == "meta.mode" else "AK405", lambda: _meta(case, **fields(case.meta)), field)


def test_device_tensors_are_built_from_the_host_values_and_cannot_be_set_apart(case):
    """Issue 13: validation read the host lists while the kernels indexed with the tensors, so
    a slot_mapping tensor pointed at another request's page passed and the write landed there.
    Now the tensors are made from the host values, with fixed dtypes, and cannot be replaced."""
    meta = case.meta
    host = {"seq_lens": meta.seq_lens_cpu, "prefix_lens": meta.prefix_lens_cpu,
            "block_tables": [list(r) for r in meta.block_tables_cpu],
            "slot_mapping": meta.slot_mapping_cpu,
            "positions": [p for a, b in zip(meta.prefix_lens_cpu, meta.seq_lens_cpu) for p in range(a, b)],
            "query_start_loc": [0, 1, 7]}
    for name, values in host.items():
        t = getattr(meta, name)
        assert t.tolist() == list(values), name
        assert t.dtype == (torch.int64 if name in ("slot_mapping", "positions") else torch.int32), name
    other_page = meta.block_tables_cpu[1][0] * 4            # request 1's first slot
    redirected = meta.slot_mapping.clone()
    redirected[0] = other_page
    for name, value in (("slot_mapping", redirected), ("slot_mapping_cpu", (other_page,) * 7),
                        ("block_tables", meta.block_tables.flip(0))):
        _expect("AK405", lambda: setattr(meta, name, value), f"meta.{name}")
    with pytest.raises(TypeError):                           # not a field: nothing to replace
        dataclasses.replace(meta, slot_mapping=redirected)
    assert meta.slot_mapping.tolist() == list(meta.slot_mapping_cpu)


def test_a_redirected_slot_is_refused_before_any_write(case):
    """A slot of another request's page (or out of range) fails validation, and the cache is
    byte-identical after the refusal: nothing was written."""
    from attnkit.registry import load_backend

    meta = case.meta
    theirs = meta.block_tables_cpu[1][0] * 4
    for bad in (theirs, 10_000, -1):
        wrong = _meta(case, slot_mapping_cpu=(bad,) + meta.slot_mapping_cpu[1:])
        before = [t.clone() for t in (case.cache.k[0], case.cache.v[0])]
        for name in ("torch_native", "sdpa"):
            be = load_backend(name)
            _expect("AK415", lambda: be.forward(case.q, case.k, case.v, case.layer, case.cache,
                                                be.prepare(wrong, case.cache)))
        assert all(torch.equal(a, b) for a, b in zip((case.cache.k[0], case.cache.v[0]), before))


def test_overlapping_requests_are_caught():
    layer = make_layer(num_heads=2, head_dim=8)
    c = make_case(layer, prefix_lens=[0, 0], new_lens=[3, 3], page_size=4)
    row = c.meta.block_tables_cpu[0]
    meta = _meta(c, block_tables_cpu=[row, row], slot_mapping_cpu=c.meta.slot_mapping_cpu[:3] * 2)
    err = _expect("AK416", lambda: Recorder().prepare(meta, c.cache), "meta.slot_mapping")
    assert err.actual == c.meta.slot_mapping_cpu[0]


def test_cross_and_mla_inputs():
    cross = make_layer(num_heads=2, head_dim=8, role="cross")
    c = make_case(cross, prefix_lens=[0], new_lens=[2], page_size=4, encoder_lens=[5], encoder="write")
    _forward(c)
    _expect("AK411", lambda: _forward(c, k=c.k[:4], v=c.v[:4]), "k")
    cached = make_case(cross, prefix_lens=[0], new_lens=[2], page_size=4, encoder_lens=[5])
    _forward(cached)                                # k = v = None: encoder already cached
    mla = make_layer(kind="mla", num_heads=2)
    m = make_case(mla, prefix_lens=[3], new_lens=[1], page_size=4)
    _forward(m)
    _expect("AK411", lambda: _forward(m, v=m.k), "v")
    _expect("AK411", lambda: _forward(m, k=m.k[:, :-1]), "k (MLA latent)")
    bad_w = RuntimeLayer(spec=mla.spec, w_kc=mla.w_kc.transpose(1, 2), w_vc=mla.w_vc)
    _expect("AK411", lambda: _forward(m, layer=bad_w), "layer.w_kc")
