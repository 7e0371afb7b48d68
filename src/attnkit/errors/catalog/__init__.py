"""The error catalog: one entry per code, split by range into one module each.

1xx model/backend mismatch (model.py), 2xx platform and installation (platform.py),
3xx configuration conflicts (config.py), 4xx runtime inputs (runtime.py),
5xx model config parsing (parsing.py), 9xx internal (internal.py).
docs/errors/ is generated from this catalog (``python -m attnkit.errors.docs``).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ErrorEntry:
    code: str
    title: str
    meaning: str
    trigger: str
    situations: tuple[str, ...]
    solutions: tuple[str, ...]
    example_before: str
    example_after: str
    related: tuple[str, ...] = field(default_factory=tuple)


def entry(code, title, *, meaning, trigger, situations, solutions, before, after, related=()):
    """Build an ErrorEntry; keyword names mirror the page sections."""
    return ErrorEntry(code, title, meaning, trigger, tuple(situations), tuple(solutions),
                      before, after, tuple(related))


def _collect() -> dict[str, ErrorEntry]:
    from attnkit.errors.catalog import config, internal, model, parsing, platform, runtime

    out: dict[str, ErrorEntry] = {}
    for module in (model, platform, config, runtime, parsing, internal):
        for e in module.ENTRIES:
            if e.code in out:
                raise RuntimeError(f"duplicate error code {e.code} in the catalog")
            out[e.code] = e
    return dict(sorted(out.items()))


CATALOG: dict[str, ErrorEntry] = _collect()
