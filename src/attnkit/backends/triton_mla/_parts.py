"""Per-step parts of the triton_mla backend: which requests take which MLA form, and the
index tensors each form's kernels read. Built once per step, shared by every layer.

A step whose requests all take one form has one part covering the whole batch (no token
gathering). A MIXED step (say chunked prefill beside decodes) is split: the requests the
plan gives the MHA form make the "mha" part, the others the "absorbed" part, so decode
requests never pay for decompressing their whole context.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnkit.backends.metadata import BatchMetadata


@dataclass(slots=True)
class Part:
    """A subset of the step's requests, renumbered 0..B_p-1.

    tokens:          [T_p] int64 rows of q / output that belong here (None: all, in order)
    query_start_loc: [B_p+1] int32;  seq_lens: [B_p] int32;  block_tables: [B_p, P] int32
    query_lens / kv_lens: host lists of new tokens and KV length per request.
    static_kv: static (captured) steps: the longest KV a refill may hold, which sizes the
    splits instead of ``kv_lens`` (the lengths at capture time).
    counters: the fused split merge's ticket buffers (merge_counters), int32 zeros the kernel
    leaves zero.
    """
    tokens: torch.Tensor | None
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_tables: torch.Tensor
    query_lens: list[int]
    kv_lens: list[int]
    page_size: int
    static_kv: int | None = None
    counters: list = field(default_factory=list)
    _tiles: dict = field(default_factory=dict)
    _gather: tuple | None = None

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens, default=0)

    @property
    def max_kv_len(self) -> int:
        return self.static_kv if self.static_kv is not None else max(self.kv_lens, default=0)

    def merge_counters(self, n: int) -> torch.Tensor:
        """>= n zeroed int32 tickets, shared by every layer of the step (each launch leaves
        them zero for the next). A static step reserves them in capture_plan, outside the graph,
        so a replay zeroes nothing; a larger need adds a buffer and keeps the others (a graph
        captured with one must find it there at every replay)."""
        buf = next((c for c in self.counters if c.numel() >= n), None)
        if buf is None:
            buf = torch.zeros(n, dtype=torch.int32, device=self.seq_lens.device)
            self.counters.append(buf)
        return buf

    def tiles(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Work items of up to ``size`` consecutive new tokens of one request:
        (request [W] int32, first token row [W] int32), rows counted within this part."""
        if size not in self._tiles:
            req, tok, start = [], [], 0
            for b, n in enumerate(self.query_lens):
                for t in range(start, start + n, size):
                    req.append(b)
                    tok.append(t)
                start += n
            dev = self.seq_lens.device
            self._tiles[size] = (torch.tensor(req, dtype=torch.int32, device=dev),
                                 torch.tensor(tok, dtype=torch.int32, device=dev))
        return self._tiles[size]

    def gather(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense KV order of the MHA form: kv_start_loc [B_p+1] int32 and the cache slot of
        every key [S] int64 (each request's keys 0..kv_len-1, requests one after another)."""
        if self._gather is None:
            dev = self.seq_lens.device
            lens = torch.tensor(self.kv_lens, dtype=torch.int64, device=dev)
            starts = torch.zeros(len(self.kv_lens) + 1, dtype=torch.int64, device=dev)
            starts[1:] = torch.cumsum(lens, 0)
            req = torch.repeat_interleave(torch.arange(len(lens), device=dev), lens)
            pos = torch.arange(sum(self.kv_lens), device=dev) - starts[req]
            ps = self.page_size
            slots = self.block_tables[req, pos // ps].long() * ps + pos % ps
            self._gather = (starts.to(torch.int32), slots)
        return self._gather


def _i32(x, dev) -> torch.Tensor:
    return torch.as_tensor(x, device=dev).to(torch.int32).contiguous()


def static_parts(meta: BatchMetadata, max_seq_len: int) -> dict[str, Part]:
    """The plan of a static DECODE step: one absorbed part over meta's own tensors (read in
    place), splits sized for ``max_seq_len``, and its one-token work tiles built now so that
    no forward builds a tensor from host lists."""
    part = Part(None, meta.query_start_loc, meta.seq_lens, meta.block_tables,
                list(meta.query_lens_cpu), list(meta.seq_lens_cpu), meta.page_size,
                static_kv=max_seq_len)
    part.tiles(1)
    return {"absorbed": part}


def build_parts(meta: BatchMetadata, device: torch.device, long: list[bool]) -> dict[str, Part]:
    """{"absorbed": Part, "mha": Part}, either one covering the whole batch or both;
    ``long``: per request, whether it takes the MHA form."""
    qlens, kvlens = list(meta.query_lens_cpu), list(meta.seq_lens_cpu)
    if all(long) or not any(long):
        whole = Part(None, _i32(meta.query_start_loc, device), _i32(meta.seq_lens, device),
                     _i32(meta.block_tables, device), qlens, kvlens, meta.page_size)
        return {"mha" if long and all(long) else "absorbed": whole}
    starts = [0]
    for n in qlens:
        starts.append(starts[-1] + n)
    tables = _i32(meta.block_tables, device)
    parts = {}
    for form, pick in (("absorbed", False), ("mha", True)):
        idx = [b for b, is_long in enumerate(long) if is_long == pick]
        rows = [t for b in idx for t in range(starts[b], starts[b + 1])]
        sub_q = [qlens[b] for b in idx]
        qsl = [0]
        for n in sub_q:
            qsl.append(qsl[-1] + n)
        parts[form] = Part(
            torch.tensor(rows, dtype=torch.int64, device=device), _i32(qsl, device),
            _i32([kvlens[b] for b in idx], device),
            tables.index_select(0, torch.tensor(idx, dtype=torch.int64, device=device)),
            sub_q, [kvlens[b] for b in idx], meta.page_size)
    return parts
