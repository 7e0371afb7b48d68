"""What rules and failure builders may read of a planning run: one read-only snapshot.

The solver (solver.py) owns the mutable state; it hands out a ``View`` built from it, so a
rule or an error builder reads the model, the request and the choices so far, and can ask
for a candidate's reasons, but changes nothing and never imports the solver.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from attnkit.model.spec import ModelAttention
from attnkit.planning.reasons import ModelNeeds, Reason
from attnkit.planning.request import PlanRequest
from attnkit.registry.capabilities import BackendDeclaration


@dataclass(frozen=True)
class Release:
    """How the user takes back a backend a rule chose, should that backend not serve: the
    error to raise (``code``, naming ``field`` = ``actual``), the request ``changes`` that turn
    the rule off (for the example command) and the fix in words."""
    code: str                    # e.g. "AK302"
    field: str                   # e.g. "dual_chunk"
    actual: Any                  # e.g. "on"
    changes: Mapping[str, Any]   # e.g. {"dual_chunk": "off"}
    fix: str


@dataclass(frozen=True)
class View:
    """A planning run as of now. Mappings are read-only; ``reasons`` / ``pool`` / ``entry``
    / ``command`` read the run's memo and tables.

    request: the request after environment variables and name resolution; typed: as the
    user gave it (for the example commands). settings: the values so far (None = unset).
    """
    model: ModelAttention
    label: str                                   # the model as the user named it (commands)
    platform: Any
    request: PlanRequest
    typed: PlanRequest
    registry: Mapping[str, BackendDeclaration]
    settings: Mapping[str, Any]
    backends: Mapping[str, str | None]           # phase -> chosen backend (None = not yet); "extend":
                                                 # a separate backend for steps over a cached prefix
    explicit: Mapping[str, str | None]           # phase -> backend the user named
    chosen_by: Mapping[str, str]                 # phase -> rule that chose its backend
    releases: Mapping[str, Release]              # phase -> how to undo that rule's choice
    why: Mapping[str, str]
    phases: tuple[str, ...]
    needs: ModelNeeds                            # what every layer asks of attention
    env_used: Mapping[str, str]                  # ATTNKIT_* variables that changed the request
    command: Callable[..., str]                  # command(**changes) -> "attnkit plan ..." line
    reasons: Callable[[str, str], list[Reason]]  # reasons(phase, backend): every failed constraint
    pool: Callable[[str], list[str]]             # pool(phase): automatic candidates, priority order
    entry: Callable[[str], Any]                  # entry(phase): the priority-table entry or None
    page_gain: Callable[[int, list[int]], tuple[int, str] | None]   # page_gain(base, sizes): a size
                                                 # of sizes the profile measured the decode backend
                                                 # clearly faster at than base, and why; else None
