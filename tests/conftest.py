"""Suite-wide test setup. Shared input factories live in tests/factories.py and are imported
as ``from factories import make_case`` (pytest puts tests/ on sys.path for this conftest)."""
import os
import re

import pytest
import torch

# Without CUDA, Triton kernels run through the interpreter. TRITON_INTERPRET is read when a
# kernel is decorated (at import), so it is set here, before any test module imports a
# kernel; nothing else in a CPU-only process can run a Triton kernel, so no other test changes.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    """Under pytest-xdist each worker gets one torch thread: two workers on two cores that
    each spin up a thread pool fight each other and tiny ops slow down 100-fold."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


# The interpreter tier (marker ``interpreter``): Triton kernels run on the CPU through the
# Triton interpreter, the slowest third of the suite. The default run (pyproject's addopts:
# -m "not interpreter") leaves it out; `.ci/run` runs it by name (pytest -m interpreter).
INTERPRETER_PATHS = ("tests/triton_kernels/", "tests/triton_mla/", "tests/triton_dsa/", "tests/dual_chunk/test_dca_triton.py",
                     "tests/dual_chunk/test_dca_kernel_parts.py", "tests/runner/test_runner_graphs.py",
                     "tests/runner/test_runner_dsa_triton.py", "tests/runner/test_skinny.py")
# in these, the cases whose id names a Triton backend or the interpreter
MIXED_PATHS = ("tests/conformance/", "tests/dual_chunk/", "tests/backends/")
INTERPRETER_CASES = re.compile(r"\[(triton|triton_mla|triton_dsa)[-\]]|-interp-|-triton\]")


def _interpreter(item) -> bool:
    if "gpu" in item.keywords:
        return False                      # a GPU test runs kernels for real: never this tier
    path = item.nodeid.split("::")[0]
    return path.startswith(INTERPRETER_PATHS) or (path.startswith(MIXED_PATHS)
                                                  and bool(INTERPRETER_CASES.search(item.nodeid)))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need CUDA; skip them (with the reason) where there is none. Tests
    that run Triton kernels through the interpreter get the ``interpreter`` marker."""
    for item in items:
        if _interpreter(item):
            item.add_marker(pytest.mark.interpreter)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marker gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
