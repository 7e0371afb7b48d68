"""What the triton_mla backend serves, as torch-free data (checked by tests/conformance)."""
from attnkit.backends.gpu_runs import H200_2026_11_29
from attnkit.registry.capabilities import HALF_DTYPES as HALF, BackendDeclaration, Capabilities
from attnkit.registry.kernels import KernelVariant

# Latent widths are tl.arange extents, so each must be a power of two; these are the pairs
# the tests run: DeepSeek-V2/V3 and Kimi-K2 (512, 64) on the GPU, a toy size on the interpreter.
MLA_DIMS = ((512, 64), (64, 16))
PAGE_SIZES = (1, 16, 32, 64)
ALL_ROLES = ("prefill", "extend", "decode")

# Kernel variants (registry/kernels.py): the plan picks one per role and measured bucket (and,
# in an extend step, per request: the absorbed kernels or the MHA form); without a plan the
# first that takes the step in this order runs.
VARIANTS = (
    KernelVariant("column_split", ALL_ROLES, "absorbed split-KV kernel, output columns split "
                  "across programs, page-local key tiles"),
    KernelVariant("whole_rows", ALL_ROLES, "absorbed split-KV kernel, one program holds a head "
                  "block's whole latent row"),
    KernelVariant("column_split_tma", ALL_ROLES, "column_split with the latent tiles read through "
                  "tensor descriptors; 128-head programs over a cache of the compute dtype",
                  compute_capability=((9, 0), None), dtypes=HALF, kv_cache_dtypes=HALF, min_heads=128),
    KernelVariant("ws", ("decode",), "Gluon warp-specialised decode: a loader warp and two "
                  "warpgroups sharing one Q.K per key tile", compute_capability=((9, 0), (9, 0)),
                  triton=("3.6", "3.7"), dtypes=("bf16",), kv_cache_dtypes=("bf16",), min_heads=64,
                  page_multiple=64),
    KernelVariant("mha_form", ("prefill", "extend"), "MHA form: the request's latent decompressed "
                  "into per-head K/V by one GEMM each, then causal flash attention"),
)

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
    variants=VARIANTS,
    launch_config="attnkit.backends.triton_mla.configs:launch_config",
)
