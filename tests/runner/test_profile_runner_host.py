"""benchmarks/profile_runner_host.py on CPU with toy sizes: every case reports numbers."""
import importlib.util
import sys
from pathlib import Path

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "profile_runner_host.py"


def test_small_run_reports_every_case(capsys):
    spec = importlib.util.spec_from_file_location("profile_runner_host", PATH)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    try:
        spec.loader.exec_module(bench)
        assert bench.main(["--layers", "3", "--steps", "2", "--batches", "1,2",
                           "--profile", "sdpa:1", "--top", "5"]) == 0
    finally:
        sys.modules.pop(spec.name, None)
    out = capsys.readouterr().out
    rows = [l.split() for l in out.splitlines() if l.split()[:1] in (["torch_native"], ["sdpa"])]
    assert [(r[0], r[1]) for r in rows] == [("torch_native", "1"), ("torch_native", "2"),
                                            ("sdpa", "1"), ("sdpa", "2")]
    assert all(float(r[2]) > 0 and float(r[5]) > 0 for r in rows)      # step ms, prep ms
    assert "cProfile, sdpa B=1" in out and "engine.py" in out    # the runner's own frames
