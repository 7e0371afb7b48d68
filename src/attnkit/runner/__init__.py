"""Minimal engine pieces that sit above the attention backends.

``runner.rotary``: ordinary rotary embeddings and the dual-chunk (DCA) rotation that feeds
the ``dual_chunk`` backend. Whole-model execution is not here yet.
Importing this package imports nothing heavy; submodules import torch.
"""
