"""Choosing by measurement: the matching rule, the ranking, what plans say, and what still wins."""
import pytest
from plan_fakes import FAKE, GPU
from profile_fakes import MHA_H200, entry, profile, write

from attnkit.errors import AttnkitError
from attnkit.planning import profile_search as prof
from attnkit.planning.measured import check_workload, rank
from attnkit.planning.profile import Shape, parse_profile
from attnkit.planning.solver import plan

LLAMA = Shape("mha", 32, 8, 128, 128, "bf16", "bf16")
CANDIDATES = ["triton", "sdpa", "torch_native"]


@pytest.fixture
def h200(tmp_path):
    return write(tmp_path / "h200.json", profile(MHA_H200))


@pytest.fixture(autouse=True)
def no_shipped(tmp_path, monkeypatch):
    """Plans here see only the profiles a test gives (not the package's, not the user's cache)."""
    monkeypatch.setattr(prof, "SHIPPED_DIR", tmp_path / "no-shipped")
    monkeypatch.setenv("ATTNKIT_PROFILE_DIR", str(tmp_path / "no-cache"))
    monkeypatch.delenv("ATTNKIT_PROFILE", raising=False)


def test_each_phase_takes_its_fastest_measured_backend(h200):
    p = plan("llama-3.1-8b", "h200", profile=h200)
    assert (p.prefill_backend, p.decode_backend) == ("sdpa", "triton")
    assert p.why["prefill"].startswith("prefill: sdpa, 623 vs 470 TFLOP/s (triton), 18 (torch_native); "
                                       "NVIDIA H200 profile 2026-12-02, CUDA-graph replays, new=16384 prefix=0, "
                                       "32/8 heads, d128, bf16")
    assert p.why["decode"].startswith("decode: triton, 4084 vs 952 GB/s (sdpa), 30 (torch_native)")
    rules = {a["field"]: a["rule"] for a in p.adjustments}
    assert rules["prefill_backend"] == rules["decode_backend"] == "profile"
    assert p.to_dict()["profile"] == {"source": "--profile", "path": h200, "device": "NVIDIA H200",
                                      "capability": [9, 0], "date": "2026-12-02", "smoke": False,
                                      "phases": ["prefill", "decode"]}


def test_another_sm90_device_says_where_it_was_measured(h200):
    p = plan("llama-3.1-8b", "h100", profile=h200)
    assert p.prefill_backend == "sdpa"
    # the rates are the H200's, and every reason that quotes them says so (the adjustment's too)
    assert ("NVIDIA H200 profile 2026-12-02 (measured on NVIDIA H200, not on NVIDIA H100 80GB HBM3: same "
            "sm90 architecture, so its order is used)") in p.why["prefill"]
    profile_fills = [a for a in p.adjustments if a["rule"] == "profile"]
    assert profile_fills and all("measured on NVIDIA H200, not on NVIDIA H100" in a["reason"] for a in profile_fills)
    same = plan("llama-3.1-8b", "h200", profile=h200)
    assert not any("measured on" in a["reason"] for a in same.adjustments) and "measured on" not in same.why["prefill"]


def test_an_explicit_choice_always_wins(h200):
    p = plan("llama-3.1-8b", "h200", {"attention_backend": "triton"}, profile=h200)
    assert (p.prefill_backend, p.decode_backend) == ("triton", "triton")
    assert p.why["prefill"] == "named by --attention-backend"
    p = plan("llama-3.1-8b", "h200", {"prefill_attention_backend": "torch_native"}, profile=h200)
    assert (p.prefill_backend, p.decode_backend) == ("torch_native", "triton")


def test_the_environment_names_a_profile(h200):
    p = plan("llama-3.1-8b", "h200", env={"ATTNKIT_PROFILE": h200})
    assert p.prefill_backend == "sdpa" and p.to_dict()["profile"]["source"] == "ATTNKIT_PROFILE"
    assert plan("llama-3.1-8b", "h200", env={"ATTNKIT_PROFILE": h200}, profile=False).prefill_backend == "triton"


def test_a_bad_named_profile_is_a_coded_error(tmp_path):
    bad = write(tmp_path / "bad.json", {"schema": "attnkit-profile", "version": 1})
    with pytest.raises(AttnkitError) as err:
        plan("llama-3.1-8b", "h200", profile=bad)
    assert err.value.code == "AK231"
    with pytest.raises(AttnkitError) as err:
        plan("llama-3.1-8b", "h200", profile=tmp_path / "none.json")
    assert err.value.code == "AK230"


