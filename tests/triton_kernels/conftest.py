"""Fixtures for the triton backend tests. Without CUDA its kernels run on the Triton
interpreter: tests/conftest.py sets TRITON_INTERPRET before any kernel is imported."""
import pytest


@pytest.fixture
def run_triton():
    """run_triton(case, **backend_options) -> [T, H_q * D_v]: one prepare + forward."""
    from attnkit.backends._triton import interpreting
    from attnkit.backends.triton.backend import TritonBackend

    def run(case, **options):
        if case.q.device.type == "cpu" and not interpreting():
            pytest.skip("interpreter test on a CUDA machine: test_triton_gpu.py covers the GPU")
        backend = TritonBackend(**options)
        step = backend.prepare(case.meta, case.cache)
        return backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    return run
