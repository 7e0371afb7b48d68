"""benchmarks/bench_selection.py off the GPU: its rows, the planner's picks per row with a
synthetic profile, and the table it renders from its JSON rows."""
import pathlib
import sys

from profile_fakes import MHA_H200, entry, profile, write

from attnkit.hardware import get_preset

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_selection as sel  # noqa: E402


def test_rows_cover_the_three_benchmarks():
    assert len(sel.TRITON_ROWS) == 19 and len(sel.MLA_ROWS) == 22 and len(sel.DCA_ROWS) == 2
    for script, phase, batch, new, context, key in sel.TRITON_ROWS + sel.MLA_ROWS:
        assert new <= context and (phase == "prefill" or new == 1), (script, phase, new, context)
        shape = sel.shape_of(key)
        assert shape.kind == ("mla" if script == "bench_mla" else "mha")


def test_the_planner_picks_per_shape_and_for_every_shape(tmp_path):
    rows = MHA_H200 + [entry("triton", "prefill", 365, new=2048, context=34816),
                       entry("sdpa", "prefill", 340, new=2048, context=34816)]
    path = write(tmp_path / "h200.json", profile(rows))
    from attnkit.tune import grid
    shape = sel.shape_of("d128")
    model = sel.model_of(shape, "row")
    extend = grid.bucket(shape, "prefill", 1, 2048, 34816)
    (pick, why), (whole, _) = sel.picks(model, get_preset("h200"), "prefill", extend, path)
    # the profile measured no variant of triton: its table lists the declared order, paged first
    assert pick == "triton/paged" and why.startswith("prefill: triton, 365 vs 340 TFLOP/s (sdpa)")
    assert whole == "triton/paged"               # the plan's extend backend runs this row
    prefill = grid.bucket(shape, "prefill", 1, 16384, 16384)
    (pick, _), (whole, why) = sel.picks(model, get_preset("h200"), "prefill", prefill, path)
    assert pick == whole == "sdpa" and why.startswith("prefill: sdpa, 623 vs 470 TFLOP/s (triton)")
    # one prefill backend (the profile does not separate the workloads): it runs both rows
    one = write(tmp_path / "one.json", profile(MHA_H200 + [entry("triton", "prefill", 300, new=2048, context=34816),
                                                           entry("sdpa", "prefill", 340, new=2048, context=34816)]))
    assert sel.picks(model, get_preset("h200"), "prefill", extend, one)[1][0] == "sdpa"


def test_the_table_says_which_rows_miss_the_target():
    rows = [dict(script="bench_triton", phase="prefill", batch=1, new=2048, context=34816, shape="d128",
                 bucket="new=2048 prefix=32768", shape_label="32/8 heads, d128, bf16", pick="sdpa", whole="sdpa",
                 fastest="triton", unit="TFLOP/s", rates={"triton": 365.0, "sdpa": 340.0, "torch_native": None},
                 status={"triton": "ok", "sdpa": "ok", "torch_native": "skipped: out of memory"},
                 ratio=340 / 365, whole_ratio=340 / 365),
            dict(script="bench_dual_chunk", phase="decode", batch=1, new=1, context=131073, shape="dca",
                 pick="dual_chunk", whole="dual_chunk", fastest="dual_chunk", ratio=1.0, note="only dual_chunk")]
    text = sel.table(rows)
    assert "| 0.93 | **no** |" in text and "torch_native skipped (out of memory)" in text
    assert text.endswith("1 of 2 rows within 5 % of the fastest valid (backend, variant).")


def test_a_row_is_measured_at_the_page_size_the_plan_fills():
    # MLA at 16 heads: the plan fills 16-key pages (the default), and reads its kernel table
    # there; bench_selection measured those rows at 64 (bench_mla's page), comparing kernels
    # at a page size the plan does not run (2026-12-02: whole_rows vs column_split, 0.91)
    shape = sel.shape_of("mla16")
    model = sel.model_of(shape, "row")
    got = sel.plan_page(model, get_preset("h200"), "decode", shape, 1, 1, 1024, None)
    from attnkit.planning.solver import plan
    filled = plan(model, get_preset("h200"), {"dtype": "bf16"},
                  workload={"decode": {"batch": 1, "new": 1, "context": 1024}}).run.page_size
    assert got == filled == 16
    # where the plan fills 64 (a 128-head MLA model: ws needs whole 64-key pages) the row follows
    big = sel.shape_of("mla128")
    assert sel.plan_page(sel.model_of(big, "row"), get_preset("h200"), "decode", big, 128, 1, 4096, None) == 64
