"""The chained rows kernel (prefill_gluon_chain.py; the gluon_rows_chain variant) on an sm_90 GPU
against the float64 reference: batched fresh prefills of unequal lengths (the step's K/V read
in place), steps over cached prefixes (a gathered copy) with NaN / inf in every slot no request
owns, GQA / MQA, fp16, d64 / d128, every walk (rows_schedule.py) at 1 to more-than-items
programs, and that the chained kernel ran (no silent fallback)."""
import pytest
import torch
from factories import assert_close, make_case, make_layer
from gluon_rows_cases import PACKED_LENS, count_launches, needs_gluon_rows as needs, packed_step, run_step

from attnkit.backends.triton import tma_path
from attnkit.backends.triton.rows_schedule import KINDS, block_arrays, schedule, tile_counts

pytestmark = pytest.mark.gpu


@pytest.fixture
def launches(monkeypatch):
    return count_launches(monkeypatch, tma_path, "prefill_gluon_chain_attention",
                          lambda kwargs: kwargs["start"].shape[0] - 1)


def _run(case):
    return run_step(case, "gluon_rows_chain")


@needs
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("prefix_lens, new_lens", [
    ([0] * 6, [1, 77, 300, 1500, 129, 2048]),            # batched fresh: the packed route
    ([500, 0, 1000, 37, 4096], [77, 300, 1, 200, 129]),  # cached prefixes: the gathered route
], ids=["fresh", "prefix"])
def test_batched_steps_match_reference(dim, prefix_lens, new_lens, launches):
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=dim, dtype="bf16", device="cuda")
    case = make_case(layer, prefix_lens=prefix_lens, new_lens=new_lens, page_size=16, dtype="bf16",
                     device="cuda", q_scale=4.0, garbage=True, seed=dim)
    out = _run(case)
    assert launches, "gluon_rows_chain did not run the chained kernel"
    assert torch.isfinite(out).all()
    assert_close(out, case.reference(), dtype="bf16", what=f"chain d{dim} {prefix_lens} {new_lens}")


@needs
def test_fp16_gqa_and_mqa(launches):
    for heads, kv_heads, dtype in ((4, 4, "fp16"), (32, 4, "bf16"), (8, 1, "fp16")):
        layer = make_layer(num_heads=heads, num_kv_heads=kv_heads, head_dim=128, dtype=dtype, device="cuda")
        case = make_case(layer, prefix_lens=[0, 300, 0], new_lens=[700, 130, 1], page_size=16,
                         dtype=dtype, device="cuda", q_scale=4.0, garbage=True, seed=heads)
        launches.clear()
        assert_close(_run(case), case.reference(), dtype=dtype, what=f"chain {heads}/{kv_heads} {dtype}")
        assert launches, f"gluon_rows_chain did not run ({heads}/{kv_heads} heads)"


@needs
def test_d256_is_not_served_and_runs_another_kernel(launches):
    """Two 64 KB Q buffers leave d256 no ring: the variant does not take the step (right, and
    no chained launch)."""
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=256, dtype="bf16", device="cuda")
    case = make_case(layer, prefix_lens=[0, 0], new_lens=[300, 129], page_size=16, dtype="bf16",
                     device="cuda", q_scale=4.0)
    assert_close(_run(case), case.reference(), dtype="bf16", what="chain d256")
    assert not launches


@needs
@pytest.mark.parametrize("geo,store", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["chain", "geo", "tmastore", "geo-tmastore"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("programs", [1, 3, 7, 132, 10_000])
def test_every_walk_over_packed_rows(kind, programs, geo, store):
    """The kernel called directly on a packed fresh step: one program walking every item, a
    few programs walking many (Q buffers, ring slots and turns chained across requests), more
    programs than items (empty programs); geo: the compute partitions' geometry from the host's
    table (tma_path.chain_geometry); store: full 64-row blocks stored by TMA through the Q
    buffers (PACKED_LENS has partial blocks too). The output starts as NaN: a row a walk skips
    fails."""
    from attnkit.backends.triton.prefill_gluon_chain import prefill_gluon_chain_attention
    case, rows = packed_step(device="cuda")
    reqs, first_rows = block_arrays(PACKED_LENS, PACKED_LENS, 128)
    tiles = tile_counts(PACKED_LENS, PACKED_LENS, reqs, first_rows, block_n=128)
    order, start = schedule(tiles, reqs, first_rows, heads=8, programs=programs, kind=kind)
    i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device="cuda")  # noqa: E731
    table = tma_path.chain_geometry(order, PACKED_LENS, PACKED_LENS, reqs, first_rows, tiles,
                                    heads=8)
    out = torch.full_like(case.q, float("nan"))
    prefill_gluon_chain_attention(case.q, case.k, case.v, out, order=i32(order), start=i32(start),
                                  tiles=(128, 3, 2), geo=i32(table.tolist()) if geo else None,
                                  store_tma=store, **rows)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "a row was not written"
    assert_close(out.reshape(out.shape[0], -1), case.reference(), dtype="bf16",
                 what=f"{kind} programs={programs}")


@needs
@pytest.mark.parametrize("page", [8, 16, 64, 1])
def test_the_fused_write_leaves_the_cache_as_the_write_kernel_does(page, launches):
    """A packed fresh step: the kernel's own K/V write (whole pages by TMA, a last partial
    page's rows copied; pages of 1 are not its: the backend writes first) leaves every slot of
    the cache, the NaN / inf of the slots no request owns included, bit for bit as
    _triton.write_kv does, and the output right."""
    from attnkit.backends._triton import write_kv
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=128, dtype="bf16", device="cuda")
    new = [1, 77, 300, 129, 1024, 16]
    mine, theirs = (make_case(layer, prefix_lens=[0] * 6, new_lens=new, page_size=page, dtype="bf16",
                              device="cuda", q_scale=4.0, garbage=True, seed=page) for _ in range(2))
    out = _run(mine)
    assert launches
    write_kv(theirs.cache, 0, theirs.meta.slot_mapping, theirs.k, theirs.v)
    torch.cuda.synchronize()
    for name in ("k", "v"):
        torch.testing.assert_close(getattr(mine.cache, name)[0], getattr(theirs.cache, name)[0],
                                   rtol=0, atol=0, equal_nan=True, msg=f"cache.{name} page {page}")
    assert_close(out, mine.reference(), dtype="bf16", what=f"chain fused write page {page}")


@needs
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("prefix_lens, new_lens", [
    ([0] * 6, [1, 77, 300, 1500, 129, 2048]),            # batched fresh: the packed route
    ([700, 0, 31, 4000], [300, 129, 1, 64]),             # cached prefixes: the gathered copy
])
@pytest.mark.parametrize("switch", ["GLUON_CHAIN_GEO", "GLUON_CHAIN_STORE_TMA"])
def test_the_chain_switches_give_the_reference(dim, prefix_lens, new_lens, switch, launches,
                                               monkeypatch):
    """configs.GLUON_CHAIN_GEO (the step's walk and its table, memoised together) and
    GLUON_CHAIN_STORE_TMA through the backend: the same reference on poisoned unowned slots,
    and the chained kernel ran."""
    from attnkit.backends.triton import configs
    monkeypatch.setattr(configs, switch, True)
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=dim, dtype="bf16", device="cuda")
    case = make_case(layer, prefix_lens=prefix_lens, new_lens=new_lens, page_size=16,
                     dtype="bf16", device="cuda", q_scale=4.0, garbage=True, seed=dim)
    assert_close(_run(case), case.reference(), dtype="bf16", what=f"chain {switch} d{dim}")
    assert launches
