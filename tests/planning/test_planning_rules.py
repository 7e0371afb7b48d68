"""Solver and rules against fake declarations (the registry is a parameter)."""
from plan_fakes import BARE_CPU, CPU, FAKE, GPU, OLD_GPU, decl, dca, mha, mla, registry

from attnkit.registry.capabilities import MultipleOf
from attnkit.planning.solver import plan


def run(model, platform=GPU, request=None, reg=FAKE, env=None, **kw):
    return plan(model, platform, request, registry=reg, env=env or {}, **kw)


def test_every_reason_of_a_backend_is_listed_with_layers():
    model = mha(layers=6, dim=96, logit_softcap=30.0)
    p = run(model, CPU, {"attention_backend": "triton", "kv_cache_dtype": "fp16"})
    fields = [r.field for r in p.rejected["triton"]]
    assert fields.count("platform") == 1 and "requires" in fields and "head_dim" in fields and "features" in fields
    head = next(r for r in p.rejected["triton"] if r.field == "head_dim")
    assert head.layers == tuple(range(6)) and "layers 0-5" in head.message


def test_shared_causes_are_collapsed():
    p = run(mha(), BARE_CPU)
    assert p.error["code"] == "AK120"
    assert any(r.code == "AK212" and r.actual == "torch" for r in p.shared)
    assert all(r["shared"] for r in p.to_dict()["rejected"]["sdpa"] if r["code"] == "AK212")
    assert any("install torch" in s for s in p.error["solutions"])


def test_automatic_skips_candidates_that_miss_a_layer():
    p = run(mha(dim=80))                              # triton lacks head dim 80
    assert p.ok and p.prefill_backend == "sdpa"
    assert "triton" in p.why["prefill"]
    assert run(mha(sliding_window=128, logit_softcap=50.0)).prefill_backend == "torch_native"


def test_compute_capability_range():
    p = run(mha(), OLD_GPU, {"attention_backend": "triton"})
    assert p.error["code"] == "AK121" and any(r.code == "AK211" for r in p.rejected["triton"])


def test_hybrid_one_explicit_one_automatic():
    p = run(mha(), GPU, {"decode_attention_backend": "torch_native"})
    assert p.ok and p.prefill_backend == "triton" and p.decode_backend == "torch_native"
    assert p.settings["page_size"] == 16


def test_page_size_default_smallest_and_common():
    reg = registry(decl("a", page_sizes=MultipleOf(64)), decl("b", page_sizes=(32, 128)))
    table = (_prio(("a", "b")),)
    p = run(mha(), CPU, {"prefill_attention_backend": "a", "decode_attention_backend": "b"}, reg=reg, table=table)
    assert p.ok and p.settings["page_size"] == 128
    adj = next(a for a in p.adjustments if a["field"] == "page_size")
    assert adj["rule"] == "page-size" and "16 is not" in adj["reason"]
    reg2 = registry(decl("a", page_sizes=(64,)), decl("b", page_sizes=(32,)))
    p2 = run(mha(), CPU, {"prefill_attention_backend": "a", "decode_attention_backend": "b"}, reg=reg2, table=table)
    assert p2.error["code"] == "AK308"


def _prio(names):
    from attnkit.planning.priorities import Priority
    return Priority("cpu", ("mha", "mla"), ("prefill", "decode"), names, why="test")


def test_kv_cache_dtype_default_and_fp8_conflict():
    p = run(mha())
    assert p.settings["kv_cache_dtype"] == "bf16"
    bad = run(mha(), GPU, {"attention_backend": "triton", "kv_cache_dtype": "fp8"})
    assert bad.error["code"] == "AK304" and "torch_native" in bad.error["message"]
    auto = run(mha(), GPU, {"kv_cache_dtype": "fp8_e4m3"})
    assert auto.ok and auto.prefill_backend == "torch_native"


