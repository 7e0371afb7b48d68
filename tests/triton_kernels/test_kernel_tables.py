"""The plan's kernel tables decide which triton variant runs (registry/kernels.py): per step the
first variant listed for the nearest measured bucket that can take the step; without a table,
the declaration's order. No batch-size threshold in the backend (STYLE.md 16)."""
import pytest

from factories import make_case, make_layer

from attnkit.backends.triton.backend import TritonBackend
from attnkit.errors import AttnkitError
from attnkit.registry.kernels import KernelRate, KernelRow, KernelTable, step_point


def _decode_table():
    rate = lambda v, r: KernelRate(v, r, "GB/s")  # noqa: E731
    return KernelTable("decode", rows=(
        KernelRow(1, 1, 4096, (rate("split_write", 300.0), rate("split", 250.0))),
        KernelRow(64, 1, 4096, (rate("split", 4000.0), rate("split_write", 3000.0)))),
        fallback=("split", "split_write", "split_merge"))


def test_nearest_bucket_lists_its_variants_fastest_first_then_the_rest():
    table = _decode_table()
    assert table.candidates(1, 1, 1000) == ("split_write", "split", "split_merge")
    assert table.candidates(48, 1, 8000) == ("split", "split_write", "split_merge")
    assert KernelTable("decode", fallback=("split",)).candidates(7, 1, 9) == ("split",)


def test_step_point_is_the_mean_request():
    assert step_point([1, 1, 1, 1], [100, 300, 200, 200]) == (4, 1, 200)
    assert step_point([1, 1], [5, 9], max_kv=4096) == (2, 1, 4096)
    assert step_point([16, 48], [16, 80]) == (2, 32, 48)


@pytest.mark.parametrize("batch,expected", [(1, "split_write"), (64, "split")])
def test_backend_runs_the_plan_variant_for_the_step(batch, expected):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[4095] * batch, new_lens=[1] * batch, page_size=16, dtype="fp16")
    backend = TritonBackend(kernels={"decode": _decode_table()})
    step = backend.prepare(case.meta, case.cache)
    assert step.prepared.variants[0] == expected


def test_a_variant_that_cannot_take_the_step_yields_to_the_next_listed():
    """split_write writes the new K/V itself; into an fp8 cache it cannot: split runs."""
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[40], new_lens=[1], page_size=16, dtype="fp16", kv_dtype="fp8_e4m3")
    backend = TritonBackend(kernels={"decode": _decode_table()})
    step = backend.prepare(case.meta, case.cache)
    assert step.prepared.variants[0] == "split_write"
    assert backend._runnable(step.prepared, case.q, case.k, case.v, case.layer, case.cache, case.meta) == "split"


def test_without_a_table_the_declaration_order_runs():
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[0], new_lens=[5], page_size=4, dtype="fp16")
    assert TritonBackend().prepare(case.meta, case.cache).prepared.variants[0] == "paged"


def test_a_table_naming_an_undeclared_variant_is_refused():
    with pytest.raises(AttnkitError) as info:
        TritonBackend(kernels={"decode": KernelTable.only("decode", "tma")})
    assert info.value.code == "AK407" and info.value.actual == ["tma"]
    with pytest.raises(AttnkitError):
        TritonBackend(kernels={"decode": "split"})


def test_a_variant_asked_for_by_option_is_the_only_one_listed():
    backend = TritonBackend(decode_variant="fused_write", extend_variant="tma")
    assert backend.kernels["decode"].fallback == ("split_write",)
    assert backend.kernels["prefill"].fallback == backend.kernels["extend"].fallback == ("tma",)
