"""Build ``BatchMetadata`` for one step from plain per-request inputs.

    reqs = [Request(prefix_len=0, num_new=7, block_table=[4, 1]),     # a prompt
            Request(prefix_len=30, num_new=1, block_table=[2, 9])]    # a decode
    meta = build_batch(reqs, page_size=16, device="cuda")             # mode MIXED

Tokens of the step are laid out request after request; request i's new tokens sit at
positions ``prefix_len .. prefix_len + num_new - 1`` of its sequence.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sequence

import torch

from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.backends.metadata import is_int as _is_int
from attnkit.backends.tables import slots_of
from attnkit.errors import fail, preview
from attnkit.kvcache.allocator import check_page_size


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
    def of(cls, value: Any, index: int = 0) -> "Request":
        """Accept a Request, a dict of its fields, or a tuple in field order (AK405 otherwise;
        ``index`` is the request's place in the batch, for the message)."""
        if isinstance(value, Request):
            return value
        try:
            return cls(**value) if isinstance(value, dict) else cls(*value)
        except TypeError as exc:
            names = [f.name for f in fields(cls)]
            fail("AK405", f"request {index}: expected a Request, a dict or a tuple of the fields "
                          f"{', '.join(names)} (the first three required), got {value!r} ({exc})",
                 field=f"requests[{index}]", expected=names, actual=repr(value))


def infer_mode(requests: Sequence[Request]) -> ForwardMode:
    """IDLE if empty; DECODE if every request adds one token to a cached prefix; EXTEND if
    none does; MIXED otherwise. VERIFY is never inferred: it must be asked for."""
    if not requests:
        return ForwardMode.IDLE
    decode_like = [r.num_new == 1 and r.prefix_len > 0 for r in requests]
    if all(decode_like):
        return ForwardMode.DECODE
    return ForwardMode.MIXED if any(decode_like) else ForwardMode.EXTEND


_INT32_MAX = 2**31 - 1


def _check_types(i: int, r: Request) -> None:
    """Every count an int, every block-table entry an int that fits the int32 table."""
    counts = [("prefix_len", r.prefix_len), ("num_new", r.num_new)]
    if r.encoder_len is not None:
        counts.append(("encoder_len", r.encoder_len))
    for name, value in counts:
        # lengths go into int32 tensors: a larger one cannot be represented (nor printed, past 4300 digits)
        if not _is_int(value) or not -_INT32_MAX - 1 <= value <= _INT32_MAX:
            fail("AK405", f"request {i}: {name} must be an int below 2**31, got {preview(value)}",
                 field=f"requests[{i}].{name}", expected="int", actual=preview(value))
    if r.encoder_len is not None and r.encoder_len < 0:
        fail("AK405", f"request {i}: encoder_len must be >= 0 (or None without an encoder), "
                      f"got {r.encoder_len}",
             field=f"requests[{i}].encoder_len", expected=">= 0 or None", actual=r.encoder_len)
    for name, row in (("block_table", r.block_table),
                      ("encoder_block_table", () if r.encoder_block_table is None else r.encoder_block_table)):
        try:
            entries = list(row)
        except TypeError:
            fail("AK405", f"request {i}: {name} must be a sequence of page ids, got {row!r}",
                 field=f"requests[{i}].{name}", expected="a sequence of int page ids", actual=repr(row))
        bad = next((p for p in entries if not _is_int(p)), None)
        if bad is not None:
            fail("AK405", f"request {i}: {name} holds {bad!r}, page ids must be ints",
                 field=f"requests[{i}].{name}", expected="int page ids", actual=repr(entries))
        # Block tables are int32 tensors: a larger id would overflow rather than index a page.
        huge = next((p for p in entries if not -_INT32_MAX - 1 <= p <= _INT32_MAX), None)
        if huge is not None:
            fail("AK405", f"request {i}: {name} holds page id {preview(huge)}, beyond the int32 range of "
                          f"block tables (page ids must be < 2**31 = {_INT32_MAX + 1})",
                 field=f"requests[{i}].{name}", expected=f"0 <= page id <= {_INT32_MAX}", actual=preview(huge))


def _check_request(i: int, r: Request, page_size: int) -> None:
    _check_types(i, r)
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


def _parse_mode(mode: ForwardMode | str) -> ForwardMode:
    try:
        return ForwardMode(mode)
    except ValueError:
        valid = [m.value for m in ForwardMode]
        fail("AK406", f"mode must be a ForwardMode or one of {', '.join(valid)}, got {mode!r}",
             field="mode", expected=valid, actual=repr(mode))


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


def build_batch(requests: Sequence[Any], *, page_size: int, device: torch.device | str = "cpu",
                mode: ForwardMode | str | None = None, encoder: str | None = None) -> BatchMetadata:
    """Build the step's metadata. ``mode`` None infers it (see ``infer_mode``).

    encoder: None — build encoder fields (cached encoder K/V) iff any request has an
    encoder; "cached" — same, required; "write" — this step also hands the encoder K/V
    of every request to cross layers, so ``encoder_slot_mapping`` [sum encoder_lens] is built.
    """
    if isinstance(requests, (str, bytes)) or not hasattr(requests, "__iter__"):
        fail("AK405", f"requests must be a sequence of requests, got {type(requests).__name__}",
             field="requests", expected="a list of Request / dict / tuple", actual=repr(requests)[:80])
    reqs = [Request.of(r, i) for i, r in enumerate(requests)]
    check_page_size(page_size)
    for i, r in enumerate(reqs):
        _check_request(i, r, page_size)
    mode = _parse_mode(mode) if mode is not None else infer_mode(reqs)
    _check_mode(mode, reqs)
    if encoder not in (None, "cached", "write"):
        fail("AK405", f"encoder must be None, 'cached' or 'write', got {encoder!r}",
             field="encoder", expected=["cached", "write"], actual=encoder)

    rows = [list(r.block_table) for r in reqs]
    has_enc = encoder is not None or any(r.encoder_len is not None for r in reqs)
    enc_lens = [r.encoder_len or 0 for r in reqs] if has_enc else None
    enc_rows = [list(r.encoder_block_table or ()) for r in reqs] if has_enc else None
    enc_slots = None
    if encoder == "write":
        enc_slots = [s for n, row in zip(enc_lens, enc_rows) for s in slots_of(row, range(n), page_size)]
    return BatchMetadata(          # the slot mapping follows from the tables (backends/tables.py)
        mode=mode, page_size=page_size, seq_lens_cpu=[r.seq_len for r in reqs],
        prefix_lens_cpu=[r.prefix_len for r in reqs], block_tables_cpu=rows,
        device=device, encoder_lens_cpu=enc_lens,
        encoder_block_tables_cpu=enc_rows, encoder_slot_mapping_cpu=enc_slots)
