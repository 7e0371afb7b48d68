"""Suite-wide test setup. Shared input factories live in tests/factories.py and are imported
as ``from factories import make_case`` (pytest puts tests/ on sys.path for this conftest)."""
import os

import pytest


def pytest_configure(config):
    """Under pytest-xdist each worker gets one torch thread: two workers on two cores that
    each spin up a thread pool fight each other and tiny ops slow down 100-fold."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need CUDA; skip them (with the reason) where there is none."""
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marker gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
