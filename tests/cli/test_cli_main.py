"""The attnkit command: output, JSON contract, exit codes, error boundary."""
import json
import os
import subprocess
import sys

import pytest

from attnkit import plan
from attnkit.cli import main as cli


def run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_plan_text_deepseek_h100(capsys, monkeypatch):
    monkeypatch.delenv("ATTNKIT_ATTENTION_BACKEND", raising=False)
    rc, out, _ = run(capsys, "plan", "deepseek-v3", "--device", "h100")
    assert rc == 0
    assert "triton_mla" in out and "adjustments" in out and "rejected" in out and "AK101" in out


def test_plan_json_is_exactly_plan_to_dict(capsys, monkeypatch):
    monkeypatch.delenv("ATTNKIT_ATTENTION_BACKEND", raising=False)
    monkeypatch.delenv("ATTNKIT_DENY_BACKENDS", raising=False)
    rc, out, _ = run(capsys, "plan", "deepseek-v3", "--device", "h100", "--attention-backend", "triton", "--json")
    assert rc == 3
    assert json.loads(out) == plan("deepseek-v3", "h100", {"attention_backend": "triton"}, env={}).to_dict()


def test_fleet_matrix(capsys, monkeypatch):
    monkeypatch.delenv("ATTNKIT_ATTENTION_BACKEND", raising=False)
    argv = ["plan", "llama-3.1-8b", "deepseek-v3", "qwen2.5-7b-instruct-1m", "--device", "h100", "--device", "cpu"]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0 and out.splitlines()[0].split() == ["model", "h100", "cpu"]
    rc, out, _ = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert isinstance(data, list) and len(data) == 6 and all(d["ok"] for d in data)
    rc, out, _ = run(capsys, *argv, "--attention-backend", "triton")
    assert rc == 3 and "AK302" in out and "AK121" in out


@pytest.mark.parametrize("argv", [
    ["plan", "no-such-model", "--device", "h100"],
    ["plan", "llama-3.1-8b", "--device", "h1000"],
    ["plan", "llama-3.1-8b", "--kv-cache-dtype", "fp7"],
    ["plan", "llama-3.1-8b", "--page-size", "x"],
    ["plan", "llama-3.1-8b", "--no-such-flag"],
    ["explain", "AK12"],
    ["frobnicate"],
])
def test_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as e:   # argparse errors exit by themselves
        raise SystemExit(cli.main(argv))
    assert e.value.code == 2


def test_explain(capsys):
    rc, out, _ = run(capsys, "explain", "ak121")
    assert rc == 0 and out.startswith("# AK121") and "## Example fix" in out
    rc, _, err = run(capsys, "explain", "AK1211")
    assert rc == 2 and "did you mean" in err


def test_backends_json_shape(capsys):
    rc, out, _ = run(capsys, "backends", "--device", "cpu", "--json")
    data = json.loads(out)
    assert rc == 0 and data["platform"]["kind"] == "cpu"
    rows = {b["name"]: b for b in data["backends"]}
    assert set(rows["triton"]) >= {"name", "aliases", "installed", "usable", "why_not", "capabilities"}
    assert rows["triton"]["installed"] is False and rows["triton"]["usable"] is False
    assert rows["sdpa"]["usable"] is True and rows["torch_native"]["aliases"]
    caps = rows["triton"]["capabilities"]
    assert set(caps) >= {"platforms", "compute_capability", "kinds", "head_dims", "dtypes", "kv_cache_dtypes",
                         "page_sizes", "phases", "features", "requires"}
    rc, out, _ = run(capsys, "backends", "--device", "h100")
    assert rc == 0 and "triton_mla" in out


def test_models_and_devices(capsys):
    assert "deepseek-v3" in run(capsys, "models")[1]
    assert "h100" in run(capsys, "devices")[1]


def test_unexpected_exception_is_ak900(capsys, monkeypatch):
    def boom(args):
        raise ZeroDivisionError("bug")
    monkeypatch.setitem(cli.COMMANDS, "models", boom)
    rc, _, err = run(capsys, "models")
    assert rc == 1 and "AK900" in err and "Traceback" not in err
    for argv in (["models", "--debug"], ["--debug", "models"]):
        rc, _, err = run(capsys, *argv)
        assert rc == 1 and "Traceback" in err


def test_attnkit_plan_answers_well_under_a_second():
    """Import + plan + print in a fresh interpreter, timed inside it (interpreter start-up excluded).

    CPU time, not wall time: a loaded CI box (other tests on the same cores) must not make it flaky.
    """
    script = ("import time, io, contextlib; t = time.process_time()\n"
              "from attnkit.cli.main import main\n"
              "with contextlib.redirect_stdout(io.StringIO()): rc = main(['plan', 'deepseek-v3', '--device', 'h100'])\n"
              "print(rc, time.process_time() - t)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNKIT_")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    rc, elapsed = proc.stdout.split()
    assert rc == "0", proc.stderr
    assert float(elapsed) < 1.0, elapsed


def test_text_collapses_shared_causes_into_one_line(capsys, monkeypatch):
    monkeypatch.delenv("ATTNKIT_ATTENTION_BACKEND", raising=False)
    monkeypatch.delenv("ATTNKIT_DENY_BACKENDS", raising=False)
    rc, out, _ = run(capsys, "plan", "llama-3.1-8b", "--device", "cpu", "--attention-backend", "triton")
    assert rc == 3 and "all rejected (triton, triton_dsa, triton_mla):" in out
    rejected = out.split("rejected\n", 1)[1].split("\n\n", 1)[0]
    assert rejected.count("AK210") == 1 and "error AK121" in out and "after:  attnkit plan" in out


@pytest.mark.parametrize("flag", [["--attention-backend", "tritn"], ["--attention-backend", "flashinfer"],
                                  ["--deny", "tritn"]])
def test_bad_backend_names_are_usage_errors(capsys, monkeypatch, flag):
    monkeypatch.delenv("ATTNKIT_ATTENTION_BACKEND", raising=False)
    monkeypatch.delenv("ATTNKIT_DENY_BACKENDS", raising=False)
    rc, _, _ = run(capsys, "plan", "llama-3.1-8b", "--device", "h100", *flag)
    assert rc == 2


def test_a_rocm_device_is_named_by_its_gfx_target_not_an_sm_number(capsys):
    """MI300X read 'rocm, sm94': sm numbers are CUDA's; its architecture is gfx942."""
    from attnkit.cli.main import main
    main(["plan", "llama-3.1-8b", "--device", "mi300x"])
    assert "(rocm, gfx942)" in capsys.readouterr().out.splitlines()[0]
    main(["devices"])
    out = capsys.readouterr().out
    assert "gfx942" in out and "sm94" not in out and "sm90" in out
