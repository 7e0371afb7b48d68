"""`attnkit tune` end to end on the CPU (a smoke profile of tiny shapes), resuming, refusing to
mix environments, and recording a backend that fails the reference check as wrong, untimed."""
import json

import pytest
import torch

from attnkit.backends.sdpa.backend import SdpaBackend
from attnkit.cli.main import main
from attnkit.errors import AttnkitError
from attnkit.model import load_model
from attnkit.planning.measured import model_shape
from attnkit.planning.profile import load_profile
from attnkit.registry import declarations
from attnkit.planning.solver import plan
from attnkit.tune import grid
from attnkit.tune.case import make_case
from attnkit.tune.environment import platform_for
from attnkit.tune.run import measure_entry, serving, tune


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune") / "cpu.json"
    assert main(["tune", "--device", "cpu", "--quick", "--out", str(out)]) == 0
    return out


def test_tune_cpu_quick_writes_a_smoke_profile(tuned):
    prof = load_profile(tuned)
    assert prof.smoke and prof.device["kind"] == "cpu" and prof.software["torch"] == torch.__version__
    assert prof.header["runs"][0]["command"].startswith("attnkit tune")
    platform = platform_for("cpu")
    expected = {(n, b, None) for b in grid.buckets(grid.CPU_QUICK)
                for n in serving(b, declarations(), platform, None)}
    assert {e.key() for e in prof.entries} == expected
    assert {n for n, _, _ in expected} == {"sdpa", "torch_native"}        # triton is CUDA-only
    for e in prof.entries:
        assert e.status == "ok" and e.eager_ms > 0 and e.graph_ms is None and e.rel_err < 1e-5, e
    assert {e.bucket.shape.kind for e in prof.entries} == {"mha", "mla"}


def test_the_planner_uses_the_tuned_profile(tuned):
    p = plan("llama-3.1-8b", "cpu", {"dtype": "fp32"}, profile=tuned)
    assert p.ok and p.to_dict()["profile"]["smoke"] is True
    for phase in ("prefill", "decode"):
        chosen = getattr(p, f"{phase}_backend")
        other = {"sdpa": "torch_native", "torch_native": "sdpa"}[chosen]
        assert p.why[phase].startswith(f"{phase}: {chosen}, ") and f"({other})" in p.why[phase]
        assert f"{p.platform['name']} profile" in p.why[phase]
    assert any("smoke profile" in w for w in p.warnings)


def test_a_rerun_resumes_and_measures_only_what_is_missing(tuned, tmp_path):
    copy = tmp_path / "cpu.json"
    data = json.loads(tuned.read_text())
    dropped = data["entries"].pop(3)
    copy.write_text(json.dumps(data))
    path, prof = tune(device="cpu", quick=True, out=copy)
    assert prof.header["runs"][-1]["measured"] == 1 and len(prof.entries) == len(data["entries"]) + 1
    again = prof.entries[-1]
    assert (again.backend, again.bucket.to_dict()) == (dropped["backend"], dropped["bucket"])
    before = copy.read_text()
    path, prof = tune(device="cpu", quick=True, out=copy)                 # nothing left to measure
    assert copy.read_text() == before and len(prof.entries) == len(data["entries"]) + 1


def test_resuming_a_profile_of_another_environment_is_ak232(tuned, tmp_path):
    data = json.loads(tuned.read_text())
    data["software"]["torch"] = "1.0"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    with pytest.raises(AttnkitError) as err:
        tune(device="cpu", quick=True, out=other)
    assert err.value.code == "AK232" and err.value.field == "software.torch"
    assert json.loads(other.read_text()) == data                          # left as it was


class OffByOnePercent(SdpaBackend):
    """A deliberately wrong backend: every output 1 % too large."""
    name = "sdpa"

    def forward(self, q, k, v, layer, cache, step):
        return super().forward(q, k, v, layer, cache, step) * 1.01


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_a_wrong_result_is_recorded_wrong_and_never_timed(phase, monkeypatch):
    b = next(x for x in grid.buckets(grid.CPU_QUICK) if x.phase == phase)
    case = make_case(b, "cpu")
    timed = []
    fake = {"graph_ms": None, "eager_ms": 1.0, "note": "stub"}
    monkeypatch.setattr("attnkit.tune.run.measure", lambda *a, **k: timed.append(1) or fake)
    e = measure_entry(case, OffByOnePercent(), "cpu")
    assert e.status == "wrong" and e.graph_ms is None and e.eager_ms is None and not timed
    assert 0.009 < e.rel_err < 0.011
    ok = measure_entry(case, SdpaBackend(), "cpu")                       # the right one is timed
    assert (ok.status, ok.eager_ms, timed) == ("ok", 1.0, [1]) and ok.rel_err < 1e-5


