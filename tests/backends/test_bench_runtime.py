"""benchmarks/bench_runtime.py on CPU: it imports, its byte and FLOP accounting is right,
its case builder feeds both backends, and its table reports failures as n/a."""
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_runtime as bench  # noqa: E402

LLAMA = bench.Shape()


def test_decode_bytes_count_all_kv_read():
    # 16 requests x (4096 + 1) tokens x 8 KV heads x (128 K + 128 V) x 2 bytes
    assert bench.kv_bytes(bench.Row("decode", 16, 4096), LLAMA) == 16 * 4097 * 8 * 256 * 2


def test_extend_flops_count_causal_pairs_only():
    row = bench.Row("extend", 1, 8192, new=2048)
    pairs = sum(8192 + j + 1 for j in range(2048))
    assert bench.attention_flops(row, LLAMA) == 2 * 32 * pairs * 256
    assert bench.attention_flops(bench.Row("extend", 1, 0, new=1), LLAMA) == 2 * 32 * 1 * 256


def test_rows_cover_the_brief():
    labels = [r.label for r in bench.ROWS]
    assert labels[:2] == ["decode B=1 ctx=1k", "decode B=1 ctx=4k"]
    assert "decode B=64 ctx=4k" in labels and labels[-1] == "extend q=2k prefix=8k"


def test_table_reports_failures_and_ratios():
    row = bench.Row("decode", 1, 1024)
    ms = bench.kv_bytes(row, LLAMA) / 1e6 / 1000.0          # exactly 1000 GB/s
    table = bench.format_table(
        {row: {"sdpa": ms * 2, "contiguous sdpa[flash]": ms, "contiguous sdpa[cudnn]": "RuntimeError: x"}},
        LLAMA, {"copy_gbs": 4000.0, "matmul_tflops": 800.0})
    assert "| decode B=1 ctx=1k | sdpa | " in table and "| 500 GB/s | 12% | 0.50 |" in table
    assert "| 1000 GB/s | 25% | 1.00 |" in table
    assert "n/a (RuntimeError: x)" in table


@pytest.mark.parametrize("name", ["torch_native", "sdpa"])
@pytest.mark.parametrize("row", [bench.Row("decode", 3, 40), bench.Row("extend", 1, 20, new=9)],
                         ids=["decode", "extend"])
def test_case_builder_runs_on_cpu(name, row):
    from attnkit.registry import load_backend

    shape = bench.Shape(num_heads=4, num_kv_heads=2, head_dim=16, page_size=4, dtype=torch.float32)
    layer, cache, meta, q, k, v = bench.make_case(row, shape, torch.Generator().manual_seed(0), device="cpu")
    backend = load_backend(name)
    out = backend.forward(q, k, v, layer, cache, backend.prepare(meta, cache))
    assert out.shape == (row.batch * row.new, 4 * 16) and torch.isfinite(out).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_main_without_cuda_exits_2():
    assert bench.main([]) == 2


@pytest.mark.gpu
def test_time_row_on_cuda_reports_every_peer():
    shape = bench.Shape(num_heads=8, num_kv_heads=2, head_dim=64)
    for row in (bench.Row("decode", 2, 256), bench.Row("extend", 1, 128, new=64)):
        results = bench.time_row(row, shape, reps=2)
        assert isinstance(results["torch_native"], float) and isinstance(results["sdpa"], float)
        assert sum(name.startswith(bench.CONTIGUOUS) for name in results) == 3
        print(bench.format_table({row: results}, shape, {"copy_gbs": 4000.0, "matmul_tflops": 800.0}))
