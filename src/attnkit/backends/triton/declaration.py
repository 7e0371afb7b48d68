"""triton: paged attention in Triton kernels — an extend kernel over the block table and a
split-KV (flash-decoding) decode kernel, GQA-grouped.

Every entry below is run on a GPU by tests/conformance and tests/triton_kernels (marker gpu); see
benchmarks/NOTES-triton.md for what was measured where. Torch-free: the planner reads it.
"""
from attnkit.backends.gpu_runs import H200_2026_11_29
from attnkit.registry.capabilities import BackendDeclaration, Capabilities

DECLARATION = BackendDeclaration(
    name="triton",
    impl="attnkit.backends.triton.backend:TritonBackend",
    description="Triton paged attention: extend over [cached prefix + new tokens] through the "
                "block table, split-KV decode with one program per KV-head group; GQA, sliding "
                "window, softcap, sinks, fp8 KV.",
    capabilities=Capabilities(
        platforms=("cuda",),
        compute_capability=((8, 0), None),
        kinds=("mha",),
        head_dims=(64, 80, 96, 128, 192, 256),
        v_head_dims=(64,),               # narrower values: tests/triton_kernels/test_triton_extend.py
        dtypes=("fp16", "bf16", "fp32"),
        kv_cache_dtypes=("fp16", "bf16", "fp32", "fp8_e4m3", "fp8_e5m2"),
        page_sizes="any",                # tokens are gathered one by one through the block table
        phases=("prefill", "decode"),
        features=frozenset({"sliding_window", "logit_softcap", "sinks", "non_causal", "verify",
                            "chunked_local", "cuda_graph"}),
        requires=("torch", "triton"),
        verified=(H200_2026_11_29,),
    ),
)
