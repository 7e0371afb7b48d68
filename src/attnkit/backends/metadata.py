"""Per-step batch metadata, built once per step and shared by every layer.

Token order: requests are laid out one after another; request i owns query tokens
``query_start_loc[i] : query_start_loc[i+1]``. Its KV after this step has ``seq_lens[i]``
tokens, of which ``prefix_lens[i]`` were cached before the step; the new tokens are the
last ``seq_lens[i] - prefix_lens[i]`` positions (``query_lens_cpu``).

One owner per fact: the host values (tuples) are what a ``BatchMetadata`` is made of; its
device tensors are built from them once, when it is made, and cannot be set apart from them:
no field can be set after that, the tensors are read-only properties, and a write into a
tensor in place (``meta.slot_mapping[0] = ...``) is caught by its version counter, recorded
when the tensors are built and compared when a step is checked (``check_unchanged``: AK405,
no device sync). So the checks in backends/validation.py, which read the host values, check
exactly what the kernels index with. The slot mapping is the block tables' (each new token's
page and offset): left out (``slot_mapping_cpu=None``, what ``build_batch`` does) it is derived
from them here, and the facts the checks need from the tables (the highest page a request
needs, a slot written twice) are found once, when the batch is made; given explicitly, it is
compared with the tables when the step is checked. To change a batch, build a new one
(``build_batch``, or ``dataclasses.replace`` on its host fields).
"""
from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

from attnkit.backends.tables import TableFacts, derive_slots, table_facts
from attnkit.errors import fail
from attnkit.kvcache.allocator import check_page_size


class ForwardMode(enum.Enum):
    EXTEND = "extend"    # prefill, with or without a cached prefix
    DECODE = "decode"    # one new token per request
    MIXED = "mixed"      # extend and decode requests in one batch
    VERIFY = "verify"    # k draft tokens per request, causal among themselves
    IDLE = "idle"        # empty batch

    @property
    def is_decode(self) -> bool:
        return self is ForwardMode.DECODE

    @property
    def is_prefill_like(self) -> bool:
        """Modes served by a hybrid's prefill backend."""
        return self in (ForwardMode.EXTEND, ForwardMode.MIXED, ForwardMode.VERIFY)


