"""Device profiles: what ``attnkit tune`` measured on one device, read torch-free.

A profile is one JSON file (schema: docs/profile.md). It says which device and software it
was measured with, how it was timed, and one entry per (backend, shape bucket): the status
(ok / wrong / error / skipped), the times, and the work done (bytes or FLOPs) so that a rate
follows. ``attnkit tune`` writes profiles; nothing here measures anything.

Which profile a plan uses: planning/profile_search.py.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit.errors import AttnkitError
from attnkit.registry.capabilities import DTYPES, KINDS, KV_CACHE_DTYPES

SCHEMA = "attnkit-profile"
VERSION = 1
STATUSES = ("ok", "wrong", "error", "skipped")
UNITS = {"decode": "GB/s", "prefill": "TFLOP/s", "varlen": "TFLOP/s"}  # work: bytes of K/V read, or FLOPs
# "varlen": the varlen call (packed non-causal sequences, no KV cache); its buckets measure kernel
# variants only (the kernel table of the varlen role), never the ranking of backends
MAX_BYTES = 256 << 20     # a profile larger than this is not one tune wrote (--profile /dev/zero)


@dataclass(frozen=True)
class Shape:
    """What a model fixes about a step's work: kind, per-rank query and KV heads, q/k and value
    head dims (MLA: nope + rope, and v; ``kv_heads`` 1, plus the latent sizes), the compute
    dtype and the KV-cache dtype."""
    kind: str
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    dtype: str
    kv_dtype: str
    kv_lora_rank: int | None = None
    rope_dim: int | None = None
    # DeepSeek sparse attention (docs/dsa.md): the top-k and the indexer's heads and head dim;
    # None for dense layers. A DSA layer's work differs (top-k latent rows per query plus the
    # indexer over every key), so its buckets are its own.
    topk: int | None = None
    index_heads: int | None = None
    index_dim: int | None = None

    def label(self) -> str:
        """``32/8 heads, d128, bf16`` (MLA: ``128 heads, latent 512+64, bf16``; DSA adds
        ``top-k 2048, indexer 64x128``), KV dtype if other."""
        heads = (f"{self.heads} heads, latent {self.kv_lora_rank}+{self.rope_dim}" if self.kind == "mla"
                 else f"{self.heads}/{self.kv_heads} heads, d{self.head_dim}")
        if self.topk is not None:
            heads += f", top-k {self.topk}, indexer {self.index_heads}x{self.index_dim}"
        kv = "" if self.kv_dtype == self.dtype else f", {self.kv_dtype} KV"
        return f"{heads}, {self.dtype}{kv}"


@dataclass(frozen=True)
class Bucket:
    """One measured step: a shape and a phase, ``batch`` requests of ``new`` tokens each,
    ``context`` = KV length after the step (decode: new = 1; prefill without a cached prefix:
    context = new). In the file it is one flat object (the shape's keys and these)."""
    shape: Shape
    phase: str
    batch: int
    new: int
    context: int
    page_size: int

    @property
    def prefix(self) -> int:
        return self.context - self.new

    def static(self) -> tuple:
        """What a model fixes (everything but batch and lengths)."""
        return (self.phase, self.shape)

    def runtime(self) -> tuple[int, int, int]:
        """What each step varies: (batch, new, context)."""
        return (self.batch, self.new, self.context)

    def to_dict(self) -> dict[str, Any]:
        shape = {k: v for k, v in self.shape.__dict__.items() if v is not None}
        return {**shape, "phase": self.phase, "batch": self.batch, "new": self.new, "context": self.context,
                "page_size": self.page_size}

    def label(self) -> str:
        """``B=64 ctx=4096`` (decode), ``new=2048 prefix=32768`` (prefill), ``B=1 tokens=4608``
        (varlen: sequences of ``new`` queries and ``context`` keys)."""
        if self.phase == "decode":
            return f"B={self.batch} ctx={self.context}"
        if self.phase == "varlen":
            return f"B={self.batch} tokens={self.new}" + (f" keys={self.context}" if self.context != self.new else "")
        return f"new={self.new} prefix={self.prefix}" + (f" B={self.batch}" if self.batch > 1 else "")


_OPTIONAL = ("kv_lora_rank", "rope_dim", "topk", "index_heads", "index_dim")
_SPARSE = ("topk", "index_heads", "index_dim")
_STEP_FIELDS = {"phase": "str", "batch": "int", "new": "int", "context": "int", "page_size": "int"}


@dataclass(frozen=True)
class Entry:
    """One backend on one bucket. ``graph_ms``: median of CUDA-graph replays of forward (None
    where the call cannot be captured); ``eager_ms``: median of plain calls. Only ``ok``
    entries have times; ``note`` says why not (or how it was timed)."""
    backend: str
    bucket: Bucket
    status: str
    work: float
    graph_ms: float | None = None
    eager_ms: float | None = None
    rel_err: float | None = None
    note: str = ""
    variant: str | None = None      # the backend's kernel variant timed (None: its only kernel)

    @property
    def unit(self) -> str:
        return UNITS[self.bucket.phase]

    def rate(self, method: str) -> float | None:
        """GB/s (decode) or TFLOP/s (prefill) by ``method`` ("graph" or "eager"), None if untimed."""
        ms = self.graph_ms if method == "graph" else self.eager_ms
        if self.status != "ok" or not ms:
            return None
        return self.work / ms / (1e6 if self.bucket.phase == "decode" else 1e9)

    def key(self) -> tuple:
        return (self.backend, self.bucket, self.variant)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, **({"variant": self.variant} if self.variant else {}),
                "phase": self.bucket.phase, "bucket": self.bucket.to_dict(),
                "status": self.status, "work": self.work, "unit": self.unit,
                "graph_ms": self.graph_ms, "eager_ms": self.eager_ms,
                "rate_graph": _round(self.rate("graph")), "rate_eager": _round(self.rate("eager")),
                "rel_err": self.rel_err, "note": self.note}


