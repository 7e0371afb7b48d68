"""attnkit errors: one exception type carrying a stable code and structured data.

Every user-reachable failure is ``AttnkitError(code, message, field=, expected=, actual=)``.
The code's catalog entry (``attnkit explain CODE``) says what it means and how to fix it.
"""
from __future__ import annotations

from typing import Any

from attnkit.errors.catalog import CATALOG, ErrorEntry, entry

__all__ = ["AttnkitError", "fail", "preview", "CATALOG", "ErrorEntry", "entry"]


class AttnkitError(Exception):
    """An attnkit failure with a stable code (``AK`` + 3 digits) and the values involved."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        expected: Any = None,
        actual: Any = None,
        solutions: list[str] | None = None,
        details: dict[str, Any] | None = None,
    ):
        if code not in CATALOG:
            # An uncatalogued code is an internal bug; keep the message, flag the code.
            message = f"{message} [internal: code {code} has no catalog entry]"
        self.code = code
        self.message = message
        self.field = field
        self.expected = expected
        self.actual = actual
        self.solutions = (list(solutions) if solutions else
                          list(CATALOG[code].solutions_for(field)) if code in CATALOG else [])
        self.details = dict(details or {})
        super().__init__(f"{code}: {message}")

    @property
    def title(self) -> str:
        return CATALOG[self.code].title if self.code in CATALOG else "unknown error"

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "title": self.title,
            "message": self.message,
            "field": self.field,
            "expected": _jsonable(self.expected),
            "actual": _jsonable(self.actual),
            "solutions": self.solutions,
            "details": {k: _jsonable(v) for k, v in self.details.items()},
        }


def fail(code: str, message: str, **kwargs: Any) -> "AttnkitError":
    """Raise ``AttnkitError``; written as ``raise fail(...)`` reads too, so both work."""
    raise AttnkitError(code, message, **kwargs)


def preview(value: Any, limit: int = 80) -> str:
    """repr(value) cut to ``limit`` characters, for a message, whatever the value: a very deep
    list or a 5000-digit integer cannot be printed (RecursionError, ValueError)."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return f"<{type(value).__name__} too large to print>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)
