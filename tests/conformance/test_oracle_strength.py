"""The conformance checks can fail: deliberately wrong implementations, 1 % off, are caught.

- A backend run with its logit scale 1 % too large fails most of its CPU / interpreter cases
  (the norm-relative bound of factories.assert_close; the elementwise 1e-2 alone let most pass).
- A cache whose fp8 scale convention is broken consistently (store value * scale, read back
  stored / scale: it round-trips, so a reference that wrote through the cache would agree
  with it) fails every fp8 case: the reference holds its own copy of the convention.
Cases that cannot tell (no output, one key per query) are counted but do not need to fail.
Chunked-local cases are left out of the logit-scale count: their chunks (3, 8, 16 keys) keep
the softmax over a handful of keys, where a 1 % scale moves bf16 outputs less than rounding;
a wrong chunk mask is what those cases must catch (test_conformance's wrong-mask test).
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest
import torch

from attnkit import reference
from attnkit.backends.base import RuntimeLayer
from attnkit.kvcache.paged import PagedKVCache
from test_conformance import ACCURACY, _check_cache_written, build, check, run

CPU_CASES = [c for c in ACCURACY if not c.skip and c.device != "cuda" and c.mode != "idle"]
BACKENDS = sorted({c.backend for c in CPU_CASES})


def _fails(fn) -> bool:
    try:
        fn()
    except AssertionError:
        return True
    return False


def _scaled(layer: RuntimeLayer, factor: float) -> RuntimeLayer:
    spec = layer.spec
    return dataclasses.replace(layer, spec=dataclasses.replace(spec, scale=spec.softmax_scale * factor))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_percent_logit_scale_fails_most_cases(backend):
    confs = [c for c in CPU_CASES if c.backend == backend and c.edge != "one_token_prompts"
             and c.attn_chunk is None]
    failed = []
    for conf in confs:
        case = build(conf)
        case.layer = _scaled(case.layer, 1.01)          # the backend's layer; the reference keeps its own
        if _fails(lambda: check(conf, case, run(conf, case))):
            failed.append(conf.id)
    assert len(failed) >= 0.85 * len(confs), (
        f"{backend}: only {len(failed)} of {len(confs)} cases caught a 1 % logit-scale error")


def _broken_store(self, buf, slots, x, scale):
    flat = buf.view(-1, *buf.shape[2:])
    if self.is_fp8:           # value * scale instead of value / scale
        x = (x.float() * scale).clamp(-torch.finfo(self.dtype).max, torch.finfo(self.dtype).max)
    flat[slots.long()] = x.to(self.dtype)


def _broken_dequant(self, buf, scale, dtype):
    return buf.to(torch.float32).div(scale).to(dtype) if self.is_fp8 else buf.to(dtype)


@pytest.fixture
def broken_fp8_convention(monkeypatch):
    monkeypatch.setattr(PagedKVCache, "_store", _broken_store)
    monkeypatch.setattr(PagedKVCache, "dequant", _broken_dequant)


def test_a_consistently_broken_fp8_convention_fails_every_fp8_case(broken_fp8_convention):
    fp8 = [c for c in CPU_CASES if c.kv_dtype.startswith("fp8")]
    assert {c.backend for c in fp8} == set(BACKENDS)
    missed = defaultdict(list)
    for conf in fp8:
        case = build(conf)                              # prefix written the broken way
        expected = reference.stored_kv(case.k, case.v, case.layer, case.cache, case.meta)
        out = run(conf, case)
        if not (_fails(lambda: check(conf, case, out)) or
                _fails(lambda: _check_cache_written(case, expected))):
            missed[conf.backend].append(conf.id)
    assert not missed, f"a broken fp8 scale convention passed: {dict(missed)}"


def test_the_broken_convention_round_trips(broken_fp8_convention):
    """What makes it a fair trap: through the cache's own write and read it looks right."""
    from attnkit.model.spec import LayerAttention

    spec = LayerAttention(layer_id=0, num_heads=1, num_kv_heads=1, head_dim=4)
    cache = PagedKVCache([spec], num_pages=1, page_size=2, dtype="fp8_e4m3", k_scales={0: 0.5})
    x = torch.tensor([[[0.5, -1.0, 2.0, 0.25]], [[1.5, 3.0, -0.5, 1.0]]])
    cache.write(0, torch.tensor([0, 1]), x, x)
    assert torch.equal(cache.dequant(cache.k[0], 0.5, torch.float32).view_as(x), x)
    assert not torch.equal(reference.read_back(cache.k[0], 0.5).float().view_as(x), x)