def test_speculative_needs_verify_on_both_phases():
    """VERIFY steps run on the prefill-like steps' backend (HybridBackend routes them there),
    so a backend without 'verify' serves neither phase when drafts are verified."""
    reg = {**FAKE, "sdpa": decl("sdpa")}
    p = run(mha(), CPU, {"attention_backend": "sdpa", "speculative_tokens": 3}, reg=reg)
    assert p.error["code"] == "AK121"
    assert [r.code for r in p.rejected["sdpa"]] == ["AK108"]
    assert set(p.rejected["sdpa"][0].phases) == {"prefill", "decode"}
    p = run(mha(), CPU, {"prefill_attention_backend": "sdpa", "speculative_tokens": 3}, reg=reg)
    assert not p.ok and any(r.code == "AK108" for r in p.rejected["sdpa"])


def test_cuda_graph_nobody_declares_it():
    p = run(mha(), GPU, {"cuda_graph": True})
    assert p.error["code"] == "AK120" and any(r.code == "AK109" for r in p.shared)


def test_mla_kind_and_latent_dims():
    assert run(mla()).prefill_backend == "triton_mla"
    p = run(mla(rank=256), GPU, {"attention_backend": "triton_mla"})
    assert p.error["code"] == "AK121" and p.rejected["triton_mla"][0].field == "mla_dims"
    p = run(mla(), GPU, {"attention_backend": "sdpa"})         # MHA-only sdpa (fake world)
    assert p.error["code"] == "AK121" and "triton_mla" in p.error["expected"]


def test_dual_chunk_rules():
    assert run(dca()).prefill_backend == "dual_chunk"
    p = run(dca(), GPU, {"prefill_attention_backend": "triton"})
    assert p.error["code"] == "AK302" and len(p.error["solutions"]) == 2
    assert "--prefill-attention-backend dual_chunk" in p.error["solutions"][0]
    without = {k: v for k, v in FAKE.items() if k != "dual_chunk"}
    p = run(dca(), GPU, reg=without)
    assert p.error["code"] == "AK302" and p.error["solutions"] == [s for s in p.error["solutions"] if "off" in s]
    assert run(dca(), GPU, {"dual_chunk": "off"}, reg=without).ok


def test_env_overrides_and_deny_with_provenance():
    p = run(mha(), GPU, env={"ATTNKIT_ATTENTION_BACKEND": "sdpa", "ATTNKIT_DENY_BACKENDS": "torch_native"})
    assert p.prefill_backend == "sdpa"
    rules = {(a["field"], a["rule"]) for a in p.adjustments}
    assert ("attention_backend", "env") in rules and ("deny", "env") in rules
    cli_wins = run(mha(), GPU, {"attention_backend": "torch_native"}, env={"ATTNKIT_ATTENTION_BACKEND": "sdpa"})
    assert cli_wins.prefill_backend == "torch_native" and cli_wins.warnings
    denied = run(mha(), GPU, {"deny": ["triton"]})
    assert denied.prefill_backend == "sdpa" and denied.rejected["triton"][-1].code == "AK307"
    both = run(mha(), GPU, {"attention_backend": "triton"}, env={"ATTNKIT_DENY_BACKENDS": "triton"})
    assert both.error["code"] == "AK307"


def test_explicit_user_values_are_never_adjusted():
    p = run(mha(), GPU, {"page_size": 32, "dtype": "fp16", "kv_cache_dtype": "fp16", "tp_size": 2})
    assert p.ok
    assert not {a["field"] for a in p.adjustments} & {"page_size", "dtype", "kv_cache_dtype", "tp_size"}
    assert (p.settings["page_size"], p.settings["dtype"], p.settings["heads_per_rank"]) == (32, "fp16", 4)


def test_check_function_reasons(monkeypatch):
    import sys
    import types
    mod = types.ModuleType("fake_check_mod")
    mod.check = lambda **kw: ["needs something data cannot say", ("page_size", 8, kw["settings"]["page_size"], "x")]
    monkeypatch.setitem(sys.modules, "fake_check_mod", mod)
    reg = {**FAKE, "sdpa": decl("sdpa", check="fake_check_mod:check")}
    p = run(mha(), CPU, {"attention_backend": "sdpa"}, reg=reg)
    assert [r.code for r in p.rejected["sdpa"]] == ["AK110", "AK110"]


def test_unknown_platform_kind_table():
    from attnkit.hardware import Platform
    xpu = Platform(kind="xpu", name="Fake XPU", packages={"torch": "2"})
    p = run(mha(), xpu)
    assert p.error["code"] == "AK120" and any(r.code == "AK210" for r in p.shared)
