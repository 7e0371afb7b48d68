"""column_split's fused split merge (MERGE: the last split program of a (work tile, head block)
merges, no reduce launch; NOTES-mla.md version 9) against the float64 reference and against the
reduce kernel on tiny MLA shapes (interpreter on CPU; DeepSeek-V3 sizes in test_merge_gpu.py).
Stale cache slots hold NaN / inf; the tickets must be zero after every call."""
from types import SimpleNamespace

import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.backends.static import StaticDecode
from attnkit.backends.triton_mla import configs, decode
from attnkit.backends.triton_mla.backend import TritonMLABackend
from attnkit.errors import AttnkitError
from attnkit.kvcache.paged import PagedKVCache

DEV = "cuda" if torch.cuda.is_available() else "cpu"
ALWAYS = 256            # merge_splits that fuses every split count these cases use


def run(backend, case):
    """(output, the step's absorbed part) of one forward."""
    step = backend.prepare(case.meta, case.cache)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    return out, step.prepared["absorbed"]


def tickets_left(part) -> int:
    return sum(int(c.abs().sum()) for c in part.counters)


# heads (24 at 16 a program: a second, partial head block; 4: a partial one), column blocks,
# page size against the key tile (1 and 16 with 32-key tiles: rows gathered one by one; 16 / 32
# with 16-key tiles: a tile inside one page), splits (40: more than the short requests' tiles,
# so some splits are empty)
CASES = [
    pytest.param(16, 1, 16, 16, 3, "fp16", id="h16-vs1-p16-n16-s3-fp16"),
    pytest.param(16, 2, 1, 16, 8, "fp32", id="h16-vs2-p1-n16-s8-fp32"),
    pytest.param(24, 2, 16, 32, 8, "fp16", id="h24-vs2-p16-n32-s8-fp16"),
    pytest.param(4, 1, 32, 16, 40, "fp32", id="h4-vs1-p32-n16-s40-fp32"),
    pytest.param(16, 1, 16, 16, 1, "fp16", id="h16-vs1-p16-n16-s1-fp16"),
]


@pytest.mark.parametrize("heads, v_split, page_size, block_n, splits, dtype", CASES)
def test_fused_merge_matches_reference_and_reduce(heads, v_split, page_size, block_n, splits,
                                                  dtype, reduces):
    layer = make_layer(kind="mla", num_heads=heads, dtype=dtype, device=DEV)
    case = make_case(layer, prefix_lens=[70, 5, 130], new_lens=[1, 1, 1], page_size=page_size,
                     dtype=dtype, device=DEV, seed=heads + splits, garbage=True)
    opts = dict(variant="v2", v_split=v_split, block_h=16, block_n=block_n, num_splits=splits)
    fused, part = run(TritonMLABackend(**opts, merge_splits=ALWAYS), case)
    assert reduces == [] and tickets_left(part) == 0
    again, _ = run(TritonMLABackend(**opts, merge_splits=ALWAYS), case)
    assert torch.equal(fused, again)
    reduced, _ = run(TritonMLABackend(**opts, merge_splits=0), case)
    assert len(reduces) == (splits > 1)
    assert_close(fused, case.reference(), dtype=dtype, what="fused merge")
    assert_close(reduced, case.reference(), dtype=dtype, what="reduce")
    # the same partials and weights; only the order of the sums differs
    torch.testing.assert_close(fused, reduced, atol=1e-6 if dtype == "fp32" else 1e-3, rtol=1e-5)


def test_verify_tiles_of_several_tokens():
    """VERIFY: four causal draft tokens a request, so a work tile holds tokens x heads rows and
    the rows past a request's tokens belong to no one (not written)."""
    layer = make_layer(kind="mla", num_heads=4, dtype="fp32", device=DEV)
    case = make_case(layer, prefix_lens=[21, 40, 3], new_lens=[4, 3, 4], page_size=16,
                     dtype="fp32", device=DEV, mode=ForwardMode.VERIFY, seed=3, garbage=True)
    out, part = run(TritonMLABackend(variant="v2", num_splits=5, merge_splits=ALWAYS), case)
    assert_close(out, case.reference(), dtype="fp32", what="verify fused merge")
    assert tickets_left(part) == 0


def test_more_splits_than_the_bound_go_to_the_reduce(reduces):
    layer = make_layer(kind="mla", num_heads=16, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[70, 5], new_lens=[1, 1], page_size=16, dtype="fp16",
                     device=DEV, seed=1)
    out, part = run(TritonMLABackend(variant="v2", num_splits=4, merge_splits=3), case)
    assert len(reduces) == 1 and part.counters == []
    assert_close(out, case.reference(), dtype="fp16", what="over the bound")


