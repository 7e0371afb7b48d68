"""Paged KV cache (``PagedKVCache``, MHA and MLA layouts) and page allocator (``PageAllocator``).

Importing this package imports nothing heavy; each name is loaded (the cache with torch) on
first use.
"""

__all__ = ["PageAllocator", "PagedKVCache"]
_HOMES = {"PageAllocator": "allocator", "PagedKVCache": "paged"}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"attnkit.kvcache.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'attnkit.kvcache' has no attribute {name!r}")
