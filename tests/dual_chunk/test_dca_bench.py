"""benchmarks/bench_dual_chunk.py helpers at toy sizes on CPU (the GPU run is the lead's)."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_dual_chunk.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_dual_chunk", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def tiny(bench):
    # chunk length 12: a 40-token context crosses 4 chunks; L = 40 > original_max, so s > 1
    return bench.Setup(context=40, new=8, num_heads=4, num_kv_heads=2, head_dim=16, chunk_size=16,
                       local_size=4, original_max=16, page_size=4, dtype=torch.float32)


def test_run_checks_dca_against_the_reference_and_tabulates(bench):
    results = bench.run(tiny(bench), device="cpu", timer=lambda fn: bench.cpu_time_ms(fn, reps=1))
    assert len(results) == 2
    for peers in results.values():
        ms, graph, err = peers["dual_chunk (torch)"]
        assert ms > 0 and graph is None and err < 1e-4
        assert isinstance(peers[bench.CONTIGUOUS], tuple)        # torch SDPA runs on CPU too
    table = bench.format_table(results, tiny(bench))
    assert table.count("| decode: ") == 4 and table.count("| prefill: ") == 4


def test_failing_peer_prints_na_with_reason(bench, monkeypatch):
    monkeypatch.setattr(bench, "PAGED_PEERS", ("no_such_backend",))
    results = bench.run(tiny(bench), device="cpu", timer=lambda fn: bench.cpu_time_ms(fn, reps=1))
    table = bench.format_table(results, tiny(bench))
    assert "| no_such_backend | n/a (AttnkitError: AK300" in table     # load_backend: a coded error
