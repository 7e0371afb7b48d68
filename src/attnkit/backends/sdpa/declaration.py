"""sdpa: paged attention through torch.nn.functional.scaled_dot_product_attention.

Gathers every request's pages into a padded batch and makes one SDPA call per layer, so
torch picks its fastest kernel (flash, cuDNN, memory-efficient, or math on CPU). SDPA has no
logit softcap and no attention sinks, so neither is declared: such layers are refused at run
time (AK440). Torch-free: this module is read by the planner.
"""
from attnkit.backends.gpu_runs import H200_2026_11_29
from attnkit.registry.capabilities import BackendDeclaration, Capabilities

DECLARATION = BackendDeclaration(
    name="sdpa",
    impl="attnkit.backends.sdpa.backend:SdpaBackend",
    description="Gather pages into a padded batch, one torch scaled_dot_product_attention call; "
                "MHA/GQA/MQA and MLA (absorbed for decode, decompressed for long prefill); "
                "no softcap, no sinks.",
    capabilities=Capabilities(
        platforms=("cpu", "cuda"),      # tested here (cpu) and by tests marked gpu (cuda)
        kinds=("mha", "mla"),
        head_dims="any",                # SDPA falls back to its math kernel where fused ones stop
        dtypes=("fp32", "fp16", "bf16"),
        kv_cache_dtypes=("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"),
        page_sizes="any",
        phases=("prefill", "decode"),
        features=frozenset({"sliding_window", "cross_attention", "non_causal", "verify",
                            "chunked_local", "varlen"}),
        requires=("torch",),
        mla_dims="any",
        verified=(H200_2026_11_29,),
    ),
    aliases={
        "torch_sdpa": "name used before 0.1, and vLLM's TORCH_SDPA",
    },
)
