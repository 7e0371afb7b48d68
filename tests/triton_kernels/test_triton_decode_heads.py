"""Decode variant split_heads (decode_heads.py: one program reads every KV head of its keys)
against the float64 reference, on the interpreter; where it cannot run, the step falls back."""
import pytest
from factories import assert_close, make_case, make_layer

from attnkit.backends.triton.decode_heads import heads_ok, heads_splits

CASES = {   # (layer, case): GQA groups 4 / 1 / 8, pages of 16 / 1 / 5 tokens
    "gqa-page16": (dict(num_heads=8, num_kv_heads=2, head_dim=64), dict(prefix_lens=[40, 7, 63], page_size=16)),
    "mha-page1": (dict(num_heads=4, num_kv_heads=4, head_dim=64), dict(prefix_lens=[20, 9], page_size=1)),
    "group8-page5": (dict(num_heads=8, num_kv_heads=1, head_dim=64), dict(prefix_lens=[50, 1], page_size=5)),
}


def _run(case, **options):
    from attnkit.backends.triton.backend import TritonBackend
    backend = TritonBackend(decode_variant="split_heads", **options)
    step = backend.prepare(case.meta, case.cache)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    return out, step.prepared


@pytest.mark.parametrize("num_splits", [1, 3, 8])
@pytest.mark.parametrize("name", sorted(CASES))
def test_split_heads_matches_reference(name, num_splits):
    layer_kw, case_kw = CASES[name]
    case = make_case(make_layer(**layer_kw, dtype="fp16"), dtype="fp16", seed=len(name),
                     new_lens=[1] * len(case_kw["prefix_lens"]), **case_kw)
    assert heads_ok(case.q, case.k, case.v, case.layer, case.cache)
    out, plan = _run(case, num_splits=num_splits)
    assert_close(out, case.reference(), dtype="fp16", what=f"{name} splits={num_splits}")
    assert [key[0] for key in plan.splits] == ["heads"]            # split_heads itself ran
    k_cache = case.cache.k[case.layer.spec.layer_id].view(-1, *case.k.shape[1:])
    assert k_cache[case.meta.slot_mapping].equal(case.k.to(k_cache.dtype))   # new K written
    assert plan.counters.abs().sum().item() == 0                   # tickets left for the next step


def test_split_heads_second_step_reuses_its_tickets():
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=64, dtype="bf16")
    case = make_case(layer, prefix_lens=[33, 70], new_lens=[1, 1], page_size=16, dtype="bf16")
    first, plan = _run(case, num_splits=4)
    from attnkit.backends.triton.backend import TritonBackend
    backend = TritonBackend(decode_variant="split_heads", num_splits=4)
    step = backend.prepare(case.meta, case.cache)
    for _ in range(2):        # the same step twice: the counters the first left are reused
        again = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
        assert again.equal(first)


@pytest.mark.parametrize("what", ["window", "softcap", "sinks", "fp32", "fp8", "head-dim-80"])
def test_split_heads_refuses_what_it_does_not_serve_and_the_step_falls_back(run_triton, what):
    layer_kw = dict(num_heads=4, num_kv_heads=2, head_dim=80 if what == "head-dim-80" else 64,
                    sliding_window=13 if what == "window" else None,
                    logit_softcap=4.0 if what == "softcap" else None, sinks=what == "sinks")
    dtype = "fp32" if what == "fp32" else "fp16"
    case = make_case(make_layer(**layer_kw, dtype=dtype), prefix_lens=[30, 5], new_lens=[1, 1],
                     page_size=8, dtype=dtype, kv_dtype="fp8_e4m3" if what == "fp8" else None)
    assert not heads_ok(case.q, case.k, case.v, case.layer, case.cache)
    out, plan = _run(case, num_splits=2)
    assert "heads" not in [key[0] for key in plan.splits]
    assert_close(out, case.reference(), dtype=dtype, kv_dtype="fp8_e4m3" if what == "fp8" else None,
                 what=what)


def test_heads_split_rule_fills_the_sms_once_and_keeps_whole_tiles():
    assert heads_splits(1024, 16, num_sms=132, block_n=16) == (8, 128)        # 128 programs
    splits, chunk = heads_splits(32768, 1, num_sms=132, block_n=16)
    assert splits <= 132 and chunk % 16 == 0 and splits * chunk >= 32768
    assert heads_splits(4096, 256, num_sms=132, block_n=16) == (1, 4096)      # more requests than SMs
    assert heads_splits(100, 1, num_sms=132, block_n=16) == (2, 64)           # splits of >= 64 keys


def test_split_heads_reads_a_query_strided_in_the_head_dim_through_the_fallback():
    """q not dense in the head dim: split_heads does not take it (its loads assume unit
    stride), the split kernel does (it copies q)."""
    import torch
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[40, 9], new_lens=[1, 1], page_size=16, dtype="fp16")
    wide = torch.zeros(*case.q.shape[:2], 2 * case.q.shape[2], dtype=case.q.dtype)
    wide[..., ::2] = case.q
    q = wide[..., ::2]
    assert q.stride(-1) == 2 and not heads_ok(q, case.k, case.v, case.layer, case.cache)
    from attnkit.backends.triton.backend import TritonBackend
    backend = TritonBackend(decode_variant="split_heads", num_splits=2)
    step = backend.prepare(case.meta, case.cache)
    out = backend.forward(q, case.k, case.v, case.layer, case.cache, step)
    assert "heads" not in [key[0] for key in step.prepared.splits]
    assert_close(out, case.reference(), dtype="fp16", what="strided q")
