"""The real-world failures, with attnkit's own presets and registered backends."""
import pytest

from attnkit import plan
from attnkit.errors import AttnkitError


def test_deepseek_v3_on_h100_plans_mla_backend():
    """The priority table (no profile) picks triton_mla for both phases; with the shipped H200
    profile (same sm90 class) each phase takes an MLA-serving backend the profile ranks first."""
    p = plan("deepseek-v3", "h100", env={}, profile=False)
    assert p.ok and p.prefill_backend == p.decode_backend == "triton_mla"
    measured = plan("deepseek-v3", "h100", env={})
    assert measured.ok and measured.decode_backend == "triton_mla"
    assert measured.prefill_backend in ("triton_mla", "sdpa", "torch_native")
    assert p.settings["page_size"] == 16 and p.settings["kv_layout"] == "latent"
    assert {r.code for r in p.rejected["triton"]} >= {"AK101"}


def test_mha_only_backend_forced_on_mla_model_lists_alternatives():
    p = plan("deepseek-v3", "h100", {"attention_backend": "triton"}, env={})
    assert not p.ok and p.error["code"] == "AK121"
    assert "AK101" in {r.code for r in p.rejected["triton"]}
    assert len(p.error["details"]["reasons"]) == len(p.rejected["triton"])   # the error lists them all
    assert "triton_mla" in p.error["expected"]              # the alternatives that serve here
    assert "use --attention-backend triton_mla" in p.error["solutions"]
    assert p.error["example_fix"]["after"].endswith("--attention-backend triton_mla")


def test_gpu_backend_on_cpu_names_platform_and_package():
    p = plan("llama-3.1-8b", "cpu", {"attention_backend": "triton"}, env={})
    assert p.error["code"] == "AK121"
    assert {r.code for r in p.rejected["triton"]} == {"AK210", "AK212"}
    assert p.error["expected"][:2] == ["sdpa", "torch_native"]


def test_typo_gets_did_you_mean():
    p = plan("llama-3.1-8b", "h100", {"attention_backend": "tritn"}, env={})
    assert p.error["code"] == "AK300"
    assert "did you mean 'triton'" in p.error["message"]
    assert p.error["example_fix"]["after"].endswith("--attention-backend triton")


def test_renamed_backend_works_with_deprecation_warning():
    p = plan("llama-3.1-8b", "cpu", {"attention_backend": "torch"}, env={})
    assert p.ok and p.prefill_backend == "torch_native"
    assert any("deprecated" in w and "torch_native" in w for w in p.warnings)


def test_other_engines_backend_names_attnkit_backends_that_serve():
    p = plan("llama-3.1-8b", "h100", {"attention_backend": "flashinfer"}, env={})
    assert p.error["code"] == "AK301"
    assert "attnkit has no 'flashinfer' backend" in p.error["message"]
    assert "triton" in p.error["details"]["alternatives"]


def test_dual_chunk_model_with_fleet_backend_offers_both_fixes():
    p = plan("qwen2.5-7b-instruct-1m", "h100", {"attention_backend": "triton"}, env={})
    assert p.error["code"] == "AK302"
    sols = " | ".join(p.error["solutions"])
    assert "--attention-backend dual_chunk" in sols and "--dual-chunk off" in sols


def test_dual_chunk_model_automatic_and_off():
    auto = plan("qwen2.5-7b-instruct-1m", "h100", env={})
    assert auto.ok and auto.prefill_backend == "dual_chunk"
    assert any(a["rule"] == "dual-chunk" and a["field"] == "prefill_backend" for a in auto.adjustments)
    off = plan("qwen2.5-7b-instruct-1m", "h100", {"attention_backend": "triton", "dual_chunk": "off"}, env={})
    assert off.ok and off.prefill_backend == "triton"
    assert any("chunk_size 262144" in w for w in off.warnings)


def test_tensor_parallel_llama_70b():
    p = plan("llama-3.1-70b", "h100", {"tp_size": 8}, env={})
    assert p.ok and p.settings["heads_per_rank"] == 8 and p.settings["kv_heads_per_rank"] == 1
    bad = plan("llama-3.1-70b", "h100", {"tp_size": 3}, env={})
    assert bad.error["code"] == "AK305" and 4 in bad.error["expected"]
    rep = plan("llama-3.1-70b", "h100", {"tp_size": 16}, env={})
    assert rep.ok and any("replicated" in a["reason"] for a in rep.adjustments)


def test_page_size_honoured_or_rejected_never_changed():
    ok = plan("deepseek-v3", "h100", {"page_size": 32}, env={})
    assert ok.ok and ok.settings["page_size"] == 32
    assert not any(a["field"] == "page_size" for a in ok.adjustments)
    bad = plan("deepseek-v3", "h100", {"attention_backend": "triton_mla", "page_size": 128}, env={})
    assert bad.error["code"] == "AK303" and 64 in bad.error["expected"]


def test_strict_raises_and_malformed_input_raises():
    with pytest.raises(AttnkitError) as e:
        plan("deepseek-v3", "h100", {"attention_backend": "triton"}, env={}, strict=True)
    assert e.value.code == "AK121"
    with pytest.raises(AttnkitError):
        plan("no-such-model", "h100")
    with pytest.raises(AttnkitError):
        plan("llama-3.1-8b", "h1000")
    with pytest.raises(AttnkitError) as e:
        plan("llama-3.1-8b", "h100", {"page_size": 0})
    assert e.value.code == "AK306"
