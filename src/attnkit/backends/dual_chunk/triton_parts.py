"""Dual chunk attention on attnkit's Triton kernels (CUDA; the interpreter in CPU tests).

The page size divides the chunk length cl, so every part's key range (parts.part_ranges)
starts on a page boundary. A part of one chunk group (the new rows of one request that lie
in one chunk) is then ordinary paged attention over a *pseudo-request*: its block-table row
is the request's row shifted by the range's first page, its key count the range's length.
- EXTEND / MIXED: one extend-kernel launch per part (intra causal, successor and inter
  unmasked) over all groups that have that part, each writing float32 (out, lse), folded
  into the running result by log-sum-exp as it finishes (parts.fold_part).
- DECODE: one group per request; the three parts go to the decode kernel's part axis (each
  part as many splits as its longest range needs), its split reduction merges every split of
  every part, and the kernel writes the new K/V itself where the triton backend's decode
  would: a decode step is two launches, as for plain attention.
Per step, the groups and pseudo block tables are built once per chunk length (every layer of
a model shares one) and reused by every layer.
Static (captured) decode steps (``StaticGroups``): the three parts' key counts and shifted
tables are computed on the device from the step's seq_lens and block tables, into buffers
sized for the longest KV a refill may hold, and recomputed in place by ``refill``; split
counts are sized for that longest KV too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnkit.backends.dual_chunk.parts import chunk_groups, fold_part, part_ranges
from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.backends._triton import interpreting, kernel_scales, padded_dim, write_kv
from attnkit.backends.triton.backend import query_blocks, sm_count, split_buffers
from attnkit.backends.triton.decode import choose_splits, decode_attention, decode_config
from attnkit.backends.triton.extend import extend_attention, extend_config
from attnkit.kvcache.paged import COMPUTE_TORCH_DTYPES

I32 = torch.int32
NUM_PARTS = 3           # intra, successor, inter: the order of q's variant axis
MAX_HEAD_DIM = 256      # a head row lives in one padded tile


@dataclass(slots=True)
class PartTable:
    """One part over every chunk group: keys per group and the shifted block tables."""
    kv_lens: list[int]                 # [G] host
    seq_lens: torch.Tensor             # [G] int32
    block_tables: torch.Tensor         # [G, W] int32


@dataclass(slots=True)
class ChunkGroups:
    """The step's rows split into chunk groups, for one chunk length."""
    q_lens: list[int]                  # [G] rows per group (host)
    query_start_loc: torch.Tensor      # [G+1] int32: the groups tile the step's tokens in order
    parts: list[PartTable]             # NUM_PARTS
    blocks: dict = field(default_factory=dict)     # per-step memo, shared by every layer

    def decode_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(seq_lens [3, G], block_tables [3, G, W]): every part stacked for the decode
        kernel's part axis (built once per step)."""
        if "decode" not in self.blocks:
            width = max(p.block_tables.shape[1] for p in self.parts)
            tables = torch.stack([torch.nn.functional.pad(p.block_tables, (0, width - p.block_tables.shape[1]))
                                  for p in self.parts])
            self.blocks["decode"] = (torch.stack([p.seq_lens for p in self.parts]), tables)
        return self.blocks["decode"]

    def decode_splits(self, num_kv_heads: int, block_n: int,
                      num_sms: int) -> tuple[int, int, torch.Tensor]:
        """(split slots, keys per split, part_starts [4] int32): a request's keys (all parts
        together) spread over about two waves of programs; part p gets as many splits of
        that size as its longest range needs, slots [part_starts[p], part_starts[p + 1])."""
        key = ("splits", num_kv_heads, block_n)
        if key not in self.blocks:
            total = max(sum(p.kv_lens[g] for p in self.parts) for g in range(len(self.q_lens)))
            _, chunk = choose_splits(total, len(self.q_lens), num_kv_heads, block_n=block_n,
                                     num_sms=num_sms)
            starts = [0]
            for p in self.parts:
                starts.append(starts[-1] + -(-max(p.kv_lens) // chunk))
            self.blocks[key] = (starts[-1], chunk, torch.tensor(
                starts, dtype=I32, device=self.query_start_loc.device))
        return self.blocks[key]

    def query_blocks(self, part: int, block_m: int):
        key = (part, block_m)
        if key not in self.blocks:
            kv = self.parts[part].kv_lens
            nonempty = [g for g, n in enumerate(kv) if n]
            self.blocks[key] = query_blocks(self.q_lens, kv, block_m, requests=nonempty,
                                            device=self.query_start_loc.device)
        return self.blocks[key]


class StaticGroups:
    """The decode parts of a static step, on the device: one group per request, part p of
    request b covering keys [lo, hi) of its KV, with lo / hi from its KV length n (query at
    p = n - 1, chunk start a = p // cl * cl): intra [a, n), successor [max(a - cl, 0), a),
    inter [0, max(a - cl, 0)) -- ``part_ranges`` of one decode row, as tensors.

    seq_lens: [3, B] int32 keys per part; tables: [3, B, W] int32 block tables shifted to each
    part's first page (W = pages of max_kv), both rewritten by ``refill``."""

    def __init__(self, meta: BatchMetadata, block_tables: torch.Tensor, cl: int, page_size: int,
                 max_kv: int):
        self.meta, self.source, self.cl, self.page_size, self.max_kv = meta, block_tables, cl, page_size, max_kv
        b, dev = meta.num_reqs, block_tables.device
        self.width = min(-(-max_kv // page_size), block_tables.shape[1])
        self.seq_lens = torch.zeros(NUM_PARTS, b, dtype=I32, device=dev)
        self.tables = torch.zeros(NUM_PARTS, b, self.width, dtype=I32, device=dev)
        self._cols = torch.arange(self.width, dtype=torch.int64, device=dev)
        self._splits: dict = {}
        self.refill()

    def refill(self) -> None:
        """Recompute the parts from the step's current seq_lens and block tables (device ops)."""
        n = self.meta.seq_lens.to(torch.int64)
        a = torch.div(n - 1, self.cl, rounding_mode="floor") * self.cl
        succ = (a - self.cl).clamp(min=0)
        lo = torch.stack([a, succ, torch.zeros_like(a)])                        # [3, B]
        self.seq_lens.copy_(torch.stack([n, a, succ]) - lo)
        cols = (torch.div(lo, self.page_size, rounding_mode="floor")[:, :, None] + self._cols)
        cols = cols.clamp_(max=self.source.shape[1] - 1)                        # past the range: unread
        rows = self.source.to(torch.int64)[None].expand(NUM_PARTS, -1, -1)
        self.tables.copy_(torch.gather(rows, 2, cols))

    def decode_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.seq_lens, self.tables

    def decode_splits(self, num_kv_heads: int, block_n: int,
                      num_sms: int) -> tuple[int, int, torch.Tensor]:
        """As ``ChunkGroups.decode_splits``, sized for any KV up to max_kv: the intra and
        successor parts hold at most cl keys, the inter part at most max_kv."""
        key = (num_kv_heads, block_n)
        if key not in self._splits:
            _, chunk = choose_splits(self.max_kv, self.meta.num_reqs, num_kv_heads,
                                     block_n=block_n, num_sms=num_sms)
            bounds = (min(self.cl, self.max_kv), min(self.cl, self.max_kv), self.max_kv)
            starts = [0]
            for most in bounds:
                starts.append(starts[-1] + max(1, -(-most // chunk)))
            self._splits[key] = (starts[-1], chunk, torch.tensor(
                starts, dtype=I32, device=self.seq_lens.device))
        return self._splits[key]


@dataclass(slots=True)
class DcaTritonStep:
    meta: BatchMetadata
    block_tables: torch.Tensor          # [B, P] int32
    num_sms: int
    max_kv: int | None = None           # static (captured) decode steps: see StaticGroups
    groups: dict = field(default_factory=dict)     # chunk length -> ChunkGroups | StaticGroups
    partials: dict = field(default_factory=dict)   # (H_q, BLOCK_DV, splits) -> 3 f32 buffers

    @classmethod
    def build(cls, meta: BatchMetadata, device) -> "DcaTritonStep":
        tables = torch.as_tensor(meta.block_tables, device=device).to(I32)
        return cls(meta=meta, block_tables=tables, num_sms=sm_count(torch.device(device)))

    @classmethod
    def static(cls, meta: BatchMetadata, device, max_kv: int) -> "DcaTritonStep":
        """The plan of a static decode step: meta's int32 tables read in place."""
        return cls(meta=meta, block_tables=meta.block_tables, num_sms=sm_count(torch.device(device)),
                   max_kv=max_kv)

    def chunk_groups(self, cl: int, page_size: int) -> ChunkGroups | StaticGroups:
        if cl not in self.groups:
            self.groups[cl] = (self._split(cl, page_size) if self.max_kv is None else
                               StaticGroups(self.meta, self.block_tables, cl, page_size, self.max_kv))
        return self.groups[cl]

    def refill(self) -> None:
        """After a refill of a static step's buffers: recompute every chunk length's parts."""
        for groups in self.groups.values():
            groups.refill()

    def _split(self, cl: int, page_size: int) -> ChunkGroups:
        meta = self.meta
        reqs, q_lens, ranges = [], [], []
        for i, n in enumerate(meta.query_lens_cpu):
            start = meta.prefix_lens_cpu[i]
            for r0, r1, a in chunk_groups(start, n, cl):
                reqs.append(i)
                q_lens.append(r1 - r0)
                ranges.append(part_ranges(a, start + r1, cl))
        dev = self.block_tables.device
        qsl = torch.tensor([0] + q_lens, dtype=torch.int64).cumsum(0).to(device=dev, dtype=I32)
        req_idx = torch.tensor(reqs, dtype=torch.int64, device=dev)
        parts = []
        for p in range(NUM_PARTS):
            lo = [r[p][0] for r in ranges]
            kv = [r[p][1] - r[p][0] for r in ranges]
            width = max(1, -(-max(kv, default=1) // page_size))
            first = torch.tensor(lo, dtype=torch.int64, device=dev) // page_size
            cols = (first[:, None] + torch.arange(width, device=dev)[None, :])
            cols = cols.clamp_(max=self.block_tables.shape[1] - 1)     # past the range: unread
            table = self.block_tables[req_idx[:, None], cols].contiguous()
            parts.append(PartTable(kv, torch.tensor(kv, dtype=I32, device=dev), table))
        return ChunkGroups(q_lens, qsl, parts)

    def split_buffers(self, num_heads: int, block_dv: int, splits: int):
        return split_buffers(self.partials, self.meta.num_reqs, num_heads, block_dv, splits,
                             device=self.block_tables.device)


def serves(q: torch.Tensor, layer) -> bool:
    """Whether the Triton path can run this layer (else the torch parts serve it)."""
    spec = layer.spec
    return max(spec.head_dim, spec.value_dim) <= MAX_HEAD_DIM and q.dtype in COMPUTE_TORCH_DTYPES


def triton_dual_chunk(q3, k, v, layer, cache, plan: DcaTritonStep, cl: int) -> torch.Tensor:
    """q3: [T, 3, H_q, D]; k: [T, H_kv, D]; v: [T, H_kv, D_v] -> [T, H_q, D_v] in q3's dtype.
    Writes the step's K/V into the cache (decode: inside the kernel, as the triton backend's
    decode v2 where that is its choice); the parts read every other key from the cache."""
    spec, meta = layer.spec, plan.meta
    lid = spec.layer_id
    groups = plan.chunk_groups(cl, meta.page_size)
    qk_scale, _, v_scale = kernel_scales(layer, cache, None)
    common = dict(qk_scale=qk_scale, v_scale=v_scale, softcap=None, window=None, sinks=None)
    k_cache, v_cache = cache.k[lid], cache.v[lid]
    num_q = q3.shape[0]
    if meta.mode is ForwardMode.DECODE:
        out = q3.new_empty(num_q, spec.num_heads, spec.value_dim)
        cfg = decode_config(spec.head_dim, q3.dtype, interpret=interpreting())
        block_n = cfg["BLOCK_N"]
        splits, chunk, starts = groups.decode_splits(spec.num_kv_heads, block_n, plan.num_sms)
        seq_lens, tables = groups.decode_tables()
        partials = plan.split_buffers(spec.num_heads, padded_dim(spec.value_dim), splits)
        # the general decode kernel (its own K/V write first): dual chunk steps get no kernel
        # table from the plan, so no measured variant choice applies here
        fused = False
        write_kv(cache, lid, meta.slot_mapping, k, v)
        decode_attention(q3, k_cache, v_cache, out, seq_lens=seq_lens, block_tables=tables,
                         num_splits=splits, chunk=chunk, partials=partials, config=cfg,
                         part_starts=starts, new_kv=(k, v, meta.slot_mapping) if fused else None,
                         **common)
        return out
    write_kv(cache, lid, meta.slot_mapping, k, v)
    cfg = extend_config(spec.head_dim, q3.dtype, interpret=interpreting(), variant="v1")
    merged = None           # the parts folded in so far: two [T, H_q, D_v] f32 at a time
    for p, table in enumerate(groups.parts):
        block_req, block_m = groups.query_blocks(p, cfg["BLOCK_M"])
        if block_req.numel() == 0:
            continue
        # rows of groups without this part keep out 0 and lse -inf: they weigh nothing
        o = q3.new_zeros(num_q, spec.num_heads, spec.value_dim, dtype=torch.float32)
        lse = q3.new_full((num_q, spec.num_heads), float("-inf"), dtype=torch.float32)
        extend_attention(q3[:, p], k_cache, v_cache, o, block_req=block_req, block_m=block_m,
                         query_start_loc=groups.query_start_loc, seq_lens=table.seq_lens,
                         block_tables=table.block_tables, causal=p == 0, config=cfg, lse=lse,
                         **common)
        merged = (o, lse) if merged is None else fold_part(*merged, o, lse)
        del o, lse          # free this part's output before the next part allocates its own
    return merged[0].to(q3.dtype)