def test_a_backend_that_raises_is_recorded_as_an_error():
    class Broken(SdpaBackend):
        name = "sdpa"

        def forward(self, q, k, v, layer, cache, step):
            raise RuntimeError("kernel exploded")
    case = make_case(grid.buckets(grid.CPU_QUICK)[0], "cpu")
    e = measure_entry(case, Broken(), "cpu")
    assert e.status == "error" and "kernel exploded" in e.note and e.eager_ms is None


def test_tune_on_cuda_without_a_gpu_is_ak233(capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["tune", "--out", str(tmp_path / "x.json")]) == 2
    assert "AK233" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_tune_writes_to_the_cache_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNKIT_PROFILE_DIR", str(tmp_path))
    path, prof = tune(device="cpu", quick=True, backends=["sdpa"], models=[load_model("qwen3-4b")])
    assert path.parent == tmp_path and path.name.endswith("-cpu-smoke.json")
    assert {e.backend for e in prof.entries} == {"sdpa"}
    shape = model_shape(load_model("qwen3-4b"), {"dtype": "fp32"})
    assert {(e.bucket.shape.heads, e.bucket.shape.kv_heads, e.bucket.shape.head_dim) for e in prof.entries} == {
        (shape.heads, shape.kv_heads, shape.head_dim)}                        # --models: its shape only


def test_tune_into_a_malformed_file_is_ak231(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["tune", "--device", "cpu", "--quick", "--out", str(bad)]) == 2
    assert "AK231" in capsys.readouterr().err and bad.read_text() == "{not json"


def test_a_very_slow_backend_is_skipped_not_timed(monkeypatch):
    monkeypatch.setattr("attnkit.tune.run.SLOW_S", 0.0)
    case = make_case(grid.buckets(grid.CPU_QUICK)[0], "cpu")
    e = measure_entry(case, SdpaBackend(), "cpu")
    assert e.status == "skipped" and e.note.startswith("slow: one call took") and e.eager_ms is None


def test_a_selection_with_nothing_to_time_is_refused_whether_or_not_a_profile_exists(tmp_path, capsys):
    """Found by the probe: `tune --phase varlen --models deepseek-v3.2 --device cpu` (no layer of
    it is a varlen bucket) refused with AK233 into a new file, but into an existing profile it
    printed "wrote ..." and exited 0, the file rewritten with nothing measured. Now AK233 both
    ways, the file unchanged; a resume whose selection is all measured still succeeds."""
    out = tmp_path / "cpu.json"
    args = ["tune", "--device", "cpu", "--quick", "--out", str(out), "--models", "deepseek-v3.2"]
    assert main([*args, "--phase", "varlen"]) == 2
    assert "AK233" in capsys.readouterr().err and not out.exists()
    assert main([*args, "--phase", "decode"]) == 0
    before = out.read_bytes()
    assert main([*args, "--phase", "varlen"]) == 2
    err = capsys.readouterr().err
    assert "AK233" in err and "varlen" in err and out.read_bytes() == before
    assert main([*args, "--phase", "decode"]) == 0                    # all measured: a resume, fine
    assert out.read_bytes() == before


def test_models_takes_a_comma_list_as_backends_does(tmp_path, capsys):
    """Found by the probe: `--models deepseek-v3.2,llama-3.1-8b` was one unknown preset (AK507)
    while --backends takes B,B. Now both spellings name the same models; a typo is named alone."""
    assert main(["tune", "--device", "cpu", "--quick", "--models", "qwen3-4b,lama-3.1-8b",
                 "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "AK507" in err and "'lama-3.1-8b' is not" in err and not (tmp_path / "x.json").exists()
    outs = []
    for models in (["qwen3-4b,phi-3-mini"], ["qwen3-4b", "phi-3-mini"]):
        out = tmp_path / f"{len(models)}.json"
        assert main(["tune", "--device", "cpu", "--quick", "--backends", "sdpa", "--phase", "decode",
                     "--out", str(out), "--models", *models]) == 0
        outs.append({e.key() for e in load_profile(out).entries})
    assert outs[0] == outs[1] and len(outs[0]) >= 2
