"""Fixtures of the triton_mla tests."""
import pytest

from attnkit.backends.triton_mla import decode


@pytest.fixture
def reduces(monkeypatch):
    """The grid of every decode._reduce_splits_kernel launch (the kernel still runs)."""
    seen = []
    real = decode._reduce_splits_kernel

    class Spy:
        def __getitem__(self, grid):
            seen.append(grid)
            return real[grid]
    monkeypatch.setattr(decode, "_reduce_splits_kernel", Spy())
    return seen
