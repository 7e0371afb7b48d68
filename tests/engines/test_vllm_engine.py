"""attnkit inside vLLM's own engine (CPU): ``vllm.LLM(...).generate`` with ATTNKIT_VLLM=1
against the same call on vLLM's own CPU backend (CPU_ATTN), on tiny random-weight models.

Each engine run is a subprocess (tests/engines/vllm_run.py): the plugin is loaded once per
process, at vLLM's start-up. The vLLM tier of .ci/run runs this file in its own venv.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import compare
import tiny_models

HERE = Path(__file__).parent
RUN = HERE / "vllm_run.py"
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
              "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def engine(out: Path, models: list[Path], *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run vllm_run.py over ``models`` with the environment ``env`` on top of ENGINE_ENV;
    ATTNKIT_VLLM and the test knob are removed unless ``env`` sets them. The process's log
    (vLLM's, with attnkit's start-up line) is in ``stdout``, stderr included."""
    full = {k: v for k, v in os.environ.items()
            if k not in ("ATTNKIT_VLLM", "ATTNKIT_ENGINE_TEST_SCALE_ERROR")}
    full.update(ENGINE_ENV)
    full.update(env)
    return subprocess.run([sys.executable, str(RUN), *args, str(out), *map(str, models)], env=full,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900)


def report(proc: subprocess.CompletedProcess, out: Path) -> dict:
    if proc.returncode != 0:
        pytest.fail(f"vLLM run failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}")
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {f: tiny_models.build(f, root / f) for f in tiny_models.FAMILIES}


@pytest.fixture(scope="module")
def runs(models, tmp_path_factory) -> dict[str, dict]:
    """vLLM's own backend and attnkit's, each over every family in one process."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for mode, env in (("vllm", {}), ("attnkit", {"ATTNKIT_VLLM": "1"})):
        proc = engine(root / f"{mode}.json", list(models.values()), **env)
        out[mode] = report(proc, root / f"{mode}.json") | {"log": proc.stdout}
    return out


@pytest.mark.parametrize("family", sorted(tiny_models.FAMILIES))
def test_attnkit_gives_vllms_tokens_and_logprobs(family, models, runs):
    key = str(models[family])
    ours, theirs = runs["attnkit"][key], runs["vllm"][key]
    assert ours["impl"] == "attnkit.integrations.vllm.backend.AttnkitImpl"
    assert theirs["impl"] == "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackendImpl"
    why = compare.verdict(ours["outputs"], theirs["outputs"])
    assert why is None, f"{family}: {why}"


def test_attnkit_ran_and_logged_its_plan(models, runs):
    stats = runs["attnkit"]["attnkit_stats"]
    # every step of every model ran attnkit's forward for each of its 2 layers
    assert stats["forwards"] >= 2 * len(models) * (1 + 15), stats
    assert runs["vllm"]["attnkit_stats"]["forwards"] == 0
    lines = [l for l in runs["attnkit"]["log"].splitlines() if "attnkit plan for" in l]
    assert len(lines) == len(models), lines
    gemma = next(l for l in lines if "gemma2" in l)
    # softcap: sdpa has none, so the planner picks torch_native; the engine's settings are quoted
    assert "prefill=torch_native" in gemma and "page_size=32" in gemma and "block_size=32" in gemma


def test_negative_control_in_vllms_worker_fails_the_comparison(models, runs, tmp_path):
    """A 1 % softmax-scale error in attnkit's code, with vLLM's engine core and worker in their
    own processes (vLLM's default): the comparison must catch it, and the change proves that attnkit's code
    computed what vLLM's worker returned."""
    model = models["llama-gqa"]
    out = tmp_path / "control.json"
    proc = engine(out, [model], ATTNKIT_VLLM="1", ATTNKIT_ENGINE_TEST_SCALE_ERROR="0.01",
                  VLLM_ENABLE_V1_MULTIPROCESSING="1")
    control = report(proc, out)[str(model)]
    why = compare.verdict(control["outputs"], runs["vllm"][str(model)]["outputs"])
    assert why is not None, "a 1% scale error passed the comparison"
    plan_lines = [l for l in proc.stdout.splitlines() if "attnkit plan for" in l]
    # logged by vLLM's worker process (its log prefix), not by this test's process
    assert plan_lines and all(l.startswith("(Worker pid=") for l in plan_lines), plan_lines


def test_mla_model_is_refused_at_startup_with_attnkits_code(tmp_path):
    model = tiny_models.build("deepseek-mla", tmp_path / "mla")
    proc = engine(tmp_path / "out.json", [model], ATTNKIT_VLLM="1")
    assert proc.returncode != 0
    assert "AK496" in proc.stdout and "MLA" in proc.stdout
    assert not (tmp_path / "out.json").exists()      # nothing generated


def test_planner_refusal_stops_vllm_at_startup(models, tmp_path):
    """A backend attnkit cannot run here (triton, a CUDA backend, on a CPU): vLLM's start-up
    ends with the code ``attnkit.plan`` gives for the same model and request."""
    import attnkit

    model = models["llama-gqa"]
    with pytest.raises(attnkit.AttnkitError) as planned:
        attnkit.plan(str(model), "cpu", {"attention_backend": "triton", "dtype": "fp32",
                                         "page_size": 32}, strict=True)
    proc = engine(tmp_path / "out.json", [model], ATTNKIT_VLLM="1", ATTNKIT_ATTENTION_BACKEND="triton")
    assert proc.returncode != 0
    assert f"AttnkitError: {planned.value.code}" in proc.stdout, proc.stdout[-3000:]
    assert not (tmp_path / "out.json").exists()


def test_fp8_kv_cache_is_refused_at_startup(models, tmp_path):
    proc = engine(tmp_path / "out.json", [models["llama-gqa"]], "--kv-cache-dtype=fp8",
                  ATTNKIT_VLLM="1")
    assert proc.returncode != 0
    assert "AttnkitError: AK496" in proc.stdout and "fp8" in proc.stdout
    assert not (tmp_path / "out.json").exists()
