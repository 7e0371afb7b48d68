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


def test_every_row_plans_triton_with_a_varlen_table_on_an_h200(monkeypatch):
    """The row's plan (issue 29: Wan's cross-attention no longer moves it off triton)."""
    import bench_dit
    from attnkit.planning import components

    real = components.plan_components
    monkeypatch.setattr(components, "plan_components", lambda pipe, platform, *a, **k: real(pipe, "h200", *a, **k))
    for name in ("wan2.1-720p", "flux.1-1024"):
        options = bench_dit.planned_varlen(name)
        assert options is not None and "varlen" in options["kernels"], name
