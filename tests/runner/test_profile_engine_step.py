"""benchmarks/profile_engine_step.py: its grouping of a trace (busy time as the union of
kernel intervals, kinds by name) and a CPU smoke run of the whole script."""
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def script():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("profile_engine_step", BENCH / "profile_engine_step.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)
        sys.path.remove(str(BENCH))


def test_busy_time_is_the_union_of_kernel_intervals(script):
    kernels = [("nvjet_sm90_tst_64x8", 0.0, 10.0), ("_rms_norm_kernel", 5.0, 12.0),   # overlap
               ("void at::native::reduce_kernel<ArgMaxOps>", 20.0, 21.0), ("_stream_kernel", 30.0, 40.0)]
    got = script.summarise(kernels, walls=[1.0, 3.0], steps=2)
    assert got["busy_ms"] == pytest.approx((12 + 1 + 10) / 2 / 1e3)
    assert got["span_ms"] == pytest.approx(40 / 2 / 1e3) and got["launches"] == 2
    kinds = {k: v["launches"] for k, v in got["kinds"].items()}
    assert kinds == {"gemm": 0.5, "norm": 0.5, "sampling": 0.5, "attention": 0.5}   # argmax not attention


def test_tiny_cpu_run_writes_its_report(script, tmp_path):
    assert script.main(["--tiny", "--batches", "1,2", "--steps", "2", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "profile_engine_step.md").read_text()
    assert "### B=1:" in text and "### B=2:" in text
