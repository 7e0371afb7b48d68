"""benchmarks/bench_mla16.py on CPU: every L2 flush mode is a call that runs (the GPU round of
2026-12-02 lost its "read" rows to a torch.sum(out=) signature error), and only the zero mode
writes."""
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_mla16 as bench  # noqa: E402


@pytest.mark.parametrize("mode", bench.FLUSHES)
def test_every_flush_mode_runs(mode):
    bench.flusher(mode, nbytes=1 << 12, device="cpu")()


def test_zero_flush_writes_and_read_flush_does_not(monkeypatch):
    writes = []
    real_zero = torch.Tensor.zero_
    monkeypatch.setattr(torch.Tensor, "zero_", lambda t: writes.append(t.numel()) or real_zero(t))
    bench.flusher("read", nbytes=1 << 12, device="cpu")()
    assert writes == []
    bench.flusher("zero", nbytes=1 << 12, device="cpu")()
    assert writes == [1 << 10]
