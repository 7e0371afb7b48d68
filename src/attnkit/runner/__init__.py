"""The minimal engine: real model architectures on attnkit attention and the paged KV cache.

``Engine`` (engine.py) loads a local checkpoint, plans its backends through ``attnkit.plan``
and runs prefill / decode / mixed steps; ``rotary`` holds ordinary rotary embeddings and the
dual-chunk (DCA) rotation that feeds the ``dual_chunk`` backend. See docs/runner.md.
Importing this package imports nothing heavy; ``Engine`` is loaded (with torch) on first use.
"""

__all__ = ["Engine"]


def __getattr__(name: str):
    if name == "Engine":
        from attnkit.runner.engine import Engine

        return Engine
    raise AttributeError(f"module 'attnkit.runner' has no attribute {name!r}")