@dataclass(slots=True)
class BatchMetadata:
    """Everything a backend needs about one step.

    Host values (tuples of ints), the owners:
      seq_lens_cpu [B], prefix_lens_cpu [B]    KV length after / before this step
      block_tables_cpu [B][P]                  page ids per request (rows padded with -1 to P)
      slot_mapping_cpu [T]                     cache slot (page * page_size + offset) of each
                                               new token, request after request
      encoder_lens_cpu [B], encoder_block_tables_cpu [B][Pe]   cross-attention: encoder tokens
                                               and their pages (None without an encoder)
      encoder_slot_mapping_cpu [Te]            slots for encoder K/V written this step (None:
                                               the encoder K/V are already cached)
    Device tensors on ``device``, built from them (read-only):
      query_start_loc [B+1] int32, seq_lens [B] int32, prefix_lens [B] int32,
      block_tables [B, P] int32, slot_mapping [T] int64, positions [T] int64 (absolute
      position of each new token), encoder_lens [B] int32, encoder_block_tables [B, Pe] int32,
      encoder_slot_mapping [Te] int64 (the encoder ones None without an encoder).
    A malformed host value (not an int, a row count that differs, fewer slots than new
    tokens) is AK405 here; whether it fits the cache is validate_batch's (backends/validation.py).
    """
    mode: ForwardMode
    page_size: int
    seq_lens_cpu: Sequence[int]
    prefix_lens_cpu: Sequence[int]
    block_tables_cpu: Sequence[Sequence[int]]
    slot_mapping_cpu: Sequence[int] | None = None
    device: Any = "cpu"
    encoder_lens_cpu: Sequence[int] | None = None
    encoder_block_tables_cpu: Sequence[Sequence[int]] | None = None
    encoder_slot_mapping_cpu: Sequence[int] | None = None
    _tensors: dict = field(default=None, init=False, repr=False, compare=False)
    _static: bool = field(default=False, init=False, repr=False, compare=False)
    _facts: TableFacts = field(default=None, init=False, repr=False, compare=False)
    _versions: tuple = field(default=(), init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        """Read-only once made (a frozen dataclass, with a coded error): a field set after the
        tensors were built would part the host values from them."""
        if getattr(self, "_tensors", None) is not None:
            fail("AK405", f"BatchMetadata is read-only: meta.{name} cannot be set, since its "
                          "device tensors are built from its host values when it is made. Build "
                          f"a new one: build_batch(...), or dataclasses.replace(meta, {name}=...) "
                          "for a host field", field=f"meta.{name}", expected="a new BatchMetadata",
                 actual=repr(value)[:80])
        object.__setattr__(self, name, value)

    def __post_init__(self):
        self._check_host()
        from attnkit.backends.metadata_tensors import device_tensors   # torch, on first use

        tensors = device_tensors(self)
        object.__setattr__(self, "_tensors", tensors)
        object.__setattr__(self, "_versions", tuple(t._version for t in tensors.values()))
        object.__setattr__(self, "device", tensors["slot_mapping"].device)

    def check_unchanged(self) -> None:
        """AK405 if a device tensor was written in place since it was built from the host
        values (their version counters moved; no device sync). Static metadata is exempt: its
        buffers are rewritten in place by their one writer, StaticDecode.fill."""
        if self._static:
            return
        for (name, t), made in zip(self._tensors.items(), self._versions):
            if t._version != made:
                fail("AK405", f"meta.{name} was written in place after the batch was built, so "
                              "it no longer equals the host values the checks read (the step "
                              "could write a page its request does not own). Build a new batch: "
                              "build_batch(...), or dataclasses.replace(meta, ...)",
                     field=f"meta.{name}", expected="the tensor as built",
                     actual="written in place")

    # ---- static (CUDA-graph) metadata ---------------------------------------------------
    @classmethod
    def on_buffers(cls, tensors: dict, *, mode: ForwardMode, page_size: int,
                   **host: Any) -> "BatchMetadata":
        """Metadata whose device tensors are static buffers (backends/static.py): a captured
        step reads them in place, and ``StaticDecode.fill`` rewrites them and, in the same
        call and from the same staging values, the host values (``refresh_host``). The one
        place where the device copy is not built by this class; the writer of both is one
        function, so they still cannot part. ``host``: the four ``*_cpu`` owner fields."""
        _host_names(host, every=True)
        if not isinstance(tensors, dict) or sorted(tensors) != sorted(BUFFERS) or not all(
                hasattr(t, "shape") and hasattr(t, "device") for t in tensors.values()):
            fail("AK405", f"on_buffers takes a dict of the tensors {', '.join(BUFFERS)}, got "
                          f"{sorted(tensors) if isinstance(tensors, dict) else type(tensors).__name__}",
                 field="tensors", expected=list(BUFFERS), actual=repr(tensors)[:80])
        meta = cls.__new__(cls)
        for name, value in (("mode", mode), ("page_size", page_size), ("device", "cpu"),
                            ("encoder_lens_cpu", None), ("encoder_block_tables_cpu", None),
                            ("encoder_slot_mapping_cpu", None), ("_tensors", None),
                            ("_static", True), *host.items()):
            object.__setattr__(meta, name, value)
        meta._check_host()
        object.__setattr__(meta, "_tensors", dict(tensors))
        meta._check_buffer_shapes()
        object.__setattr__(meta, "device", tensors["slot_mapping"].device)
        return meta

    def refresh_host(self, **host: Any) -> None:
        """Static metadata only: the host values of what ``StaticDecode.fill`` just wrote to
        the buffers (the four ``*_cpu`` owner fields, checked as when made). A refusal leaves
        the metadata as it was."""
        if not self._static:
            fail("AK405", "refresh_host is for static (CUDA-graph) metadata made by "
                          "BatchMetadata.on_buffers; build a new BatchMetadata instead",
                 field="meta", expected="static metadata", actual="a BatchMetadata")
        _host_names(host, every=False)
        old = {name: getattr(self, name) for name in (*HOST_FIELDS, "_facts")}
        try:
            for name, value in host.items():
                object.__setattr__(self, name, value)
            self._check_host()
            self._check_buffer_shapes()
        except BaseException:
            for name, value in old.items():
                object.__setattr__(self, name, value)
            raise

    def _check_buffer_shapes(self) -> None:
        """Static metadata: each buffer has the length the host values give it (no device
        sync; its values are the writer's, StaticDecode.fill)."""
        b, t = self.num_reqs, self.num_tokens
        want = {"query_start_loc": b + 1, "seq_lens": b, "prefix_lens": b, "block_tables": b,
                "slot_mapping": t, "positions": t}
        for name, n in want.items():
            shape = tuple(self._tensors[name].shape)
            if not shape or shape[0] != n or len(shape) != (2 if name == "block_tables" else 1):
                fail("AK405", f"buffer {name} has shape {list(shape)} but the host values describe "
                              f"{b} request(s) and {t} token(s)", field=f"tensors.{name}",
                     expected=n, actual=list(shape))

    def _check_host(self) -> None:
        """Normalise and check the host values (AK405/AK406); no tensors."""
        freeze = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        try:
            freeze("mode", ForwardMode(self.mode))
        except ValueError:
            fail("AK406", f"mode must be a ForwardMode, got {self.mode!r}", field="meta.mode",
                 expected=[m.value for m in ForwardMode], actual=repr(self.mode))
        b = len(_ints("seq_lens_cpu", self.seq_lens_cpu))
        derived = self.slot_mapping_cpu is None
        for name in ("seq_lens_cpu", "prefix_lens_cpu") + (() if derived else ("slot_mapping_cpu",)):
            freeze(name, _ints(name, getattr(self, name)))
        freeze("block_tables_cpu", _rows("block_tables_cpu", self.block_tables_cpu))
        enc = self.encoder_lens_cpu is not None
        if enc:
            freeze("encoder_lens_cpu", _ints("encoder_lens_cpu", self.encoder_lens_cpu))
            freeze("encoder_block_tables_cpu",
                   _rows("encoder_block_tables_cpu", self.encoder_block_tables_cpu or ()))
        if self.encoder_slot_mapping_cpu is not None:
            if not enc:
                fail("AK405", "meta.encoder_slot_mapping_cpu is set but encoder_lens_cpu is None: encoder "
                              "K/V slots without encoder lengths", field="meta.encoder_slot_mapping_cpu",
                     expected="None without encoder_lens_cpu", actual=repr(self.encoder_slot_mapping_cpu)[:80])
            freeze("encoder_slot_mapping_cpu",
                   _ints("encoder_slot_mapping_cpu", self.encoder_slot_mapping_cpu))
        if enc and any(n < 0 for n in self.encoder_lens_cpu):
            fail("AK405", f"meta.encoder_lens_cpu must be >= 0, got {list(self.encoder_lens_cpu)}",
                 field="meta.encoder_lens_cpu", expected=">= 0", actual=list(self.encoder_lens_cpu))
        counts = {"prefix_lens_cpu": len(self.prefix_lens_cpu),
                  "block_tables_cpu": len(self.block_tables_cpu)}
        if enc:
            counts |= {"encoder_lens_cpu": len(self.encoder_lens_cpu),
                       "encoder_block_tables_cpu": len(self.encoder_block_tables_cpu)}
        for name, n in counts.items():
            if n != b:
                fail("AK405", f"meta.{name} has {n} entries but the batch has {b} requests "
                              f"(len(seq_lens_cpu))", field=f"meta.{name}", expected=b, actual=n)
        check_page_size(self.page_size, field="meta.page_size")
        new = [s - p for s, p in zip(self.seq_lens_cpu, self.prefix_lens_cpu)]
        if any(p < 0 for p in self.prefix_lens_cpu) or any(n < 1 for n in new):
            fail("AK405", f"every request needs prefix_len >= 0 and at least one new token "
                          f"(seq_len > prefix_len); got seq_lens {list(self.seq_lens_cpu)}, "
                          f"prefix_lens {list(self.prefix_lens_cpu)}",
                 field="meta.seq_lens_cpu", expected="seq_len > prefix_len >= 0",
                 actual={"seq_lens": list(self.seq_lens_cpu), "prefix_lens": list(self.prefix_lens_cpu)})
        facts = table_facts(self.block_tables_cpu, self.prefix_lens_cpu, self.seq_lens_cpu,
                            self.page_size, derived=derived)
        if derived and facts.short is not None:
            i = facts.short
            fail("AK405", f"meta.block_tables_cpu[{i}] = {list(self.block_tables_cpu[i])} does not "
                          f"name the {-(-self.seq_lens_cpu[i] // self.page_size)} page(s) of its "
                          f"{self.seq_lens_cpu[i]} tokens, so no slot mapping can be derived from it",
                 field=f"meta.block_tables_cpu[{i}]", expected="page ids >= 0 for every token",
                 actual=list(self.block_tables_cpu[i]))
        object.__setattr__(self, "_facts", facts)
        if derived:
            freeze("slot_mapping_cpu", derive_slots(self.block_tables_cpu, self.prefix_lens_cpu,
                                                    self.seq_lens_cpu, self.page_size))
        elif len(self.slot_mapping_cpu) != sum(new):
            fail("AK405", f"meta.slot_mapping_cpu has {len(self.slot_mapping_cpu)} slots for "
                          f"{sum(new)} new tokens", field="meta.slot_mapping_cpu",
                 expected=sum(new), actual=len(self.slot_mapping_cpu))

    # ---- host values derived from the owners ------------------------------------------
    @property
    def query_lens_cpu(self) -> tuple[int, ...]:
        """New tokens per request (seq_len - prefix_len)."""
        return tuple(s - p for s, p in zip(self.seq_lens_cpu, self.prefix_lens_cpu))

    @property
    def num_reqs(self) -> int:
        return len(self.seq_lens_cpu)

    @property
    def num_tokens(self) -> int:
        return len(self.slot_mapping_cpu)

    @property
    def max_query_len(self) -> int:
        return max(self.query_lens_cpu, default=0)

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens_cpu, default=0)

    @property
    def has_encoder(self) -> bool:
        return self.encoder_lens_cpu is not None

    # ---- device tensors, built from the host values -----------------------------------
    @property
    def query_start_loc(self):
        return self._tensors["query_start_loc"]

    @property
    def seq_lens(self):
        return self._tensors["seq_lens"]

    @property
    def prefix_lens(self):
        return self._tensors["prefix_lens"]

    @property
    def block_tables(self):
        return self._tensors["block_tables"]

    @property
    def slot_mapping(self):
        return self._tensors["slot_mapping"]

    @property
    def positions(self):
        return self._tensors["positions"]

    @property
    def encoder_lens(self):
        return self._tensors.get("encoder_lens")

    @property
    def encoder_block_tables(self):
        return self._tensors.get("encoder_block_tables")

    @property
    def encoder_slot_mapping(self):
        return self._tensors.get("encoder_slot_mapping")


