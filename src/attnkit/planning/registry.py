"""The backend registry: every ``attnkit/backends/<name>/declaration.py`` in the tree.

Discovery reads declaration modules only (torch-free); ``load_backend`` imports the
implementation lazily, by its ``impl`` path, when something runs.
"""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from attnkit.planning.capabilities import BackendDeclaration


@lru_cache(maxsize=1)
def declarations() -> dict[str, BackendDeclaration]:
    """name -> declaration, for every backend package that has a declaration module."""
    import attnkit.backends as pkg

    found: dict[str, BackendDeclaration] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        try:
            module = importlib.import_module(f"attnkit.backends.{info.name}.declaration")
        except ModuleNotFoundError as exc:
            if exc.name == f"attnkit.backends.{info.name}.declaration":
                continue
            raise
        decl = getattr(module, "DECLARATION", None)
        if isinstance(decl, BackendDeclaration):
            found[decl.name] = decl
    return found


def aliases() -> dict[str, tuple[str, str]]:
    """old name -> (current name, deprecation note)."""
    return {old: (d.name, note) for d in declarations().values() for old, note in d.aliases.items()}


def load_backend(name: str, **kwargs):
    """Instantiate the implementation of a registered backend (imports torch etc.)."""
    decl = declarations()[name]
    module_name, _, cls_name = decl.impl.partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    return cls(**kwargs)
