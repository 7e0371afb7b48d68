"""What running a backend takes, in one import (docs/backends.md):

    from attnkit.runtime import (RuntimeLayer, LayerAttention, PageAllocator, PagedKVCache,
                                 Request, build_batch, load_backend, reference)

Importing this module imports nothing heavy; each name is loaded (with torch) on first use.
``reference`` is the float64 reference module (``reference.attention(...)``); DeepSeek sparse
attention layers take ``IndexerInputs`` and have their own, ``reference_dsa`` (docs/dsa.md).
"""
from __future__ import annotations

import importlib

# name -> the module that defines it ("" = the name is that module itself)
_HOMES = {
    "load_backend": "attnkit.registry",
    "declarations": "attnkit.registry",
    "AttentionBackend": "attnkit.backends.base",
    "RuntimeLayer": "attnkit.backends.base",
    "StepState": "attnkit.backends.base",
    "HybridBackend": "attnkit.backends.hybrid",
    "BatchMetadata": "attnkit.backends.metadata",
    "ForwardMode": "attnkit.backends.metadata",
    "Request": "attnkit.backends.batch",
    "build_batch": "attnkit.backends.batch",
    "varlen_batch": "attnkit.backends.varlen",
    "VarlenBatch": "attnkit.backends.varlen",
    "PagedKVCache": "attnkit.kvcache.paged",
    "PageAllocator": "attnkit.kvcache.allocator",
    "LayerAttention": "attnkit.model.spec",
    "MLAConfig": "attnkit.model.spec",
    "DualChunkConfig": "attnkit.model.spec",
    "SparseTopK": "attnkit.model.spec",
    "IndexerInputs": "attnkit.backends.sparse",
    "reference": "",
    "reference_dsa": "",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'attnkit.runtime' has no attribute {name!r}")
    if home not in ("attnkit.registry", "attnkit.model.spec"):     # these two are torch-free
        from attnkit.hardware.detect import require_package

        require_package("torch", f"attnkit.runtime.{name}")
    if home == "":
        return importlib.import_module(f"attnkit.{name}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return __all__
