"""The chained rows kernel's walks (rows_schedule.py), on the host: every item exactly once,
the key tiles of each block as the kernel counts them, round-robin as the persistent rows
kernel walks, LPT's balance, causal pairs' units; and what the gluon_rows_chain variant
launches with."""
import pytest

from attnkit.backends.triton.configs import launch_config
from attnkit.backends.triton.rows_schedule import KINDS, block_list, item_tiles, program_loads, schedule
from attnkit.planning.profile import Shape


def _blocks(q_lens, kv_lens):
    blocks = block_list(q_lens, kv_lens, 128)
    reqs, rows = [b[0] for b in blocks], [b[1] for b in blocks]
    return item_tiles(q_lens, kv_lens, reqs, rows, block_n=128), reqs, rows


def test_item_tiles_count_keys_to_the_last_real_row():
    tiles, reqs, rows = _blocks([300, 1], [300, 4097])
    assert list(zip(reqs, rows, tiles)) == [(1, 0, 33), (0, 256, 3), (0, 128, 2), (0, 0, 1)]
    # a prefix of 100 keys: block 0's last row is at position 227 -> 2 tiles; block 1 (rows
    # 128..199, positions 228..299) -> 3
    assert _blocks([200], [300])[0] == [3, 2]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("programs", [1, 5, 132, 10_000])
def test_every_item_once(kind, programs):
    tiles, reqs, rows = _blocks([1, 77, 300, 1500, 129, 2048], [1, 77, 800, 1500, 129, 2048])
    order, start = schedule(tiles, reqs, rows, heads=4, programs=programs, kind=kind)
    assert sorted(order) == list(range(len(tiles) * 4))
    assert start[0] == 0 and start[-1] == len(order) and start == sorted(start)
    assert len(start) - 1 == min(programs, len(order))


def test_round_robin_is_the_persistent_walk():
    tiles, reqs, rows = _blocks([2048] * 2, [2048] * 2)
    order, start = schedule(tiles, reqs, rows, heads=8, programs=7, kind="round_robin")
    assert [order[start[p]:start[p + 1]] for p in range(7)] == [list(range(p, 256, 7)) for p in range(7)]


def test_lpt_balances_what_round_robin_does_not():
    tiles, reqs, rows = _blocks([2048] * 8, [2048] * 8)
    loads = {kind: program_loads(tiles, *schedule(tiles, reqs, rows, heads=32, programs=132, kind=kind),
                                 heads=32) for kind in ("round_robin", "lpt")}
    mean = sum(loads["lpt"]) / 132
    assert max(loads["round_robin"]) / mean > 1.03        # one item more per program at the end
    assert max(loads["lpt"]) / mean < 1.006
    assert sum(loads["lpt"]) == sum(loads["round_robin"])


