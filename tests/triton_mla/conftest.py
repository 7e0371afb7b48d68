"""Run the triton_mla kernels on CPU through the Triton interpreter when there is no CUDA.

TRITON_INTERPRET is read when a kernel is decorated, so it is set here, before any test
module imports attnkit.backends.triton_mla. It only changes how @triton.jit functions run
in this (xdist worker) process; code that never calls a Triton kernel is unaffected.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
