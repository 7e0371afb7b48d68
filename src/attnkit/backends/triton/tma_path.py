"""When an extend step runs the tensor-descriptor kernel (prefill_tma.py), and where its K/V
rows come from.

Two routes:
- "direct": one request, no cached prefix, K/V cache of q's dtype: the kernel reads the
  step's k / v inputs (the cache write still happens; rows past the request are past the
  descriptor's end and read as zeros);
- "rows": anything else it serves (several requests, a cached prefix, fp8 pages): the gather
  kernel (gather_rows.py) first copies every key from the cache into a padded dense buffer.
The copy moves 2 x (keys x H_kv x (D + DV)) elements. The Gluon rows kernel
(prefill_gluon_rows.py, the gluon_rows variants) takes a third: "packed", a fresh prefill of
any number of requests read from the step's k / v in place (gluon_rows_route). Whether a step
runs these kernels at all is the plan's choice (its kernel table, measured per bucket by attnkit
tune: the "tma", "gluon" and "gluon_rows" variants); this module only says which route a step
takes and stages its rows.
"""
from __future__ import annotations

import numpy as np
import torch

from attnkit.backends._triton import interpreting, padded_dim
from attnkit.backends.triton import configs
from attnkit.backends.triton.configs import gluon_rows_config, tma_config
from attnkit.backends.triton.gather_rows import gather_rows
from attnkit.errors import fail
from attnkit.backends.triton.prefill_tma import descriptor_ready, prefill_tma_attention

try:        # Gluon's Hopper API as Triton 3.6 spells it (GLUON=True runs it there only)
    from attnkit.backends.triton.prefill_gluon import gluon_prefill_ready, prefill_gluon_attention
    from attnkit.backends.triton.prefill_gluon_rows import prefill_gluon_rows_attention
    from attnkit.backends.triton.prefill_gluon_chain import (chain_write_ok,
                                                             prefill_gluon_chain_attention)
except ImportError:         # pragma: no cover - depends on the installed Triton
    def gluon_prefill_ready(*args, **kwargs) -> bool:
        return False

    def chain_write_ok(*args, **kwargs) -> bool:
        return False
    prefill_gluon_attention = prefill_gluon_rows_attention = prefill_gluon_chain_attention = None

PAD = 128                    # rows of a request's buffer segment: a multiple of every BLOCK_N
MAX_ROWS_BYTES = 1 << 30     # memory, not speed: no staging buffer of more than 1 GiB a step
TMA_ONLY_KEYS = ("WS", "FUSED_SCALE", "GLUON")   # extend_config keys the paged kernels do not take


def merged_tma_config(head_dim: int, override: dict, *, interpret: bool) -> dict:
    """tma_config's launch configuration with the caller's extend_config over it."""
    return tma_config(head_dim, interpret=interpret) | override


def check_tma_override(config: dict) -> None:
    """Refuse an extend config the tma kernel computes wrongly. H200 sweep 2026-12-01, Triton
    3.6: every warp-specialised tile with 3 stages returned NaN (d64 and d128, prefill and
    extend); 2 stages were right. The kernel's switches (WS, FUSED_SCALE, GLUON) must be
    booleans."""
    for key in TMA_ONLY_KEYS:
        if key in config and not isinstance(config[key], bool):
            fail("AK407", f"extend_config[{key!r}] must be True or False, got {config[key]!r}",
                 field=f"extend_config[{key!r}]", expected="bool", actual=repr(config[key]))
    if config.get("WS") and config.get("num_stages", 1) > 2:
        fail("AK407", "the tma extend kernel with warp specialisation (WS=True) and more than 2 "
                      "stages returned wrong results on the H200 (Triton 3.6); use num_stages <= 2 "
                      "or WS=False", field="extend_config",
             expected="WS=False, or num_stages <= 2", actual=dict(config))


