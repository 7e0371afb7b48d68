"""torch_native: paged attention in plain torch ops, on any device torch runs on.

The portable baseline: a loop over requests, each gathering its pages and computing in
float32. Slow on GPUs next to fused kernels, but it serves every layer shape attnkit knows
except dual chunk attention. Torch-free: this module is read by the planner.
"""
from attnkit.backends.gpu_runs import H200_2026_11_29
from attnkit.registry.capabilities import BackendDeclaration, Capabilities

DECLARATION = BackendDeclaration(
    name="torch_native",
    impl="attnkit.backends.torch_native.backend:TorchNativeBackend",
    description="Pure torch ops over gathered pages, float32 math; any head size, MHA/GQA/MQA "
                "and MLA (DeepSeek sparse attention too), every feature but dual chunk. Portable baseline, not fast.",
    capabilities=Capabilities(
        # Only what tests have run: CPU here, CUDA through tests marked gpu. The ops are plain
        # torch, but mps/xpu/rocm stay out until a test has run there.
        platforms=("cpu", "cuda"),
        kinds=("mha", "mla"),
        head_dims="any",
        dtypes=("fp32", "fp16", "bf16"),
        kv_cache_dtypes=("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"),
        page_sizes="any",
        phases=("prefill", "decode"),
        features=frozenset({"sliding_window", "logit_softcap", "sinks", "cross_attention",
                            "non_causal", "verify", "chunked_local", "varlen", "batch_invariant",
                            "deterministic", "sparse_topk"}),
        requires=("torch",),
        mla_dims="any",
        v_head_dims="any",              # tests/backends/test_torch_native.py (value dim 8, q/k 16)
        # DSA (docs/dsa.md): any indexer size and top-k, every index-key dtype
        # (tests/conformance/test_dsa.py)
        sparse_dims="any",
        sparse_topks="any",
        index_dtypes=("fp32", "fp16", "bf16", "fp8_e4m3"),
        verified=(H200_2026_11_29,),
    ),
    aliases={
        "torch": "short name used before 0.1; 'torch' alone did not say which torch path",
        "native": "short name used before 0.1",
    },
)