def test_without_a_covering_profile_the_priority_order_cites_the_shipped_one(tmp_path, monkeypatch):
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    write(shipped / "nvidia-h200.json", profile(MHA_H200))
    monkeypatch.setattr(prof, "SHIPPED_DIR", shipped)
    p = plan("llama-3.1-8b", "a100")
    assert (p.prefill_backend, p.decode_backend) == ("triton", "triton")       # the table's order
    assert p.why["decode"].startswith("first in the cuda mha priority order")
    assert ("Measured: triton 4084, sdpa 952, torch_native 30 GB/s; NVIDIA H200 profile 2026-12-02 "
            "(not NVIDIA A100-SXM4-80GB), CUDA-graph replays, B=64 ctx=4096") in p.why["decode"]
    assert p.to_dict()["profile"] is None
    covered = plan("llama-3.1-8b", "h200")                                       # found automatically
    assert covered.prefill_backend == "sdpa" and covered.to_dict()["profile"]["source"] == "shipped"
    assert covered.to_dict()["profile"]["path"] == "attnkit/planning/profiles/nvidia-h200.json"


def test_a_custom_registry_uses_no_profile_unless_named(tmp_path, monkeypatch, h200):
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    write(shipped / "nvidia-h200.json", profile(MHA_H200))
    monkeypatch.setattr(prof, "SHIPPED_DIR", shipped)
    from plan_fakes import mha
    model = mha(dim=128, heads=32, kv=8)
    assert plan(model, GPU, registry=FAKE, env={}).prefill_backend == "triton"
    assert plan(model, GPU, registry=FAKE, env={}, profile=h200).prefill_backend == "sdpa"


def test_a_backend_the_profile_found_wrong_is_not_chosen(tmp_path):
    rows = [e for e in MHA_H200 if e["backend"] != "sdpa" or e["phase"] != "prefill"]
    rows.append(entry("sdpa", "prefill", None, new=16384, context=16384, status="wrong", rel_err=0.3))
    path = write(tmp_path / "p.json", profile(rows))
    p = plan("llama-3.1-8b", "h200", profile=path)
    assert p.prefill_backend == "triton"
    assert any("records sdpa as wrong (failed the reference check, rel err 0.3) at new=16384 prefix=0 "
               "for prefill: not chosen automatically" in w for w in p.warnings)
    named = plan("llama-3.1-8b", "h200", {"prefill_attention_backend": "sdpa"}, profile=path)
    assert named.prefill_backend == "sdpa" and any("named, so it runs anyway" in w for w in named.warnings)


def test_no_matching_measurement_leaves_the_priority_order(h200):
    p = plan("deepseek-v3", "h200", profile=h200)            # MLA: the profile holds MHA only
    assert p.prefill_backend == "triton_mla" and p.why["prefill"].startswith("first in the cuda mla")
    assert any("has no prefill measurement" in w for w in p.warnings)
    p = plan("llama-3.1-8b", "h200", {"dtype": "fp32"}, profile=h200)     # fp32 matches fp32 only
    assert p.prefill_backend == "triton"


# ---- the ranking itself ------------------------------------------------------------------------

def ranked(rows, shape=LLAMA, phase="decode", candidates=CANDIDATES, workload=None):
    return rank(parse_profile(profile(rows)), shape, phase, candidates, workload)


def test_buckets_are_compared_by_geometric_mean():
    rows = [entry("triton", "decode", 100, batch=1), entry("sdpa", "decode", 400, batch=1),
            entry("triton", "decode", 400, batch=64), entry("sdpa", "decode", 50, batch=64)]
    r = ranked(rows)
    assert r.order == ["triton", "sdpa", "torch_native"]         # 200 vs ~141: triton; torch_native unmeasured
    assert r.rates["triton"] == pytest.approx(200) and r.rates["sdpa"] == pytest.approx((400 * 50) ** 0.5)
    assert "geometric mean over 2 buckets (B 1-64, ctx 4096)" in r.why("triton", GPU)


def test_a_workload_ranks_by_its_nearest_bucket():
    rows = [entry("triton", "decode", 100, batch=1), entry("sdpa", "decode", 400, batch=1),
            entry("triton", "decode", 400, batch=64), entry("sdpa", "decode", 50, batch=64)]
    w = check_workload({"decode": {"batch": 2, "context": 3000}})["decode"]
    assert ranked(rows, workload=w).order[0] == "sdpa"
    w = check_workload({"decode": {"batch": 40, "context": 8192}})["decode"]
    assert ranked(rows, workload=w).order[0] == "triton"
    rows = [entry("triton", "prefill", 300, new=2048, context=34816), entry("sdpa", "prefill", 280, new=2048, context=34816),
            entry("triton", "prefill", 470, new=16384, context=16384), entry("sdpa", "prefill", 620, new=16384, context=16384)]
    w = check_workload({"prefill": {"new": 2048, "context": 34816}})["prefill"]
    assert ranked(rows, phase="prefill", workload=w).order[0] == "triton"
    w = check_workload({"prefill": {"new": 8192}})["prefill"]                     # no prefix
    assert ranked(rows, phase="prefill", workload=w).order[0] == "sdpa"


