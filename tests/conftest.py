"""Suite-wide test setup. Shared input factories live in tests/factories.py and are imported
as ``from factories import make_case`` (pytest puts tests/ on sys.path for this conftest)."""
import os

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


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need CUDA; skip them (with the reason) where there is none."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marker gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
