"""benchmarks/bench_runner.py --tiny on CPU: the same code path as the GPU run, toy sizes."""
import importlib.util
import json
import sys
from pathlib import Path

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_runner.py"


def run_bench(*argv: str) -> int:
    """benchmarks/bench_runner.py's main(argv), the script loaded as a module."""
    spec = importlib.util.spec_from_file_location("bench_runner", PATH)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench               # dataclasses look their module up there
    try:
        spec.loader.exec_module(bench)
        return bench.main(list(argv))
    finally:
        sys.modules.pop(spec.name, None)


def test_tiny_run_reports_every_row(tmp_path, capsys):
    assert run_bench("--tiny", "--reps", "1", "--out", str(tmp_path / "r.md"),
                     "--json", str(tmp_path / "r.json")) == 0
    text = (tmp_path / "r.md").read_text()
    rows = [l for l in text.splitlines() if l.startswith("| ") and "---" not in l][1:]
    # prefill: runner, transformers; per decode batch: graphs (n/a on CPU), eager, transformers
    assert len(rows) == 2 + 2 * 3
    assert "Command: `python benchmarks/bench_runner.py --tiny --reps 1`" in text
    measured = [r for r in rows if "n/a (" not in r]
    assert len(measured) == 6 and all("CPU: no CUDA graphs" in r for r in rows if r not in measured)
    for row in measured:          # numbers (decode is a difference of two CPU timings: noisy)
        ms, rate = row.split("|")[3:5]
        float(ms), float(rate.replace(",", ""))
    assert all(float(r.split("|")[3]) > 0 for r in rows if r.startswith("| prefill"))
    decode = [r for r in measured if r.startswith("| decode")]
    assert all("identical" in r for r in decode)          # every peer's greedy tokens compared
    data = json.loads((tmp_path / "r.json").read_text())
    assert len(data["rows"]) == len(rows) and data["weight_bytes"] > 0


def test_tiny_run_with_tensor_parallel_rows(tmp_path):
    """--tp-size 2: the runner over 2 ranks (CPU processes here) next to tp 1, same tokens."""
    assert run_bench("--tiny", "--reps", "3", "--no-peer", "--tp-size", "2",
                     "--json", str(tmp_path / "r.json")) == 0
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    tp = [r for r in rows if "tp 2" in r["peer"]]
    assert [r["case"].split()[0] for r in tp] == ["prefill", "decode", "decode"]
    assert all(r["ms"] > 0 for r in tp) and all(r["tokens"] == "identical" for r in tp[1:])