@pytest.mark.parametrize("bad", [{"decode": {"batch": 0}}, {"verify": {}}, {"prefill": {"new": 9, "context": 4}},
                                 {"decode": {"depth": 3}}, [1]])
def test_a_bad_workload_is_ak306(bad):
    with pytest.raises(AttnkitError) as err:
        check_workload(bad)
    assert err.value.code == "AK306"


def test_the_nearest_static_shape_is_used():
    rows = [entry("triton", "decode", 10, head_dim=64), entry("sdpa", "decode", 20, head_dim=64),
            entry("triton", "decode", 30, head_dim=256, heads=16), entry("sdpa", "decode", 5, head_dim=256, heads=16)]
    assert ranked(rows, shape=Shape("mha", 32, 8, 96, 96, "bf16", "bf16")).order[0] == "sdpa"     # d64 nearer
    assert ranked(rows, shape=Shape("mha", 16, 8, 192, 192, "bf16", "bf16")).order[0] == "triton"
    fp16 = Shape("mha", 32, 8, 64, 64, "fp16", "fp16")
    assert ranked(rows, shape=fp16).order[0] == "sdpa"                                          # bf16 stands in
    assert ranked(rows, shape=Shape("mha", 32, 8, 64, 64, "fp32", "fp32")) is None
    kv8 = [entry("triton", "decode", 10, kv_dtype="fp8_e4m3"), entry("sdpa", "decode", 20),
           entry("triton", "decode", 30)]
    assert ranked(kv8, shape=Shape("mha", 32, 8, 128, 128, "bf16", "fp8_e4m3")).order[0] == "triton"
    assert ranked(kv8, shape=Shape("mha", 32, 8, 128, 128, "bf16", "fp8_e4m3")).buckets[0].shape.kv_dtype == "fp8_e4m3"


def test_mla_buckets_match_only_their_latent_sizes():
    rows = [entry("triton_mla", "decode", 900, kind="mla", heads=128, kv_heads=1, head_dim=192, mla=(512, 64)),
            entry("sdpa", "decode", 300, kind="mla", heads=128, kv_heads=1, head_dim=192, mla=(512, 64))]
    v3 = Shape("mla", 128, 1, 192, 128, "bf16", "bf16", 512, 64)
    assert ranked(rows, shape=v3, candidates=["triton_mla", "sdpa"]).order == ["triton_mla", "sdpa"]
    assert ranked(rows, shape=Shape("mla", 16, 1, 192, 128, "bf16", "bf16", 256, 64), candidates=["sdpa"]) is None
    assert ranked(rows, shape=LLAMA) is None


def test_one_method_for_every_compared_backend():
    """A backend without a CUDA-graph time makes the comparison eager for all (never mixed)."""
    rows = [entry("triton", "decode", 1000), entry("sdpa", "decode", 900, graph=False)]
    r = ranked(rows)
    assert r.method == "eager" and r.rates["triton"] == pytest.approx(1000 / 1.5)
    assert "eager calls" in r.why("triton", GPU)


def test_candidates_missing_a_bucket_rank_after_the_complete_ones():
    rows = [entry("torch_native", "decode", 5000, batch=1), entry("triton", "decode", 100, batch=1),
            entry("triton", "decode", 100, batch=64), entry("sdpa", "decode", 50, batch=1),
            entry("sdpa", "decode", 50, batch=64), entry("torch_native", "decode", None, batch=64, status="skipped")]
    assert ranked(rows).order == ["triton", "sdpa", "torch_native"]


def test_planning_with_a_profile_imports_no_torch(h200):
    import json
    import os
    import subprocess
    import sys
    script = ("import sys, json, io, contextlib\nfrom attnkit.cli.main import main\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              f"    rc = main(['plan', 'llama-3.1-8b', '--device', 'h200', '--profile', {h200!r}, '--json'])\n"
              "print(json.dumps([rc, sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton'))]))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNKIT_")}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert json.loads(run.stdout.strip().splitlines()[-1]) == [0, []], run.stderr


def test_the_cli_reports_a_malformed_profile_with_its_code(tmp_path, capsys):
    from attnkit.cli.main import main
    bad = write(tmp_path / "bad.json", profile([{"backend": "triton"}]))
    assert main(["plan", "llama-3.1-8b", "--device", "h200", "--profile", bad]) == 2
    err = capsys.readouterr().err
    assert "error AK231" in err and "entries[0].bucket" in err