def tma_route(q, k, v, layer, cache, meta) -> str | None:
    """"direct", "rows", or None where the kernel does not serve the layer / step (then the
    backend runs the next variant the plan lists)."""
    spec = layer.spec
    lid = spec.layer_id
    served = (q.dtype in (torch.float16, torch.bfloat16) and spec.head_dim == spec.value_dim
              and padded_dim(spec.head_dim) == spec.head_dim and spec.head_dim <= 256
              and getattr(spec, "attention_chunk", None) is None)
    if not served:
        return None
    if (meta.num_reqs == 1 and not any(meta.prefix_lens_cpu) and not cache.is_fp8
            and k.dtype == q.dtype == cache.k[lid].dtype == cache.v[lid].dtype
            and descriptor_ready(k) and descriptor_ready(v)):
        return "direct"
    rows = sum(-(-n // PAD) * PAD for n in meta.seq_lens_cpu)
    moved = 2 * rows * spec.num_kv_heads * (spec.head_dim + spec.value_dim) * q.element_size()
    return "rows" if moved <= MAX_ROWS_BYTES else None


def gluon_rows_route(q, k, v, layer, cache, meta) -> str | None:
    """Where the Gluon rows kernel (prefill_gluon_rows.py: the gluon_rows variants) reads a
    step's keys: "packed", a fresh prefill of any number of requests whose k / v inputs back
    descriptors as they are (request r's keys are its own new rows: no copy); "rows", the
    gathered copy (tma_route's); None where it does not serve the layer or step: not causal, a
    window, softcap, sinks, chunked attention, an fp8 cache or one of another dtype (its
    declared envelope: 16-bit caches of the compute dtype), a head dim it has no tiles for, not
    sm_90 with Triton 3.6."""
    spec = layer.spec
    lid = spec.layer_id
    if (not spec.causal or getattr(spec, "attention_chunk", None) is not None or cache.is_fp8
            or not cache.k[lid].dtype == cache.v[lid].dtype == q.dtype
            or not gluon_prefill_ready(q, k, v, q, causal=True, window=spec.sliding_window,
                                       softcap=spec.logit_softcap,
                                       sinks=layer.sinks if spec.sinks else None,
                                       qk_scale=spec.softmax_scale)):
        return None
    if (not any(meta.prefix_lens_cpu) and k.dtype == q.dtype and descriptor_ready(k)
            and descriptor_ready(v)):
        return "packed"
    return "rows" if tma_route(q, k, v, layer, cache, meta) == "rows" else None


def chain_fuses_write(q, k, v, layer, cache, meta) -> bool:
    """Whether gluon_rows_chain writes this step's K/V into the cache itself (its configuration's
    FUSED_WRITE, on the packed route, pages the kernel can store: chain_write_ok); else the
    backend writes them first, as for every other variant."""
    cfg = gluon_rows_config(layer.spec.head_dim, persistent=True, chain=True)
    lid = layer.spec.layer_id
    return (cfg is not None and cfg["FUSED_WRITE"]
            and gluon_rows_route(q, k, v, layer, cache, meta) == "packed"
            and chain_write_ok(k, v, cache.k[lid], cache.v[lid], block_n=cfg["BLOCK_N"]))


def run_gluon_rows(route: str, q, k, v, out, cache, layer_id: int, plan, *, block_req, block_m,
                   qk_scale, v_scale, tiles, programs, schedule=None, write=None):
    """The Gluon rows kernel over ``route``'s keys (gluon_rows_route); tiles: (BN, K slots,
    V slots); programs: its grid (None: one program a (query block, head)); schedule
    (gluon_rows_chain: rows_schedule.schedule's kind / item_cost): the chained kernel
    (prefill_gluon_chain.py) over that walk of ``programs`` programs; write (its packed route,
    chain_fuses_write): (k_cache, v_cache, slot_mapping), the step's K/V written by the kernel."""
    if not descriptor_ready(q):
        q = q.contiguous()
    k_rows, v_rows, key_start = staged_rows(route == "packed", q, k, v, cache, layer_id, plan)
    if schedule is not None:
        order, start, geo = chain_walk(plan.rows, plan.meta, q.shape[1], programs, tiles[0],
                                       schedule, q.device, geometry=configs.GLUON_CHAIN_GEO)
        return prefill_gluon_chain_attention(q, k_rows, v_rows, out, block_req=block_req,
                                             block_m=block_m, query_start_loc=plan.query_start_loc,
                                             key_start=key_start, seq_lens=plan.seq_lens,
                                             order=order, start=start, qk_scale=qk_scale,
                                             v_scale=v_scale, tiles=tiles, write=write,
                                             geo=geo,
                                             store_tma=configs.GLUON_CHAIN_STORE_TMA)
    return prefill_gluon_rows_attention(q, k_rows, v_rows, out, block_req=block_req,
                                        block_m=block_m, query_start_loc=plan.query_start_loc,
                                        key_start=key_start, seq_lens=plan.seq_lens,
                                        qk_scale=qk_scale, v_scale=v_scale, tiles=tiles,
                                        programs=programs)


def chain_walk(memo: dict, meta, heads: int, programs: int, block_n: int, schedule: dict,
               device, *, geometry: bool = False):
    """(order [items], start [programs + 1], geo [items, 8] or None) int32 of the chained
    kernel's walk, once a step (rows_schedule.schedule over backend.query_blocks' blocks, from
    the host lengths; geo, only where ``geometry`` asks: chain_geometry's rows in order's
    slots)."""
    from attnkit.backends.triton.rows_schedule import block_arrays, schedule_arrays, tile_counts
    key = ("chain", heads, programs, block_n, tuple(sorted(schedule.items())), geometry)
    if key not in memo:
        q_lens, kv_lens = meta.query_lens_cpu, meta.seq_lens_cpu
        reqs, rows = block_arrays(q_lens, kv_lens, 128)
        tiles = tile_counts(q_lens, kv_lens, reqs, rows, block_n=block_n)
        order, start = schedule_arrays(tiles, reqs, rows, heads=heads, programs=programs,
                                       **schedule)
        geo = chain_geometry(order, q_lens, kv_lens, reqs, rows, tiles, heads=heads) if geometry else None
        memo[key] = tuple(None if x is None else _to_device(x, device) for x in (order, start, geo))
    return memo[key]


def chain_geometry(order, q_lens, kv_lens, block_req, block_m, block_tiles, *, heads: int):
    """[items, 8] int64: slot s's item (order[s] = block * heads + head) as the chained
    kernel's compute partitions use it: head, first step row, the first row's position, the
    request's kv_len, key tiles (prefill_gluon_rows._geometry's values; columns 5-7 zero), so
    an item's geometry is one row of independent loads rather than three dependent rounds."""
    order = np.asarray(order, dtype=np.int64)
    q, kv = np.asarray(q_lens, dtype=np.int64), np.asarray(kv_lens, dtype=np.int64)
    blk, head = order // heads, order % heads
    req, m0 = np.asarray(block_req, dtype=np.int64)[blk], np.asarray(block_m, dtype=np.int64)[blk]
    q_start = np.concatenate([[0], np.cumsum(q)])
    geo = np.zeros((len(order), 8), dtype=np.int64)
    geo[:, 0], geo[:, 1] = head, q_start[req] + m0
    geo[:, 2], geo[:, 3] = kv[req] - q[req] + m0, kv[req]
    geo[:, 4] = np.asarray(block_tiles, dtype=np.int64)[blk]
    return geo


def _to_device(host, device) -> torch.Tensor:
    """A host int array as int32 on ``device`` (a plain copy, as the GPU tests of 2026-12-02 ran
    it; an asynchronous copy from pinned memory was written and not run on a GPU, so not kept)."""
    return torch.from_numpy(host).to(torch.int32).to(device)


def staged_rows(in_place: bool, q, k, v, cache, layer_id: int, plan):
    """(k_rows, v_rows, key_start [B] int32) a rows kernel reads: the step's own k / v
    (``in_place``: the "direct" / "packed" routes; request r's keys from its first new row), or
    every key gathered from the cache into the padded buffer (the "rows" route, row_layout)."""
    if in_place:
        return k, v, plan.query_start_loc[:-1]
    key_start, total, longest = row_layout(plan.rows, plan.meta, q.device)
    k_rows, v_rows = gather_rows(cache.k[layer_id], cache.v[layer_id],
                                 block_tables=plan.block_tables, key_start=key_start,
                                 seq_lens=plan.seq_lens, total_rows=total, longest=longest,
                                 pad=PAD, dtype=q.dtype)
    return k_rows, v_rows, key_start


def row_layout(memo: dict, meta, device) -> tuple[torch.Tensor, int, int]:
    """(key_start [B] int32, total rows, longest segment) of the padded buffer, once a step."""
    if "tma_rows" not in memo:
        lens = [-(-n // PAD) * PAD for n in meta.seq_lens_cpu]
        starts = [0]
        for n in lens[:-1]:
            starts.append(starts[-1] + n)
        memo["tma_rows"] = (torch.tensor(starts, dtype=torch.int32, device=device), sum(lens),
                            max(lens, default=0))
    return memo["tma_rows"]


def run_tma_extend(route: str, q, k, v, out, cache, layer_id: int, plan, *, config, block_req,
                   block_m, **kernel_args):
    """Stage the K/V rows for ``route`` and run the kernel; kernel_args as
    prefill_tma_attention takes them (scales, softcap, window, sinks, causal)."""
    if not descriptor_ready(q):
        q = q.contiguous()
    if route == "direct" and config.get("GLUON") and gluon_prefill_ready(
            q, k, v, out, causal=kernel_args["causal"], window=kernel_args["window"],
            softcap=kernel_args["softcap"], sinks=kernel_args["sinks"],
            qk_scale=kernel_args["qk_scale"]):
        return prefill_gluon_attention(q, k, v, out, qk_scale=kernel_args["qk_scale"],
                                       v_scale=kernel_args["v_scale"], causal=kernel_args["causal"])
    k_rows, v_rows, key_start = staged_rows(route == "direct", q, k, v, cache, layer_id, plan)
    return prefill_tma_attention(q, k_rows, v_rows, out, block_req=block_req, block_m=block_m,
                                 query_start_loc=plan.query_start_loc, key_start=key_start,
                                 seq_lens=plan.seq_lens, config=config, **kernel_args)
