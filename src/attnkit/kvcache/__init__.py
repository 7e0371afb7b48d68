"""Paged KV cache and page allocator."""
