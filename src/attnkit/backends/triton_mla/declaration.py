"""What the triton_mla backend serves, as torch-free data (checked by tests/conformance)."""
from attnkit.backends.gpu_runs import H200_2026_11_29
from attnkit.registry.capabilities import BackendDeclaration, Capabilities

# Latent widths are tl.arange extents, so each must be a power of two; these are the pairs
# the tests run: DeepSeek-V2/V3 and Kimi-K2 (512, 64) on the GPU, a toy size on the interpreter.
MLA_DIMS = ((512, 64), (64, 16))
PAGE_SIZES = (1, 16, 32, 64)

DECLARATION = BackendDeclaration(
    name="triton_mla",
    impl="attnkit.backends.triton_mla.backend:TritonMLABackend",
    description="Triton MLA: absorbed split-KV decode/verify over the latent cache, "
                "MHA-form extend for long new chunks.",
    capabilities=Capabilities(
        platforms=("cuda",),
        compute_capability=((8, 0), None),
        kinds=("mla",),
        head_dims="any",           # nope/v widths go through masked tiles and torch bmm
        dtypes=("fp32", "fp16", "bf16"),
        kv_cache_dtypes=("fp32", "fp16", "bf16", "fp8_e4m3"),
        page_sizes=PAGE_SIZES,
        phases=("prefill", "decode"),
        features=frozenset({"verify", "cuda_graph"}),
        requires=("torch", "triton"),
        mla_dims=MLA_DIMS,
        verified=(H200_2026_11_29,),
    ),
)
