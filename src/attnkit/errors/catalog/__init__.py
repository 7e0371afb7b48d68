"""The error catalog: one entry per code, split by range into one module each.

Every module in this package defines ``ENTRIES``; all are collected. Ranges: 1xx model/backend
mismatch, 2xx platform and installation, 3xx configuration conflicts, 4xx runtime inputs,
5xx model config parsing, 9xx internal.
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
    # (field, its solutions): an error raised with that ``field`` and no solutions of its own
    # offers these, not every solution of the page ("*": any other field)
    fixes: tuple[tuple[str, tuple[str, ...]], ...] = field(default_factory=tuple)

    def solutions_for(self, field_name: str | None) -> tuple[str, ...]:
        """The solutions that apply to an error about ``field_name`` (all of them without ``fixes``)."""
        by_field = dict(self.fixes)
        return by_field.get(field_name or "", by_field.get("*", self.solutions))


def entry(code, title, *, meaning, trigger, situations, solutions, before, after, related=(), fixes=None):
    """Build an ErrorEntry; keyword names mirror the page sections. ``fixes``: field -> the
    solutions (of ``solutions``, or narrower) an error about that field offers."""
    return ErrorEntry(code, title, meaning, trigger, tuple(situations), tuple(solutions),
                      before, after, tuple(related),
                      tuple((k, tuple(v)) for k, v in (fixes or {}).items()))


def _collect() -> dict[str, ErrorEntry]:
    import importlib
    import pkgutil

    out: dict[str, ErrorEntry] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for e in getattr(module, "ENTRIES", ()):
            if e.code in out:
                raise RuntimeError(f"duplicate error code {e.code} in the catalog")
            out[e.code] = e
    return dict(sorted(out.items()))


CATALOG: dict[str, ErrorEntry] = _collect()