HOST_FIELDS = ("seq_lens_cpu", "prefix_lens_cpu", "block_tables_cpu", "slot_mapping_cpu")
BUFFERS = ("query_start_loc", "seq_lens", "prefix_lens", "block_tables", "slot_mapping", "positions")


def _host_names(host: dict, *, every: bool) -> None:
    """on_buffers / refresh_host take the four host owner fields (all of them when made)."""
    unknown, missing = sorted(set(host) - set(HOST_FIELDS)), sorted(set(HOST_FIELDS) - set(host))
    if unknown or (every and missing):
        fail("AK405", f"static metadata's host values are {', '.join(HOST_FIELDS)}; "
                      + (f"unknown: {', '.join(unknown)}" if unknown else f"missing: {', '.join(missing)}"),
             field="host", expected=list(HOST_FIELDS), actual=unknown or missing)


def is_int(value: Any) -> bool:
    """True for ints and int-like values (numpy/torch integers), False for bool and floats."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _ints(name: str, values: Any) -> tuple[int, ...]:
    try:
        items = list(values)
    except TypeError:
        items = None
    if items is not None and all(type(v) is int for v in items):     # the common case, fast
        return tuple(items)
    if items is None or not all(is_int(v) for v in items):
        fail("AK405", f"meta.{name} must be a sequence of ints, got {values!r}",
             field=f"meta.{name}", expected="a sequence of ints", actual=repr(values))
    return tuple(operator.index(v) for v in items)


def _rows(name: str, rows: Any) -> tuple[tuple[int, ...], ...]:
    """A table of int rows, padded with -1 to the longest."""
    try:
        items = list(rows)
    except TypeError:
        fail("AK405", f"meta.{name} must be a sequence of page-id rows, got {rows!r}",
             field=f"meta.{name}", expected="a sequence of int rows", actual=repr(rows))
    out = [_ints(f"{name}[{i}]", row) for i, row in enumerate(items)]
    width = max((len(r) for r in out), default=0)
    return tuple(r + (-1,) * (width - len(r)) for r in out)
