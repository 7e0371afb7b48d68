"""The backend registry: every ``attnkit/backends/<name>/declaration.py`` in the tree.

Discovery reads declaration modules only (torch-free); ``load_backend`` imports the
implementation lazily, by its ``impl`` path, when something runs.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings
from functools import lru_cache

from attnkit.registry.capabilities import BackendDeclaration


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


@lru_cache(maxsize=None)
def load_hook(path: str):
    """A declaration's "module:function" hook (``check``, ``page_sizes_for``,
    ``runtime_check``), imported once."""
    module, _, fn = path.partition(":")
    return getattr(importlib.import_module(module), fn)


def aliases() -> dict[str, tuple[str, str]]:
    """old name -> (current name, deprecation note)."""
    return {old: (d.name, note) for d in declarations().values() for old, note in d.aliases.items()}


def load_backend(name: str, **kwargs):
    """Instantiate the implementation of a registered backend (imports torch etc.).

    ``name`` as users type it: a deprecated alias loads its backend with a warning;
    anything else unknown is AK300 (with "did you mean") or AK301 (another engine's name).
    A package the backend needs that is missing is AK212; an option its constructor does not
    take is AK407."""
    from attnkit.errors import fail
    from attnkit.registry.names import resolve

    if not isinstance(name, str):
        fail("AK300", f"a backend name must be a string, got {name!r}", field="attention_backend",
             expected=sorted(declarations()), actual=repr(name))
    canonical, deprecated = resolve(name, declarations())
    if deprecated:
        warnings.warn(deprecated, UserWarning, stacklevel=2)      # as the runner warns for plans
    decl = declarations()[canonical]
    module_name, _, cls_name = decl.impl.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except ModuleNotFoundError as exc:
        if exc.name not in decl.capabilities.requires:
            raise
        fail("AK212", f"backend {canonical!r} needs the {exc.name} package, which is not installed",
             field="requires", expected=list(decl.capabilities.requires), actual=exc.name)
    params = inspect.signature(cls).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    options = sorted(p for p, v in params.items() if v.kind is v.KEYWORD_ONLY)
    unknown = sorted(set(kwargs) - set(params)) if not takes_any else []
    if unknown:
        fail("AK407", f"backend {canonical!r} has no option {', '.join(unknown)}; its options: "
                      f"{', '.join(options) or 'none'}", field=unknown[0], expected=options,
             actual=unknown)
    return cls(**kwargs)