def test_pairs_run_block_i_then_block_n_minus_1_minus_i_of_one_head():
    tiles, reqs, rows = _blocks([512], [512])        # 4 blocks: pairs (3, 0) and (2, 1)
    order, start = schedule(tiles, reqs, rows, heads=2, programs=4, kind="pairs")
    walks = [order[start[p]:start[p + 1]] for p in range(4)]
    # block index b (rows 384, 256, 128, 0 in most-keys order) -> items b * 2 + head
    assert sorted(walks) == sorted([[0, 6], [1, 7], [2, 4], [3, 5]])
    assert all(sum(tiles[i // 2] for i in w) == 5 for w in walks)    # equal units: 4 + 1, 3 + 2


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind"):
        schedule([1], [0], [0], heads=1, programs=1, kind="random")


def test_chain_launch_config():
    shape = Shape("mha", 32, 8, 128, 128, "bf16", "bf16")
    cfg = launch_config("gluon_rows_chain", role="prefill", shape=shape, dtype="bf16", platform=None)
    assert cfg == dict(BLOCK_M=128, BLOCK_N=128, K_SLOTS=3, V_SLOTS=2, PROGRAMS_PER_SM=1,
                       SCHEDULE=dict(kind="lpt", item_cost=1.0), FUSED_WRITE=True, num_warps=12)
    d256 = Shape("mha", 32, 8, 256, 256, "bf16", "bf16")
    assert launch_config("gluon_rows_chain", role="prefill", shape=d256, dtype="bf16", platform=None) is None


def test_the_variant_hands_the_kernel_its_walk(monkeypatch):
    """The backend's gluon_rows_chain step on the host, the kernel stubbed: the walk covers every
    item once over the step's programs, the packed route's key rows are the step's own, the
    tiles are the variant's, and the K/V write is handed to the kernel instead of run first
    (the kernel itself: test_prefill_gluon_chain_gpu.py)."""
    import torch
    from factories import make_case, make_layer

    from attnkit.backends.triton import tma_path
    from attnkit.backends.triton.backend import TritonBackend
    calls = []

    def stub(q, k_rows, v_rows, out, **kw):
        calls.append((k_rows, kw))
        return out.zero_()
    monkeypatch.setattr(tma_path, "gluon_prefill_ready", lambda *a, **k: True)
    monkeypatch.setattr(tma_path, "descriptor_ready", lambda x: True)
    monkeypatch.setattr(tma_path, "prefill_gluon_chain_attention", stub)
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=128, dtype="bf16")
    case = make_case(layer, prefix_lens=[0, 0, 0], new_lens=[300, 1, 129], page_size=16, dtype="bf16")
    be = TritonBackend(extend_variant="gluon_rows_chain")
    be.forward(case.q, case.k, case.v, case.layer, case.cache, be.prepare(case.meta, case.cache))
    (k_rows, kw), = calls
    assert k_rows is case.k and kw["tiles"] == (128, 3, 2)
    k_cache, v_cache, slots = kw["write"]           # the kernel writes the step's K/V ...
    assert k_cache is case.cache.k[0] and v_cache is case.cache.v[0] and slots is case.meta.slot_mapping
    assert not case.cache.k[0].any() and not case.cache.v[0].any()    # ... the backend did not
    items = kw["block_req"].shape[0] * 8                  # 3 + 1 + 2 blocks, 8 heads
    assert items == 48 and sorted(kw["order"].tolist()) == list(range(items))
    assert kw["start"].tolist()[-1] == items and kw["start"].shape[0] == min(4, items) + 1


def test_the_gpu_tests_packed_step_and_counted_run(monkeypatch):
    """gluon_rows_cases (the Gluon rows GPU tests' helpers) on the host: the packed step's kernel
    keywords are its blocks and packed rows, and run_step through a counted (stubbed) chained
    kernel launches once, over every item."""
    from gluon_rows_cases import PACKED_LENS, count_launches, packed_step, run_step

    from attnkit.backends.triton import tma_path
    from attnkit.backends.triton.rows_schedule import block_arrays
    case, rows = packed_step(device="cpu")
    reqs, first_rows = block_arrays(PACKED_LENS, PACKED_LENS, 128)
    assert rows["block_req"].tolist() == reqs.tolist() and rows["block_m"].tolist() == first_rows.tolist()
    assert rows["query_start_loc"].tolist() == [0, 129, 130, 770, 1025]
    assert rows["key_start"].tolist() == [0, 129, 130, 770] and rows["seq_lens"].tolist() == list(PACKED_LENS)
    assert case.q.shape[0] == sum(PACKED_LENS)
    monkeypatch.setattr(tma_path, "gluon_prefill_ready", lambda *a, **k: True)
    monkeypatch.setattr(tma_path, "descriptor_ready", lambda x: True)
    monkeypatch.setattr(tma_path, "prefill_gluon_chain_attention", lambda q, k, v, out, **kw: out.zero_())
    launches = count_launches(monkeypatch, tma_path, "prefill_gluon_chain_attention",
                              lambda kwargs: sorted(kwargs["order"].tolist()))
    out = run_step(case, "gluon_rows_chain")
    assert launches == [list(range(len(reqs) * 8))] and not out.any()


def test_the_walk_is_computed_once_a_step(monkeypatch):
    """Every layer of a step runs the walk its first layer computed (tma_path.chain_walk's memo
    on the step): one schedule, the same two tensors handed to each launch; a new step, anew."""
    from gluon_rows_cases import count_launches, packed_step

    from attnkit.backends.triton import rows_schedule, tma_path
    from attnkit.backends.triton.backend import TritonBackend
    walks = []
    real = rows_schedule.schedule_arrays
    monkeypatch.setattr(rows_schedule, "schedule_arrays", lambda *a, **k: walks.append(1) or real(*a, **k))
    monkeypatch.setattr(tma_path, "gluon_prefill_ready", lambda *a, **k: True)
    monkeypatch.setattr(tma_path, "descriptor_ready", lambda x: True)
    monkeypatch.setattr(tma_path, "prefill_gluon_chain_attention", lambda q, k, v, out, **kw: out.zero_())
    launches = count_launches(monkeypatch, tma_path, "prefill_gluon_chain_attention",
                              lambda kwargs: (kwargs["order"], kwargs["start"]))
    case, _ = packed_step(device="cpu")
    be = TritonBackend(extend_variant="gluon_rows_chain")
    for _ in range(2):
        step = be.prepare(case.meta, case.cache)
        for _ in range(3):                      # three layers' forwards of one step
            be.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert len(walks) == 2 and len(launches) == 6
    assert all(w[0] is launches[0][0] and w[1] is launches[0][1] for w in launches[:3])
    assert launches[3][0] is not launches[0][0]


@pytest.mark.parametrize("kind", KINDS)
def test_the_geometry_table_is_each_slots_item(kind):
    """tma_path.chain_geometry's row of slot s: the item order[s]'s head, first step row, first
    row's position, kv_len and key tiles, as prefill_gluon_rows._geometry derives them from the
    lengths (written out here per item, a loop over the blocks)."""
    import math

    from attnkit.backends.triton.rows_schedule import block_arrays, schedule_arrays, tile_counts
    from attnkit.backends.triton.tma_path import chain_geometry
    q_lens, kv_lens, heads, bn = [1, 300, 129, 2048, 64], [1, 1000, 129, 2048, 4160], 4, 128
    reqs, rows = block_arrays(q_lens, kv_lens, 128)
    tiles = tile_counts(q_lens, kv_lens, reqs, rows, block_n=bn)
    order, _ = schedule_arrays(tiles, reqs, rows, heads=heads, programs=5, kind=kind)
    table = chain_geometry(order, q_lens, kv_lens, reqs, rows, tiles, heads=heads)
    assert table.shape == (len(order), 8) and not table[:, 5:].any()
    for s, item in enumerate(order.tolist()):
        blk, h = divmod(item, heads)
        req, m0 = int(reqs[blk]), int(rows[blk])
        pos0 = kv_lens[req] - q_lens[req] + m0
        n = math.ceil((pos0 + min(q_lens[req] - m0, 128)) / bn)
        assert table[s, :5].tolist() == [h, sum(q_lens[:req]) + m0, pos0, kv_lens[req], n]
