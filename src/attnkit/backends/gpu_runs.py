"""The GPU runs that proved backend declarations, as data the declarations cite (torch-free).

Each record is one call of the GPU test suite (``pytest -m gpu``: the conformance suite of
every registered backend against the float64 reference, plus each backend's own GPU tests),
written down in benchmarks/RESULTS.md. Add a record here when the suite has passed on
another architecture, and cite it from the declarations it covers.
"""
from attnkit.registry.capabilities import Verified

H200_2026_11_29 = Verified(
    "cuda", (9, 0), "NVIDIA H200", "2026-11-29",
    record="benchmarks/RESULTS.md, 'The final run' and 'The second session's GPU calls'")

H200_2026_12_02 = Verified(
    "cuda", (9, 0), "NVIDIA H200", "2026-12-02",
    record="benchmarks/RESULTS.md, 'Session of 2026-12-02': call 2 (triton_dsa's GPU tests and the "
           "DSA conformance cases on cuda) and call 4 (the whole GPU suite)")
