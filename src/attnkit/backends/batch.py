"""Build ``BatchMetadata`` for one step from plain per-request inputs.

    reqs = [Request(prefix_len=0, num_new=7, block_table=[4, 1]),     # a prompt
            Request(prefix_len=30, num_new=1, block_table=[2, 9])]    # a decode
    meta = build_batch(reqs, page_size=16, device="cuda")             # mode MIXED

Tokens of the step are laid out request after request; request i's new tokens sit at
positions ``prefix_len .. prefix_len + num_new - 1`` of its sequence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.errors import fail


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a step.

    block_table: page ids holding the request's KV (at least ceil(KV length / page_size)).
    encoder_len / encoder_block_table: encoder tokens and their pages (cross-attention).
    """
    prefix_len: int
    num_new: int
    block_table: Sequence[int]
    encoder_len: int | None = None
    encoder_block_table: Sequence[int] | None = None

    @property
    def seq_len(self) -> int:
        return self.prefix_len + self.num_new

    @classmethod
    def of(cls, value: Any) -> "Request":
        """Accept a Request, a dict of its fields, or a tuple in field order."""
        if isinstance(value, Request):
            return value
        if isinstance(value, dict):
            return cls(**value)
        return cls(*value)


def slots_of(row: Sequence[int], positions: range | Sequence[int], page_size: int) -> list[int]:
    """Cache slots of ``positions`` for a request whose block-table row is ``row``."""
    return [row[p // page_size] * page_size + p % page_size for p in positions]


def infer_mode(requests: Sequence[Request]) -> ForwardMode:
    """IDLE if empty; DECODE if every request adds one token to a cached prefix; EXTEND if
    none does; MIXED otherwise. VERIFY is never inferred: it must be asked for."""
    if not requests:
        return ForwardMode.IDLE
    decode_like = [r.num_new == 1 and r.prefix_len > 0 for r in requests]
    if all(decode_like):
        return ForwardMode.DECODE
    return ForwardMode.MIXED if any(decode_like) else ForwardMode.EXTEND


def _check_request(i: int, r: Request, page_size: int) -> None:
    if r.prefix_len < 0 or r.num_new < 1:
        fail("AK405", f"request {i}: prefix_len must be >= 0 and num_new >= 1, "
                      f"got prefix_len={r.prefix_len}, num_new={r.num_new}",
             field=f"requests[{i}]", expected="prefix_len >= 0, num_new >= 1",
             actual={"prefix_len": r.prefix_len, "num_new": r.num_new})
    for name, length, row in (("block_table", r.seq_len, r.block_table),
                              ("encoder_block_table", r.encoder_len or 0, r.encoder_block_table or ())):
        need = -(-length // page_size)
        if len(row) < need or any(p < 0 for p in list(row)[:need]):
            fail("AK405", f"request {i}: {name} must hold {need} page(s) for {length} tokens "
                          f"at page_size {page_size}, got {list(row)}",
                 field=f"requests[{i}].{name}", expected=f">= {need} valid pages", actual=list(row))


def _check_mode(mode: ForwardMode, requests: Sequence[Request]) -> None:
    bad = None
    if mode is ForwardMode.IDLE and requests:
        bad = f"IDLE needs an empty batch, got {len(requests)} request(s)"
    elif mode is not ForwardMode.IDLE and not requests:
        bad = f"{mode.name} needs at least one request, got an empty batch"
    elif mode is ForwardMode.DECODE and any(r.num_new != 1 for r in requests):
        bad = f"DECODE needs one new token per request, got {[r.num_new for r in requests]}"
    if bad:
        fail("AK406", bad, field="mode", expected=infer_mode(requests).name, actual=mode.name)


def _table(rows: list[list[int]], dev: torch.device) -> tuple[torch.Tensor, list[list[int]]]:
    """[B, P] int32 block table padded with -1, and its host copy."""
    width = max((len(r) for r in rows), default=0)
    padded = [r + [-1] * (width - len(r)) for r in rows]
    return torch.tensor(padded, dtype=torch.int32, device=dev).reshape(len(rows), width), padded


def build_batch(requests: Sequence[Any], *, page_size: int, device: torch.device | str = "cpu",
                mode: ForwardMode | str | None = None, encoder: str | None = None) -> BatchMetadata:
    """Build the step's metadata. ``mode`` None infers it (see ``infer_mode``).

    encoder: None — build encoder fields (cached encoder K/V) iff any request has an
    encoder; "cached" — same, required; "write" — this step also hands the encoder K/V
    of every request to cross layers, so ``encoder_slot_mapping`` [sum encoder_lens] is built.
    """
    reqs = [Request.of(r) for r in requests]
    if page_size < 1:
        fail("AK405", f"page_size must be >= 1, got {page_size}",
             field="page_size", expected=">= 1", actual=page_size)
    for i, r in enumerate(reqs):
        _check_request(i, r, page_size)
    mode = ForwardMode(mode) if mode is not None else infer_mode(reqs)
    _check_mode(mode, reqs)
    if encoder not in (None, "cached", "write"):
        fail("AK405", f"encoder must be None, 'cached' or 'write', got {encoder!r}",
             field="encoder", expected=["cached", "write"], actual=encoder)

    seq = [r.seq_len for r in reqs]
    prefix = [r.prefix_len for r in reqs]
    qlens = [r.num_new for r in reqs]
    starts = [0]
    for n in qlens:
        starts.append(starts[-1] + n)
    rows = [list(r.block_table) for r in reqs]
    slots, positions = [], []
    for r, row in zip(reqs, rows):
        span = range(r.prefix_len, r.seq_len)
        slots += slots_of(row, span, page_size)
        positions += span

    dev = torch.device(device)
    i32 = dict(dtype=torch.int32, device=dev)
    i64 = dict(dtype=torch.int64, device=dev)
    tables, tables_cpu = _table(rows, dev)
    meta = BatchMetadata(
        mode=mode, page_size=page_size,
        query_start_loc=torch.tensor(starts, **i32),
        seq_lens=torch.tensor(seq, **i32),
        prefix_lens=torch.tensor(prefix, **i32),
        block_tables=tables,
        slot_mapping=torch.tensor(slots, **i64),
        positions=torch.tensor(positions, **i64),
        seq_lens_cpu=seq, prefix_lens_cpu=prefix, query_lens_cpu=qlens,
        max_query_len=max(qlens, default=0), max_seq_len=max(seq, default=0),
        block_tables_cpu=tables_cpu, slot_mapping_cpu=slots,
    )
    if encoder is not None or any(r.encoder_len is not None for r in reqs):
        _add_encoder(meta, reqs, write=encoder == "write", page_size=page_size, dev=dev)
    return meta


def _add_encoder(meta: BatchMetadata, reqs: list[Request], *, write: bool, page_size: int,
                 dev: torch.device) -> None:
    lens = [r.encoder_len or 0 for r in reqs]
    rows = [list(r.encoder_block_table or ()) for r in reqs]
    meta.encoder_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    meta.encoder_lens_cpu = lens
    meta.encoder_block_tables, meta.encoder_block_tables_cpu = _table(rows, dev)
    if write:
        slots = [s for n, row in zip(lens, rows) for s in slots_of(row, range(n), page_size)]
        meta.encoder_slot_mapping = torch.tensor(slots, dtype=torch.int64, device=dev)
