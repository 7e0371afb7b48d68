"""Paged KV cache and page allocator."""
from attnkit.kvcache.allocator import PageAllocator

__all__ = ["PageAllocator"]
