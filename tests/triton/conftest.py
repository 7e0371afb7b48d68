"""Run the triton backend's kernels on CPU through the Triton interpreter when there is no CUDA.

TRITON_INTERPRET is read when a kernel is decorated (@triton.jit at import), so it is set
here, before the test modules import attnkit.backends.triton. Without CUDA nothing else in
this (xdist worker) process can run a Triton kernel anyway, so the setting changes no other
test. Should a module of the suite have imported the kernels before this conftest ran, they
are re-imported so their kernels are decorated for the interpreter.
"""
import importlib
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    for name in ("_common", "extend", "decode", "backend"):
        module = sys.modules.get(f"attnkit.backends.triton.{name}")
        if module is not None:
            importlib.reload(module)


import pytest  # noqa: E402


@pytest.fixture
def run_triton():
    """run_triton(case, **backend_options) -> [T, H_q * D_v]: one prepare + forward."""
    from attnkit.backends.triton._common import interpreting
    from attnkit.backends.triton.backend import TritonBackend

    def run(case, **options):
        if case.q.device.type == "cpu" and not interpreting():
            pytest.skip("interpreter test on a CUDA machine: test_triton_gpu.py covers the GPU")
        backend = TritonBackend(**options)
        step = backend.prepare(case.meta, case.cache)
        return backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    return run
