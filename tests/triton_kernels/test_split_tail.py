"""The persistent Gluon kernel's split tail (split_tail.py): the schedule deals every key tile
of the tail to exactly one program, evenly, and the merge kernel (the Triton interpreter here)
turns pieces' unnormalised states into the attention output. The pieces are made here in
float64 by the formula (an oracle independent of the kernels), laid out as the Gluon kernel's
_store_piece writes them; the Gluon kernel itself runs on the GPU only (test at the end)."""
from __future__ import annotations

import math

import pytest
import torch

from attnkit.backends.triton.split_tail import merge_tail, tail_schedule, workspace


@pytest.mark.parametrize("items, n_tiles, programs", [(864, 36, 132), (72, 36, 132), (5, 3, 132),
                                                      (40, 591, 132), (264, 36, 132), (7, 1, 4)])
def test_the_schedule_deals_each_tail_tile_once_and_evenly(items, n_tiles, programs):
    full, units, pieces = tail_schedule(items, n_tiles, programs)
    assert full % programs == 0 and 0 <= items - full < programs
    tail = (items - full) * n_tiles
    if tail == 0:
        assert units == 0
        return
    seen = []
    per_program = []
    for p in range(programs):
        lo, hi = p * units, min(p * units + units, tail)
        per_program.append(max(0, hi - lo))
        seen += range(lo, hi)
    assert seen == list(range(tail))
    assert max(per_program) - min(x for x in per_program if x) <= units   # nobody holds two shares
    assert max(per_program) == units == math.ceil(tail / programs)
    for r in range(items - full):          # each tail item's pieces fit its slots
        first, last = (r * n_tiles) // units, ((r + 1) * n_tiles - 1) // units
        assert last - first + 1 <= pieces


def _pieces(q, k, v, *, blocks, heads, full, units, pieces, n_tiles, bn, scale, head_major):
    """Float64 pieces by the formula, in _store_piece's layout."""
    T, _, D = q.shape
    tail = blocks * heads - full
    work = torch.full((tail * pieces * 128, D), float("nan"), dtype=torch.float64)
    ml = torch.full((tail * pieces, 2, 128), float("nan"), dtype=torch.float64)
    log2e = 1 / math.log(2)
    for r in range(tail):
        i = full + r
        blk, h = (i % blocks, i // blocks) if head_major else (blocks - 1 - i // heads, i % heads)
        qb = torch.zeros(128, D, dtype=torch.float64)
        rows = slice(blk * 128, min(blk * 128 + 128, T))
        qb[: rows.stop - rows.start] = q[rows, h].double()
        first = (r * n_tiles) // units
        for p in range(first, ((r + 1) * n_tiles - 1) // units + 1):
            lo_u, hi_u = max(p * units, r * n_tiles), min(p * units + units, (r + 1) * n_tiles)
            keys = slice((lo_u - r * n_tiles) * bn, min((hi_u - r * n_tiles) * bn, T))
            s = qb @ k[keys, h].double().T * scale * log2e
            m = s.max(dim=1).values
            pr = torch.exp2(s - m[:, None])
            slot = r * pieces + p - first
            work[slot * 128:(slot + 1) * 128] = pr @ v[keys, h].double()
            ml[slot, 0], ml[slot, 1] = m, pr.sum(dim=1)
    return work.float(), ml.float()


@pytest.mark.interpreter
@pytest.mark.parametrize("head_major", [False, True], ids=["block-major", "head-major"])
def test_the_merge_gives_attention_over_all_keys(head_major):
    T, heads, D, bn, programs = 300, 3, 32, 64, 4          # 3 blocks x 3 heads = 9 items on 4
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(T, heads, D, generator=gen, dtype=torch.float16) for _ in range(3))
    blocks, n_tiles = -(-T // 128), -(-T // bn)
    full, units, pieces = tail_schedule(blocks * heads, n_tiles, programs)
    assert (full, units) == (8, 2) and pieces >= 2         # a tail of 1 item cut in 3 pieces
    work, ml = _pieces(q, k, v, blocks=blocks, heads=heads, full=full, units=units, pieces=pieces,
                       n_tiles=n_tiles, bn=bn, scale=D ** -0.5, head_major=head_major)
    out = torch.full((T, heads, D), float("nan"), dtype=torch.float16)
    merge_tail(work, ml, out, full=full, num_blocks=blocks, n_tiles=n_tiles, units=units,
               max_pieces=pieces, v_scale=1.0, head_major=head_major)
    i = full                                              # the one tail item
    blk, h = (i % blocks, i // blocks) if head_major else (blocks - 1 - i // heads, i % heads)
    rows = slice(blk * 128, min(blk * 128 + 128, T))
    ref = torch.softmax(q[rows, h].double() @ k[:, h].double().T * D ** -0.5, dim=1) @ v[:, h].double()
    torch.testing.assert_close(out[rows, h].double(), ref, atol=2e-3, rtol=1e-2)
    others = torch.ones(T, heads, dtype=torch.bool)
    others[rows, h] = False
    assert out[others].isnan().all(), "the merge wrote rows of whole items"
    wrong = out[rows, h].double() * 1.01                   # 1 % off fails the same tolerance
    with pytest.raises(AssertionError):
        torch.testing.assert_close(wrong, ref, atol=2e-3, rtol=1e-3)


def test_the_workspace_has_a_slot_per_piece():
    work, ml = workspace(72, 3, 128, "cpu")
    assert work.shape == (72 * 3 * 128, 128) and ml.shape == (72 * 3, 2, 128) and work.dtype == torch.float32


@pytest.mark.gpu
@pytest.mark.parametrize("tokens, heads", [(4608, 24), (1000, 5), (300, 3), (4608 + 77, 24)])
def test_the_split_tail_kernel_matches_flash_sdpa(tokens, heads):
    """The Gluon persistent kernel with split_tail against SDPA at FLUX.1's shape (864 items on
    132 SMs: a 72-item tail), a ragged length and fewer items than SMs."""
    import torch.nn.functional as F

    from attnkit.backends._triton import LOG2E
    from attnkit.backends.triton.prefill_gluon import gluon_prefill_ready
    from attnkit.backends.triton.prefill_gluon_persistent import prefill_gluon_persistent_attention

    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(tokens, heads, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))
    out = torch.full_like(q, float("nan"))
    scale = 128 ** -0.5
    if not gluon_prefill_ready(q, k, v, out, causal=False, window=None, softcap=None, sinks=None, qk_scale=scale):
        pytest.skip("the Gluon kernel does not run here")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for head_major in (False, True):
        prefill_gluon_persistent_attention(q, k, v, out, qk_scale=scale * LOG2E, v_scale=1.0, programs=sms,
                                           causal=False, head_major=head_major, split_tail=True)
        ref = F.scaled_dot_product_attention(*(t.transpose(0, 1) for t in (q, k, v))).transpose(0, 1)
        err = float((out.float() - ref.float()).norm() / ref.float().norm())
        assert err < 1e-2, (tokens, heads, head_major, err)
