"""Issue 30's runtime findings: batch metadata written in place, layer specs the planner refuses,
a hybrid without backends. Each was served (wrong numbers, another request's page, a raw
IndexError / RuntimeError / AttributeError) before it got a code."""
import dataclasses

import pytest
import torch
from factories import make_case, make_layer

from attnkit.backends import validation
from attnkit.backends.batch import Request, build_batch
from attnkit.backends.metadata import BatchMetadata
from attnkit.errors import AttnkitError
from attnkit.kvcache.paged import PagedKVCache
from attnkit.registry import load_backend

BACKENDS = ["torch_native", "sdpa"]


def _case():
    return make_case(make_layer(num_heads=2, head_dim=8), prefix_lens=[5, 0], new_lens=[1, 3],
                     page_size=4)


def _snapshot(cache):
    return [b.clone() for b in (*cache.k.values(), *cache.v.values())]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("when", ["before prepare", "after prepare"])
@pytest.mark.parametrize("write", ["slot to another page", "slot out of range", "block table"])
def test_a_tensor_written_in_place_is_ak405_and_nothing_is_written(backend, when, write):
    case = _case()
    be = load_backend(backend)
    other = case.requests[1].block_table[0] * 4              # a slot of request 1's page
    edit = {"slot to another page": lambda m: m.slot_mapping.__setitem__(0, other),
            "slot out of range": lambda m: m.slot_mapping.__setitem__(0, 10**6),
            "block table": lambda m: m.block_tables.__setitem__((0, 0), 0)}[write]
    before = _snapshot(case.cache)
    step = None
    if when == "after prepare":
        step = be.prepare(case.meta, case.cache)
    edit(case.meta)
    with pytest.raises(AttnkitError) as err:
        be.forward(*case.args(), step or be.prepare(case.meta, case.cache))
    assert err.value.code == "AK405" and err.value.field.startswith("meta.")
    assert all(torch.equal(a, b) for a, b in zip(_snapshot(case.cache), before))


def test_in_place_writes_are_caught_inside_inference_mode():
    """Tensors made in inference mode keep no version counter: the batch's are made outside it."""
    case = _case()
    with torch.inference_mode():
        meta = build_batch(case.requests, page_size=4)
        meta.slot_mapping[0] = 0
        with pytest.raises(AttnkitError) as err:
            load_backend("torch_native").prepare(meta, case.cache)
    assert err.value.code == "AK405"


def test_a_fresh_batch_after_a_refusal_runs():
    case = _case()
    be = load_backend("torch_native")
    case.meta.slot_mapping[0] = 0
    with pytest.raises(AttnkitError):
        be.prepare(case.meta, case.cache)
    fresh = dataclasses.replace(case.meta)                    # tensors rebuilt from host values
    out = be.forward(*case.args(), be.prepare(fresh, case.cache))
    torch.testing.assert_close(out.double(), case.reference(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("field,value", [("scale", float("nan")), ("scale", float("inf")),
                                         ("scale", -1.0), ("head_dim", 0), ("num_heads", 0),
                                         ("v_head_dim", 0)])
def test_specs_the_planner_refuses_are_refused_at_run_time(backend, field, value):
    """NaN scale gave an all-NaN output, head_dim 0 a raw RuntimeError: AK419 now, like the
    planner's AK130 for the same spec (model/checks.py is both's rule)."""
    case = _case()
    case.layer.spec = dataclasses.replace(case.layer.spec, **{field: value})
    be = load_backend(backend)
    with pytest.raises(AttnkitError) as err:
        be.forward(*case.args(), be.prepare(case.meta, case.cache))
    assert (err.value.code, err.value.field) == ("AK419", f"layer.spec.{field}")


@pytest.mark.parametrize("roles", [dict(prefill=None, decode=None), dict(prefill="sdpa", decode=None),
                                   dict(prefill="sdpa", decode="sdpa", extend="sdpa")])
def test_a_hybrid_of_non_backends_is_ak407(roles):
    """HybridBackend(prefill=None, decode=None).prepare(...) was a raw AttributeError."""
    from attnkit.backends.hybrid import HybridBackend

    with pytest.raises(AttnkitError) as err:
        HybridBackend(**roles)
    assert err.value.code == "AK407"


def test_validate_batch_reads_the_tables_facts_not_the_slots(monkeypatch):
    """A slot mapping derived from the tables is not recomputed per step; one handed in is
    compared with the tables, and still refused when it differs (AK415)."""
    case = _case()
    monkeypatch.setattr(validation, "slots_of", lambda *a: pytest.fail("slots recomputed"))
    validation.validate_batch(case.meta, case.cache)
    monkeypatch.undo()
    meta = case.meta
    wrong = list(meta.slot_mapping_cpu)
    wrong[0] += 1
    hand = BatchMetadata(meta.mode, 4, meta.seq_lens_cpu, meta.prefix_lens_cpu,
                         meta.block_tables_cpu, wrong)
    with pytest.raises(AttnkitError) as err:
        validation.validate_batch(hand, case.cache)
    assert err.value.code == "AK415"


def test_derived_slots_written_twice_and_pages_past_the_cache_are_refused():
    cache = PagedKVCache([make_layer(num_heads=2, head_dim=8).spec], num_pages=4, page_size=4)
    shared = build_batch([Request(0, 2, [1]), Request(1, 2, [1])], page_size=4)   # slot 5 twice
    with pytest.raises(AttnkitError) as err:
        validation.validate_batch(shared, cache)
    assert (err.value.code, err.value.actual) == ("AK416", 5)
    apart = build_batch([Request(0, 2, [1]), Request(2, 2, [1])], page_size=4)    # 4, 5 | 6, 7
    validation.validate_batch(apart, cache)
    far = build_batch([Request(0, 5, [2, 9])], page_size=4)
    with pytest.raises(AttnkitError) as err:
        validation.validate_batch(far, cache)
    assert err.value.code == "AK414"
