"""benchmarks/bench_dit.py on CPU: its rows are the issue's DiT shapes, read from the presets."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_dit  # noqa: E402


def test_rows_are_the_dit_shapes():
    got = {name: (t, layer.num_heads, layer.head_dim) for name in bench_dit.ROWS
           for t, layer in [bench_dit.shape(name)]}
    assert got == {"wan2.1-720p": (21 * 45 * 80, 40, 128), "wan2.1-480p": (21 * 30 * 52, 40, 128),
                   "flux.1-1024": (64 * 64 + 512, 24, 128), "hunyuanvideo-720p": (33 * 45 * 80 + 256, 24, 128)}


def test_rows_triton_leads_plan_triton_with_a_varlen_table_on_an_h200(monkeypatch):
    """The row's plan (issue 29: Wan's cross-attention no longer moves it off triton). The
    rows where the shipped profile has triton ahead by a margin (FLUX.1's 4,608 tokens: a
    near-tie with cuDNN, 611 vs 618 TFLOP/s in the profile of 2026-12-02 evening, so either)."""
    import bench_dit
    from attnkit.planning import components

    real = components.plan_components
    monkeypatch.setattr(components, "plan_components", lambda pipe, platform, *a, **k: real(pipe, "h200", *a, **k))
    for name in ("wan2.1-720p", "hunyuanvideo-720p"):
        options = bench_dit.planned_varlen(name)
        assert options is not None and "varlen" in options["kernels"], name


def test_a_wrong_cell_is_marked_and_never_timed():
    import torch

    ref = torch.ones(4, 6)
    timed = []
    cell = bench_dit.timed_cell(lambda: timed.append(1), 1.0, check=lambda: ref * 1.02, ref=ref)
    assert cell.startswith("wrong: relative error 0.02") and timed == []
    nan = bench_dit.timed_cell(lambda: timed.append(1), 1.0, check=lambda: ref * float("nan"), ref=ref)
    assert nan.startswith("wrong: relative error inf") and timed == []


def test_the_table_shows_both_methods_against_cudnn():
    cell = lambda g, e: {"ms": 1.0, "tflops": g, "eager_ms": 1.0, "eager_tflops": e, "rel_err": 3e-3}  # noqa: E731
    row = bench_dit._ratios({"row": "flux.1-1024", "sdpa_cudnn": cell(500.0, 400.0),
                             "attnkit_varlen_gluon": cell(600.0, 300.0), "attnkit_varlen_tile": "wrong: x",
                             "kernels": {"sdpa_cudnn": ["cudnn_fwd"]}})
    assert row["vs_cudnn"]["attnkit_varlen_gluon"] == 1.2 and row["vs_cudnn_eager"]["attnkit_varlen_gluon"] == 0.75
    text = bench_dit.table({"rows": [row]})
    assert "| flux.1-1024 | attnkit_varlen_gluon | 600 | 1.2 | 300 | 0.75 |  | 3.0e-03 |" in text
    assert "| flux.1-1024 | attnkit_varlen_tile | wrong: x |" in text and "- flux.1-1024 sdpa_cudnn: cudnn_fwd" in text
