"""Conflict errors (3xx) with their fixes, built the same way wherever they arise.

``conflict`` is the one shape: code, message, field, actual, expected, every fix, and the
user's command before and after the first fix. The builders here serve both the rules
(rules.py) and the solver's failures (failures.py).
"""
from __future__ import annotations

from typing import Any

from attnkit.errors import AttnkitError
from attnkit.planning.suggest import nearest
from attnkit.planning.view import View


def conflict(code: str, message: str, *, field: str, actual: Any, expected: Any,
             solutions: list[str], before: str, after: str, **details: Any) -> AttnkitError:
    return AttnkitError(code, message, field=field, actual=actual, expected=expected,
                        solutions=solutions, details={"example_fix": {"before": before, "after": after}, **details})


def page_size_refused(v: View, message: str, valid: list[int], *, nearest_first: bool = False) -> AttnkitError:
    """AK303: the user's --page-size is refused (``message`` says by whom and why); ``valid``
    (ascending) are the sizes that would be accepted, the nearest three the fixes.
    ``nearest_first``: list ``valid`` by distance from the refused size, not ascending."""
    size = v.request.page_size
    near = nearest(valid, size)
    shown = sorted(valid, key=lambda s: (abs(s - size), s)) if nearest_first else valid
    return conflict("AK303", message.replace("{valid}", ", ".join(map(str, shown[:8])) or "none"),
                    field="page_size", actual=size, expected=shown,
                    solutions=[f"use --page-size {s}" for s in near] + ["omit --page-size"],
                    before=v.command(), after=v.command(page_size=near[0] if near else None))