@dataclass(frozen=True)
class Profile:
    device: dict[str, Any]          # kind, name, capability ([major, minor] or None), ...
    software: dict[str, Any]
    date: str
    method: dict[str, Any]
    entries: tuple[Entry, ...]
    smoke: bool = False
    header: dict[str, Any] = field(default_factory=dict)     # every other top-level key, kept
    path: str | None = None
    source: str | None = None       # "--profile", "ATTNKIT_PROFILE", "cache" or "shipped"

    @property
    def name(self) -> str:
        return f"{self.device['name']} profile {self.date}" + (" (smoke)" if self.smoke else "")

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON (what ``attnkit tune`` writes)."""
        return {**self.header, "schema": SCHEMA, "version": VERSION, "device": self.device,
                "software": self.software, "date": self.date, "smoke": self.smoke,
                "method": self.method, "entries": [e.to_dict() for e in self.entries]}

    def info(self) -> dict[str, Any]:
        """What ``Plan.to_dict()["profile"]`` shows of it."""
        path = f"attnkit/planning/profiles/{Path(self.path).name}" if self.source == "shipped" else self.path
        return {"source": self.source, "path": path, "device": self.device.get("name"),
                "capability": self.device.get("capability"), "date": self.date, "smoke": self.smoke}


# ---- reading and checking --------------------------------------------------------------------

def load_profile(path: str | os.PathLike, *, source: str | None = None) -> Profile:
    """Read and check one profile file: AK230 if it cannot be read, AK231 if it is malformed."""
    p = Path(path)
    raw = read_bytes(p)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise malformed(p, "", f"not UTF-8 text (byte {exc.start}): not a profile attnkit tune wrote") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise malformed(p, "", "not a profile: JSON nested too deep to read") from None
    except ValueError as exc:
        raise malformed(p, "", f"not JSON ({exc})") from None
    return dataclasses.replace(parse_profile(data, where=str(p)), path=str(p), source=source)


def read_bytes(p: Path) -> bytes:
    """The file's bytes: AK230 unless it is a readable regular file (a FIFO would block, a
    device like /dev/zero never ends), AK231 past MAX_BYTES."""
    def unreadable(why: str) -> AttnkitError:
        return AttnkitError("AK230", f"cannot read profile {str(p)!r}: {why}", field="profile",
                            expected="a readable JSON file written by attnkit tune", actual=str(p))
    try:
        info = p.stat()
        if not stat.S_ISREG(info.st_mode):
            raise unreadable("not a regular file")
        with p.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise unreadable(str(exc.strerror or exc)) from None
    if len(raw) > MAX_BYTES:
        raise malformed(p, "", f"larger than {MAX_BYTES >> 20} MiB: not a profile attnkit tune wrote")
    return raw


def parse_profile(data: Any, *, where: str = "<profile>") -> Profile:
    """A Profile from parsed JSON; AK231 naming the first field that is wrong."""
    top = _obj(data, where, "")
    if top.get("schema") != SCHEMA:
        raise malformed(where, "schema", f"must be {SCHEMA!r}, got {top.get('schema')!r}")
    if not _is_int(top.get("version")) or top.get("version") != VERSION:
        raise malformed(where, "version", f"must be {VERSION} (this attnkit reads version {VERSION}), "
                                          f"got {top.get('version')!r}")
    device = _obj(top.get("device"), where, "device")
    for key in ("kind", "name"):
        _str(device.get(key), where, f"device.{key}")
    cap = device.get("capability")
    if cap is not None and not (isinstance(cap, list) and len(cap) == 2 and all(_is_int(c) for c in cap)):
        raise malformed(where, "device.capability", f"must be [major, minor] or null, got {cap!r}")
    software = _obj(top.get("software"), where, "software")
    method = _obj(top.get("method"), where, "method")
    date = _str(top.get("date"), where, "date")
    smoke = top.get("smoke", False)
    if not isinstance(smoke, bool):
        raise malformed(where, "smoke", f"must be true or false, got {smoke!r}")
    rows = top.get("entries")
    if not isinstance(rows, list):
        raise malformed(where, "entries", f"must be a list, got {type(rows).__name__}")
    entries = tuple(_entry(row, where, f"entries[{i}]") for i, row in enumerate(rows))
    known = {"schema", "version", "device", "software", "date", "smoke", "method", "entries"}
    return Profile(device=dict(device), software=dict(software), date=date, method=dict(method),
                   entries=entries, smoke=smoke, header={k: v for k, v in top.items() if k not in known})


def _entry(row: Any, where: str, at: str) -> Entry:
    row = _obj(row, where, at)
    backend = _str(row.get("backend"), where, f"{at}.backend")
    variant = None if row.get("variant") is None else _str(row.get("variant"), where, f"{at}.variant")
    raw = _obj(row.get("bucket"), where, f"{at}.bucket")
    types = {**{n: f.type for n, f in Shape.__dataclass_fields__.items()}, **_STEP_FIELDS}
    values = {}
    for name, kind in types.items():
        v = raw.get(name)
        if v is None and name in _OPTIONAL:
            values[name] = None
        elif kind == "str":
            values[name] = _str(v, where, f"{at}.bucket.{name}")
        elif not (_is_int(v) and v >= 1):
            raise malformed(where, f"{at}.bucket.{name}", f"must be an integer >= 1, got {v!r}")
        else:
            values[name] = v
    for name, allowed in (("kind", KINDS), ("phase", tuple(UNITS)), ("dtype", DTYPES), ("kv_dtype", KV_CACHE_DTYPES)):
        if values[name] not in allowed:
            raise malformed(where, f"{at}.bucket.{name}", f"must be one of {', '.join(allowed)}, "
                                                          f"got {values[name]!r}")
    if values["kind"] == "mla" and (values["kv_lora_rank"] is None or values["rope_dim"] is None):
        raise malformed(where, f"{at}.bucket", "an mla bucket needs kv_lora_rank and rope_dim")
    given = [values[n] is not None for n in _SPARSE]
    if any(given) and not (all(given) and values["kind"] == "mla"):
        raise malformed(where, f"{at}.bucket", "a DSA bucket is an mla bucket with all of topk, "
                                               "index_heads and index_dim")
    bucket = Bucket(Shape(**{n: values.pop(n) for n in Shape.__dataclass_fields__}), **values)
    if bucket.new > bucket.context:
        raise malformed(where, f"{at}.bucket", f"new ({bucket.new}) exceeds context ({bucket.context})")
    if row.get("phase", bucket.phase) != bucket.phase:
        raise malformed(where, f"{at}.phase", f"{row.get('phase')!r} differs from bucket.phase {bucket.phase!r}")
    status = row.get("status")
    if status not in STATUSES:
        raise malformed(where, f"{at}.status", f"must be one of {', '.join(STATUSES)}, got {status!r}")
    work = row.get("work")
    if not (_is_num(work) and work > 0):
        raise malformed(where, f"{at}.work", f"must be a number > 0, got {work!r}")
    times = {}
    for key in ("graph_ms", "eager_ms", "rel_err"):
        v = row.get(key)
        if v is not None and not (_is_num(v) and v >= 0):
            raise malformed(where, f"{at}.{key}", f"must be a number >= 0 or null, got {v!r}")
        times[key] = v
    if status == "ok" and not (times["graph_ms"] or times["eager_ms"]):
        raise malformed(where, f"{at}", "status ok needs graph_ms or eager_ms")
    for key in ("graph_ms", "eager_ms"):      # work / time must be a rate (1e300 / 1e-10 is not)
        ms = times[key]
        if ms and not math.isfinite(work / ms / (1e6 if bucket.phase == "decode" else 1e9)):
            raise malformed(where, f"{at}.{key}", f"work {work!r} over {ms!r} ms is not a finite rate")
    note = row.get("note") or ""
    if not isinstance(note, str):
        raise malformed(where, f"{at}.note", f"must be a string, got {type(note).__name__}")
    return Entry(backend, bucket, status, float(work), note=note, variant=variant, **times)


def malformed(where: Any, at: str, what: str) -> AttnkitError:
    return AttnkitError("AK231", f"profile {str(where)!r}: {at + ' ' if at else ''}{what}",
                        field=at or "profile", expected=f"{SCHEMA} version {VERSION} (docs/profile.md)",
                        actual=what)


def _obj(v: Any, where: str, at: str) -> dict:
    if not isinstance(v, dict):
        raise malformed(where, at, f"must be an object, got {type(v).__name__}")
    return v


def _str(v: Any, where: str, at: str) -> str:
    if not isinstance(v, str) or not v:
        raise malformed(where, at, f"must be a non-empty string, got {v!r}")
    return v


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")
