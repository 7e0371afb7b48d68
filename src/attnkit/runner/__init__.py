"""Minimal engine pieces that sit above the attention backends.

``runner.rotary``: ordinary rotary embeddings and the dual-chunk (DCA) rotation that feeds
the ``dual_chunk`` backend. Whole-model execution is not here yet.
Importing this package imports nothing heavy; submodules import torch.
"""

# Exports (runner engineer). Lazy, so importing attnkit.runner stays torch-free.
__all__ = ["Engine"]


def __getattr__(name: str):
    if name == "Engine":
        from attnkit.runner.engine import Engine

        return Engine
    raise AttributeError(f"module 'attnkit.runner' has no attribute {name!r}")