def test_off_by_default_and_named_in_the_plan(reduces):
    """The switch ships off (configs.V2_MERGE_SPLITS) and is column_split's alone: its tile
    names it, the other variants' do not."""
    assert configs.V2_MERGE_SPLITS == 0
    kw = dict(heads=16, latent_width=512, new_tokens=1, fp32=False, smem_kb=227)
    assert configs.absorbed_tiles("column_split", **kw)["merge_splits"] == configs.V2_MERGE_SPLITS
    assert "merge_splits" not in configs.absorbed_tiles("whole_rows", **kw)
    assert "merge_splits" not in configs.absorbed_tiles("column_split_tma", **kw)
    shape, h200 = SimpleNamespace(heads=16, kv_lora_rank=512), SimpleNamespace(shared_memory_kb=227)
    named = configs.launch_config("column_split", role="decode", shape=shape, dtype="bf16", platform=h200)
    assert named["MERGE_SPLITS"] == configs.V2_MERGE_SPLITS
    layer = make_layer(kind="mla", num_heads=16, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[70, 5], new_lens=[1, 1], page_size=16, dtype="fp16",
                     device=DEV, seed=2)
    run(TritonMLABackend(variant="v2", num_splits=3), case)
    assert len(reduces) == 1


def test_merge_splits_option_is_a_count_ak407_otherwise():
    for bad in (-1, True, "on"):
        with pytest.raises(AttnkitError) as info:
            TritonMLABackend(merge_splits=bad)
        assert info.value.code == "AK407" and info.value.field == "merge_splits"


def test_counters_too_small_is_refused():
    """The launcher's own check of the tickets a caller hands it (the backend sizes its own)."""
    layer = make_layer(kind="mla", num_heads=16, dtype="fp16", device=DEV)
    case = make_case(layer, prefix_lens=[70, 5], new_lens=[1, 1], page_size=16, dtype="fp16",
                     device=DEV, seed=2)
    part = TritonMLABackend().prepare(case.meta, case.cache).prepared["absorbed"]
    work_req, work_tok = part.tiles(1)
    q_lat = torch.zeros(16, 2, 64, dtype=torch.float16, device=DEV)              # [H, T, L]
    q_pe = torch.zeros(2, 16, 16, dtype=torch.float16, device=DEV)               # [T, H, R]
    with pytest.raises(AttnkitError) as info:
        decode.absorbed_attention(
            q_lat, q_pe, case.cache.latent[0].view(-1, 80), part.block_tables, work_req, work_tok,
            part.query_start_loc, part.seq_lens, page_size=16, scale=1.0, kv_scale=1.0, block_t=1,
            block_h=16, block_n=16, num_splits=3, variant="v2", merge_splits=ALWAYS,
            counters=torch.zeros(1, dtype=torch.int32, device=DEV))      # 2 tiles x 1 head block
    assert info.value.code == "AK900" and info.value.field == "counters"


def test_a_static_step_reserves_its_tickets_outside_the_graph():
    """capture_plan allocates the zeroed tickets where the merge may run, so the captured
    forward allocates (and zeroes) nothing; without the merge it allocates none."""
    layer = make_layer(kind="mla", num_heads=24, dtype="fp32", device=DEV)
    cache = PagedKVCache([layer.spec], num_pages=9, page_size=16, dtype=torch.float32, device=DEV)
    static = StaticDecode(max_batch=2, max_pages=4, page_size=16, scratch_pages=[8], device=DEV)
    step = TritonMLABackend(merge_splits=8).prepare_static(static.meta(2), cache, max_seq_len=64)
    (buf,) = step.prepared["absorbed"].counters
    assert buf.numel() == 2 * 2 and int(buf.abs().sum()) == 0       # 2 tokens x 2 head blocks
    assert step.prepared["absorbed"].merge_counters(4) is buf
    plain = TritonMLABackend().prepare_static(static.meta(2), cache, max_seq_len=64)
    assert plain.prepared["absorbed"].counters == []


def test_merge_tile_holds_64_values_a_thread():
    """The merge's load round: the 16-head decode tile (4 warps) merges 128 columns x 4 splits,
    the 128-head one (8 warps) 128 columns x 1, never more than 64 fp32 values a thread."""
    assert configs.merge_tile(16, 512, 4) == (128, 4)
    assert configs.merge_tile(64, 512, 4) == (128, 1)
    assert configs.merge_tile(128, 512, 8) == (128, 1)
    for rows, warps in ((16, 4), (32, 4), (64, 4), (128, 8), (16, 8), (128, 4)):
        block_c, chunk = configs.merge_tile(rows, 512, warps)
        assert rows * block_c * chunk <= 64 * 32 * warps and 512 % block_c == 0
