"""``plan()``'s keyword arguments beside the request (env, registry, table, profile): checked
once, before planning, so a wrong type is AK306 (AK230 for an empty profile path), never an
AttributeError from deep inside the solver. The request itself is planning/request.py's."""
from __future__ import annotations

import os
from typing import Any, Mapping

from attnkit.errors import AttnkitError, preview
from attnkit.planning.priorities import Priority
from attnkit.registry.capabilities import BackendDeclaration

# the environment variables planning reads (the solver, profile_search)
ENV_KEYS = ("ATTNKIT_ATTENTION_BACKEND", "ATTNKIT_DENY_BACKENDS", "ATTNKIT_PROFILE", "ATTNKIT_PROFILE_DIR",
            "XDG_CACHE_HOME", "HOME")


def check_options(*, env: Any, registry: Any, table: Any, profile: Any) -> None:
    if env is not None:
        if not isinstance(env, Mapping):
            raise _bad("env", "a mapping of environment variables (os.environ by default)", env)
        bad = next((k for k in ENV_KEYS if env.get(k) is not None and not isinstance(env.get(k), str)), None)
        if bad is not None:
            raise _bad(f"env[{bad!r}]", "a string, as environment variables are", env[bad])
    if registry is not None and not (isinstance(registry, Mapping) and all(
            isinstance(k, str) and isinstance(d, BackendDeclaration) for k, d in registry.items())):
        raise _bad("registry", "a mapping backend name -> BackendDeclaration (attnkit.registry.declarations())",
                   registry)
    if not isinstance(table, (tuple, list)) or not all(isinstance(p, Priority) for p in table):
        raise _bad("table", "a sequence of planning.priorities.Priority", table)
    if profile is not None and not isinstance(profile, (bool, str, os.PathLike)):
        raise _bad("profile", "a profile file path, None (find one) or False (none)", profile)
    if isinstance(profile, (str, os.PathLike)) and not os.fspath(profile):
        raise AttnkitError("AK230", "cannot read profile '': the path is empty (omit --profile to use the "
                           "cached or shipped profile)", field="profile",
                           expected="a readable JSON file written by attnkit tune", actual="")


def _bad(field: str, expected: str, value: Any) -> AttnkitError:
    shown = preview(value, 60)
    return AttnkitError("AK306", f"plan(): {field} must be {expected}, got {type(value).__name__} {shown}",
                        field=field, expected=expected, actual=shown)
