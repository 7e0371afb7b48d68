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


def test_version9_candidates_pair_the_merge_with_the_reduce():
    """At each head count the fused-merge candidate and column_split with the reduce launch are
    the same options but merge_splits; at 16 heads each is timed twice (an again-spread), and
    the fused one merges at any split count the split rule plans (it caps splits at 256)."""
    from attnkit.backends.triton_mla.backend import TritonMLABackend
    from attnkit.backends.triton_mla.decode import choose_splits, fuses_merge
    for heads, cands in bench.CANDIDATES.items():
        fused, reduce = cands["v2 merge"], cands["v2"]
        assert {k: v for k, v in fused.items() if k != "merge_splits"} == \
            {k: v for k, v in reduce.items() if k != "merge_splits"}
        assert reduce["merge_splits"] == 0
        for opts in cands.values():
            TritonMLABackend(**opts)
    assert bench.CANDIDATES[16]["v2 again"] == bench.CANDIDATES[16]["v2"]
    assert bench.CANDIDATES[16]["v2 merge again"] == bench.CANDIDATES[16]["v2 merge"]
    most = choose_splits(1, 1 << 20, slots=1 << 10)
    assert fuses_merge("v2", most, bench.FUSED["merge_splits"])
    assert not fuses_merge("v2", 2, bench.REDUCE["merge_splits"])


def test_kernel_stats_is_a_list_where_nothing_was_compiled():
    """The compiled-kernel report never raises (the interpreter keeps no compiled kernels)."""
    assert isinstance(bench.kernel_stats(bench._absorbed_v2_kernel), list)
