"""Static per-step metadata for captured (CUDA-graph) DECODE steps: the capture contract's data.

    scratch = list(range(P, P + StaticDecode.scratch_need(64, 16)))   # pages no request owns
    static = StaticDecode(max_batch=64, max_pages=64, page_size=16, scratch_pages=scratch,
                          device="cuda")
    meta = static.meta(8)                         # a bucket of 8 rows: views of the buffers
    step = backend.prepare_static(meta, cache, max_seq_len=static.max_seq_len)   # once
    ... warm up, then capture backend.refill_static(step); backend.forward(..., step) ...
    static.fill(8, requests)                      # in place: 5 real requests, 3 padded rows
    graph.replay()
    static.fill(8, requests, ahead=3)             # the tables also cover 3 more tokens each
    graph.replay(); static.advance(8); graph.replay()   # ... so steps can follow on the device

A bucket's ``BatchMetadata`` is built once and its tensors never move: ``fill`` rewrites
their contents (one host-to-device copy per buffer, from pinned staging) and the host lists
of the same metadata from the same values, so the two copies cannot disagree (another
bucket's metadata shares the buffers; ``meta`` brings its host lists up to date). Rows past
the real requests are *padded*: row j decodes position ``j % page_size`` of scratch page
``scratch_pages[j // page_size]``, pages the caller never hands to a request, so a padded row
reads and writes nothing a real request owns and no two rows write one slot; its output is
junk the caller drops. Block-table entries past ``ceil((seq_len + ahead) / page_size)`` are
unspecified (stale from earlier steps): kernels read a row's pages only below its KV length.

``advance`` moves every real row one token on, on the device (lengths, position, the new
token's slot from the row's block table; padded rows stay): the next decode step of the same
requests without a fill, so several steps run back to back with no host work between them
(GraphRunner.decode with ``steps``). ``fill(..., ahead=k)`` checks and writes the pages of
k such steps first; ``advance`` past them is refused (AK458) before anything moves.

The contract a backend signs by declaring ``cuda_graph`` (see ``AttentionBackend``):
``prepare_static`` once per bucket, ``refill_static`` after each ``fill`` (device ops only,
capturable), and a ``forward`` that reads only these tensors: no host synchronisation, no
shape, launch grid or branch that depends on their values (split counts sized for
``max_seq_len``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from attnkit.backends.batch import Request
from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.backends.tables import slots_of
from attnkit.backends.validation import validate_batch
from attnkit.errors import fail, preview
from attnkit.kvcache.allocator import check_page_size
from attnkit.kvcache.checks import check_fits, usable_device

I32, I64 = torch.int32, torch.int64


@dataclass(slots=True)
class _Staging:
    """Pinned host mirrors of the device buffers (CPU: plain tensors) and their numpy views."""
    lens: torch.Tensor            # [3, max_batch] int32: seq_lens, prefix_lens, real row (1/0)
    slots: torch.Tensor           # [2, max_batch] int64: slot_mapping, positions
    tables: torch.Tensor          # [max_batch, max_pages] int32
    done: object = None           # CUDA event after the last copy out of these buffers


class StaticDecode:
    """Static DECODE metadata for up to ``max_batch`` requests of up to ``max_pages`` pages.

    scratch_pages: ``scratch_need(max_batch, page_size)`` pages of the cache no request ever
    owns; padded rows write there."""

    def __init__(self, *, max_batch: int, max_pages: int, page_size: int,
                 scratch_pages: Sequence[int], device: torch.device | str):
        check_page_size(page_size)
        for name, value in (("max_batch", max_batch), ("max_pages", max_pages)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31:
                fail("AK458", f"{name} must be an int >= 1 (and < 2**31), got {preview(value)}", field=name,
                     expected="int >= 1", actual=preview(value))
        self.max_batch, self.max_pages, self.page_size = max_batch, max_pages, page_size
        need = self.scratch_need(max_batch, page_size)
        self.scratch_pages = list(scratch_pages) if isinstance(scratch_pages, (list, tuple, range)) else None
        if self.scratch_pages is None or len(self.scratch_pages) < need \
                or len(set(self.scratch_pages)) != len(self.scratch_pages) \
                or not all(_page_id(p) for p in self.scratch_pages):
            fail("AK458", f"{max_batch} rows of page size {page_size} need {need} distinct scratch "
                          f"page id(s) in [0, 2**31), got {scratch_pages!r:.80}", field="scratch_pages",
                 expected=f"{need} distinct page ids >= 0", actual=repr(scratch_pages)[:80])
        self._scratch = set(self.scratch_pages)
        self.device = usable_device(device)
        # device buffers and their pinned host mirrors, checked before any is allocated
        nbytes = max_batch * (max_pages * 4 + 3 * 4 + 2 * 8) + 4 * (max_batch + 1)
        check_fits(nbytes, self.device, what=f"static decode buffers for {max_batch} rows of {max_pages} pages")
        check_fits(nbytes, torch.device("cpu"), what=f"their host staging copies")
        dev = dict(device=self.device)
        self.query_start_loc = torch.arange(max_batch + 1, dtype=I32, **dev)  # one token each
        self._lens = torch.zeros(3, max_batch, dtype=I32, **dev)
        self._slots = torch.zeros(2, max_batch, dtype=I64, **dev)
        self.block_tables = torch.full((max_batch, max_pages), -1, dtype=I32, **dev)
        pin = self.device.type == "cuda"
        self._host = _Staging(torch.zeros(3, max_batch, dtype=I32, pin_memory=pin),
                              torch.zeros(2, max_batch, dtype=I64, pin_memory=pin),
                              torch.full((max_batch, max_pages), -1, dtype=I32, pin_memory=pin))
        self._metas: dict[int, BatchMetadata] = {}
        self._rows: list[Request | None] = [None] * max_batch   # what each row holds (None: padded)
        self._stale: set[int] = set()           # buckets whose host lists lag the buffers
        self._ahead = (0, 0, 0)                  # last fill: (rows, steps ahead, advances since)
        self.fill(max_batch, [])                        # every row padded: a valid batch

    @staticmethod
    def scratch_need(max_batch: int, page_size: int) -> int:
        """Scratch pages for ``max_batch`` padded rows, one slot each."""
        return -(-max_batch // page_size)

    @property
    def max_seq_len(self) -> int:
        """The longest KV a row's block table can address."""
        return self.max_pages * self.page_size

    @property
    def seq_lens(self) -> torch.Tensor:
        return self._lens[0]

    def meta(self, batch: int) -> BatchMetadata:
        """The DECODE metadata of a bucket of ``batch`` rows (built once; ``fill`` updates it)."""
        self._check_batch(batch)
        if batch in self._stale:
            self._sync_host_lists(batch)
        if batch not in self._metas:
            lens, slots = self._lens, self._slots
            self._metas[batch] = BatchMetadata.on_buffers(
                dict(query_start_loc=self.query_start_loc[:batch + 1], seq_lens=lens[0, :batch],
                     prefix_lens=lens[1, :batch], block_tables=self.block_tables[:batch],
                     slot_mapping=slots[0, :batch], positions=slots[1, :batch]),
                mode=ForwardMode.DECODE, page_size=self.page_size, **self._host_values(batch))
            self._stale.discard(batch)
        return self._metas[batch]

    def fill(self, batch: int, requests: Sequence[Request], *, ahead: int = 0) -> BatchMetadata:
        """Write ``requests`` (each one new token: ``num_new == 1``) into rows 0.., pad the
        rest of the bucket of ``batch`` rows, and return the bucket's metadata (the same
        object every time). ``ahead``: each request's block table also holds the pages of
        that many further tokens (written too), for as many ``advance`` steps. In place: no
        device allocation, no host synchronisation past the previous fill's copy. AK458 for
        a batch or a request the buffers cannot hold."""
        self._check_batch(batch)
        if isinstance(ahead, bool) or not isinstance(ahead, int) or not 0 <= ahead < 2**31:
            fail("AK458", f"ahead must be an int >= 0, got {preview(ahead)}", field="ahead",
                 expected="int >= 0", actual=preview(ahead))
        if isinstance(requests, (str, bytes)) or not hasattr(requests, "__iter__"):
            fail("AK458", f"requests must be a sequence of requests, got {type(requests).__name__}",
                 field="requests", expected="a list of Request", actual=repr(requests)[:80])
        reqs = [Request.of(r, i) for i, r in enumerate(requests)]
        if len(reqs) > batch:
            fail("AK458", f"{len(reqs)} request(s) do not fit a static bucket of {batch} rows",
                 field="requests", expected=f"<= {batch}", actual=len(reqs))
        host = self._host
        if host.done is not None:
            host.done.synchronize()             # the previous copy out of staging has finished
        rows = [list(r.block_table) for r in reqs]
        for i, (r, row) in enumerate(zip(reqs, rows)):
            self._check_request(i, r, row, ahead)   # all of them before anything is written
        self._check_distinct_slots(reqs, rows, ahead)
        lens, slots, tables = host.lens.numpy(), host.slots.numpy(), host.tables.numpy()
        for i, (r, row) in enumerate(zip(reqs, rows)):
            need = -(-(r.seq_len + ahead) // self.page_size)
            lens[0, i], lens[1, i], lens[2, i] = r.seq_len, r.prefix_len, 1
            slots[0, i] = slots_of(row, (r.prefix_len,), self.page_size)[0]
            slots[1, i] = r.prefix_len
            tables[i, :need] = row[:need]
        n = len(reqs)
        for j in range(n, batch):
            page, pos = self._padded(j)
            lens[0, j], lens[1, j], lens[2, j] = pos + 1, pos, 0
            slots[0, j], slots[1, j] = page * self.page_size + pos, pos
            tables[j, 0] = page
        self._copy(batch)
        self._rows[:batch] = reqs + [None] * (batch - n)
        self._ahead = (batch, ahead, 0)
        self._stale.update(self._metas)         # other buckets follow when next asked for
        if batch in self._metas:
            self._sync_host_lists(batch)
        return self.meta(batch)

    def advance(self, batch: int) -> None:
        """The next decode step of the last fill's requests: every real row of the bucket of
        ``batch`` rows one token on (KV length, prefix, position; its new token's slot read
        from its block table), on the device only (capturable: no host synchronisation, no
        allocation that depends on values). Padded rows stay where they are. AK458 past the
        ``ahead`` steps the last fill covered, or for another bucket than that fill's."""
        self._check_batch(batch)
        filled, ahead, done = self._ahead
        if batch != filled or done >= ahead:
            fail("AK458", f"advance({batch}): the last fill was of {filled} rows and covered "
                          f"{ahead} step(s) ahead, {done} of which ran; fill again first",
                 field="ahead", expected=f"batch {filled}, fewer than {ahead} advances",
                 actual={"batch": batch, "advances": done})
        live = self._lens[2, :batch]
        self._lens[:2, :batch] += live
        pos = self._slots[1, :batch]
        pos += live
        index = torch.div(pos, self.page_size, rounding_mode="floor").clamp_(max=self.max_pages - 1)
        page = self.block_tables[:batch].gather(1, index[:, None]).squeeze(1).to(I64)
        fresh = page * self.page_size + pos % self.page_size
        self._slots[0, :batch] = torch.where(live.bool(), fresh, self._slots[0, :batch])
        self._ahead = (filled, ahead, done + 1)
        self._stale.update(self._metas)

    # -- internals ----------------------------------------------------------------------
    def _copy(self, batch: int) -> None:
        host, cuda = self._host, self.device.type == "cuda"
        # whole (dense) length buffers: staging and device agree on every row, and a dense
        # pinned source copies asynchronously
        self._lens.copy_(host.lens, non_blocking=cuda)
        self._slots.copy_(host.slots, non_blocking=cuda)
        self.block_tables[:batch].copy_(host.tables[:batch], non_blocking=cuda)
        if cuda:
            host.done = torch.cuda.Event()
            host.done.record()

    def _sync_host_lists(self, batch: int) -> None:
        """A bucket metadata's host values, from the record of what its rows hold (the values
        the last fills wrote to the buffers)."""
        self._metas[batch].refresh_host(**self._host_values(batch))
        self._stale.discard(batch)

    def _host_values(self, batch: int) -> dict:
        """Host lists of a bucket: the last fill's requests, each moved on by the advances
        since (padded rows never move)."""
        filled, _, moved = self._ahead          # rows [0, filled) moved on ``moved`` steps
        padded = [self._padded(j) for j in range(batch)]
        reqs = [r if r is None or j >= filled or not moved else
                Request(r.prefix_len + moved, 1, r.block_table)
                for j, r in enumerate(self._rows[:batch])]
        slots = self._host.slots[0, :batch].tolist() if not moved else [
            page * self.page_size + pos if r is None else
            slots_of(r.block_table, (r.prefix_len,), self.page_size)[0]
            for r, (page, pos) in zip(reqs, padded)]    # rows past ``filled``: as copied
        return dict(
            seq_lens_cpu=[pos + 1 if r is None else r.seq_len for r, (_, pos) in zip(reqs, padded)],
            prefix_lens_cpu=[pos if r is None else r.prefix_len for r, (_, pos) in zip(reqs, padded)],
            block_tables_cpu=[[page] if r is None else list(r.block_table)
                              for r, (page, _) in zip(reqs, padded)],
            slot_mapping_cpu=slots)

    def _padded(self, row: int) -> tuple[int, int]:
        """(scratch page, position) that padded row ``row`` decodes."""
        return self.scratch_pages[row // self.page_size], row % self.page_size

    def _check_batch(self, batch: int) -> None:
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= self.max_batch:
            fail("AK458", f"a static bucket holds 1 to {self.max_batch} rows, not {batch!r}",
                 field="batch", expected=f"1 <= batch <= {self.max_batch}", actual=repr(batch))

    def _check_request(self, i: int, r: Request, row: list[int], ahead: int = 0) -> None:
        ints = (r.prefix_len, r.num_new, *row)
        if any(isinstance(x, bool) or not isinstance(x, int) for x in ints):
            fail("AK458", f"request {i}: prefix_len, num_new and page ids must be ints, got "
                          f"{preview(r.prefix_len)}, {preview(r.num_new)}, {preview(row)}", field=f"requests[{i}]",
                 expected="ints", actual=preview(r))
        need = -(-(r.seq_len + ahead) // self.page_size)
        problem = None
        if r.num_new != 1 or not 0 <= r.prefix_len < 2**31:
            problem = ("num_new", "one new token after prefix_len >= 0 (and < 2**31)",
                       f"prefix_len={preview(r.prefix_len)}, num_new={preview(r.num_new)}")
        elif need > self.max_pages:
            problem = ("block_table", f"<= {self.max_pages} pages ({self.max_seq_len} tokens)",
                       f"{r.seq_len} tokens" + (f" + {ahead} ahead" if ahead else ""))
        elif len(row) < need or any(not _page_id(p) or p in self._scratch for p in row[:need]):
            problem = ("block_table", f"{need} page(s) >= 0, none a scratch page "
                                      f"{self.scratch_pages}", row)
        if problem:
            field, expected, actual = problem
            shown = actual if isinstance(actual, str) else preview(actual)
            fail("AK458", f"request {i} does not fit the static decode buffers: {field} must be "
                          f"{expected}, got {shown}", field=f"requests[{i}].{field}",
                 expected=expected, actual=shown)

    def _check_distinct_slots(self, reqs: list[Request], rows: list[list[int]],
                              ahead: int = 0) -> None:
        """Two rows that write one cache slot race in the captured kernel (eager steps: AK416),
        in this step or in any of the ``ahead`` steps after it."""
        seen: dict[int, int] = {}
        for i, (r, row) in enumerate(zip(reqs, rows)):
            for slot in slots_of(row, range(r.prefix_len, r.prefix_len + ahead + 1), self.page_size):
                if seen.setdefault(slot, i) != i:
                    fail("AK458", f"requests {seen[slot]} and {i} write a new token to the same "
                                  f"cache slot {slot} (page {slot // self.page_size})",
                         field=f"requests[{i}].block_table", expected="distinct slots", actual=slot)


def _page_id(p) -> bool:
    """A page id an int32 block table holds."""
    return not isinstance(p, bool) and isinstance(p, int) and 0 <= p < 2**31


def static_tensors(meta: BatchMetadata, backend: str) -> None:
    """AK457 unless ``meta``'s index tensors can be read in place by a captured kernel: int32
    lengths and tables, int64 slots, each dense (what ``StaticDecode`` builds)."""
    want = {"query_start_loc": I32, "seq_lens": I32, "block_tables": I32, "slot_mapping": I64,
            "positions": I64}
    for name, dtype in want.items():
        t = getattr(meta, name)
        if t.dtype != dtype or not t.is_contiguous():
            fail("AK457", f"{backend}: a static step reads meta.{name} in place, so it must be a "
                          f"dense {dtype} tensor (StaticDecode builds them), got {t.dtype}"
                          f"{'' if t.is_contiguous() else ', not contiguous'}",
                 field=f"meta.{name}", expected=str(dtype), actual=str(t.dtype))


def check_static(meta: BatchMetadata, cache, *, max_seq_len: int, backend: str) -> None:
    """What ``AttentionBackend.prepare_static`` checks before a backend plans: a DECODE step
    of static tensors, valid against the cache, whose tables can address ``max_seq_len``."""
    if meta.mode is not ForwardMode.DECODE:
        fail("AK457", f"{backend}: static (captured) steps are DECODE steps, not {meta.mode.name}; "
                      "prefill runs eagerly", field="meta.mode", expected="DECODE",
             actual=meta.mode.name)
    reach = meta.block_tables.shape[1] * meta.page_size
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) \
            or not max(meta.seq_lens_cpu, default=1) <= max_seq_len <= reach:
        fail("AK457", f"{backend}: max_seq_len must be an int between the step's longest KV "
                      f"({max(meta.seq_lens_cpu, default=1)}) and what its block tables address "
                      f"({reach}), got {max_seq_len!r}", field="max_seq_len",
             expected=f"<= {reach}", actual=repr(max_seq_len))
    static_tensors(meta, backend)
    validate_batch(meta, cache)
