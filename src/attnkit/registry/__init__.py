"""The backend registry: the capability vocabulary, declaration discovery, ``load_backend``.

Torch-free, and below both ``planning/`` (which reads declarations to choose) and
``backends/`` (whose declarations are written in its vocabulary). It imports neither: it finds
each ``attnkit/backends/<name>/declaration.py`` by walking that package, and imports a
backend's implementation only in ``load_backend``, by the declaration's ``impl`` path.

- ``capabilities``: ``BackendDeclaration``, ``Capabilities`` and the fixed vocabulary
  (platform kinds, dtypes, features ...), plain data;
- ``names``: backend names as users type them (aliases, typos, other engines' names);
- ``discovery``: ``declarations()``, ``aliases()``, ``load_backend(name, **options)``.
"""
from attnkit.registry.capabilities import (BackendDeclaration, Capabilities, MultipleOf,
                                           Verified)
from attnkit.registry.discovery import aliases, declarations, load_backend

__all__ = ["BackendDeclaration", "Capabilities", "MultipleOf", "Verified", "aliases",
           "declarations", "load_backend"]
