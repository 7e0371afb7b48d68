"""Run the triton_mla kernels on CPU through the Triton interpreter when there is no CUDA.

TRITON_INTERPRET is read when a kernel is decorated (@triton.jit at import), so it is set
here, before the test modules import attnkit.backends.triton_mla. Without CUDA nothing else
in this (xdist worker) process can run a Triton kernel anyway, so the setting changes no
other test (tests/triton/conftest.py does the same). Should another module of the suite
have imported the kernels first (the conformance suite loads every backend), they are
re-imported, the shared helpers (backends/triton/_common.py) first, then the kernels, then
the backend that binds them, so they run on the interpreter.
"""
import importlib
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    for name in ("triton._common", "triton_mla.decode", "triton_mla.extend", "triton_mla.backend"):
        module = sys.modules.get(f"attnkit.backends.{name}")
        if module is not None:
            importlib.reload(module)
