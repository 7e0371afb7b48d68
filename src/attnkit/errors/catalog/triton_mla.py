"""4xx (AK460-AK469): inputs the triton_mla backend cannot run."""
from attnkit.errors.catalog import entry

_PLAN = "Let `attnkit plan` pick the backend: it reads triton_mla's declaration."

ENTRIES = [
    entry(
        "AK460", "triton_mla serves MLA layers only",
        meaning="triton_mla attends over a latent cache in the absorbed or decompressed MLA form; "
                "the layer is not an MLA layer, or lacks its w_kc / w_vc up-projections.",
        trigger="TritonMLABackend.forward with a layer whose spec.kind is not 'mla', or whose "
                "RuntimeLayer has w_kc or w_vc unset.",
        situations=["A multi-head (MHA/GQA) model forced onto --attention-backend triton_mla.",
                    "An MLA layer built without its kv_b_proj split into w_kc and w_vc."],
        solutions=["Use an MHA backend (triton, sdpa, torch_native) for MHA models.",
                   "Split kv_b_proj into w_kc [H, qk_nope, L] and w_vc [H, L, v_head_dim].", _PLAN],
        before="b = load_backend(\"triton_mla\"); b.forward(q, k, v, layer, cache, b.prepare(meta, cache))   # an MHA layer",
        after="b = load_backend(\"triton\"); b.forward(q, k, v, layer, cache, b.prepare(meta, cache))",
        related=("AK466",),
    ),
    entry(
        "AK461", "MLA latent size not served by triton_mla",
        meaning="The kernels tile the latent width (kv_lora_rank) and the rope width as whole "
                "power-of-two blocks; only the declared (kv_lora_rank, qk_rope_head_dim) pairs are "
                "built and tested.",
        trigger="TritonMLABackend.forward with an MLA layer whose (kv_lora_rank, qk_rope_head_dim) "
                "is not in the declaration's mla_dims.",
        situations=["A research model with kv_lora_rank 384 or a rope width of 32."],
        solutions=["Serve the model with torch_native, which takes any MLA size.", _PLAN],
        before="b = load_backend(\"triton_mla\"); b.forward(mla384_q, latent384, None, mla384_layer, mla384_cache, b.prepare(mla384_meta, mla384_cache))   # kv_lora_rank 384",
        after="b = load_backend(\"torch_native\"); b.forward(mla384_q, latent384, None, mla384_layer, mla384_cache, b.prepare(mla384_meta, mla384_cache))",
        related=("AK460",),
    ),
    entry(
        "AK462", "dtype or KV-cache dtype not served by triton_mla",
        meaning="q must be fp32, fp16 or bf16 and the latent cache fp32, fp16, bf16 or fp8_e4m3; "
                "the latent k handed in must share q's dtype.",
        trigger="TritonMLABackend.forward with another compute dtype, an fp8_e5m2 cache, or q and "
                "k in different dtypes.",
        situations=["--kv-cache-dtype fp8_e5m2 on an MLA model.",
                    "The latent projection ran in float32 while q is bf16."],
        solutions=["Use --kv-cache-dtype fp8_e4m3 (or bf16) with triton_mla.",
                   "Cast q and the latent to the model's compute dtype."],
        before="b = load_backend(\"triton_mla\"); b.forward(mla_q, latent, None, mla_layer, mla_cache_e5m2, b.prepare(mla_meta, mla_cache_e5m2))   # fp8_e5m2 cache",
        after="b = load_backend(\"triton_mla\"); b.forward(mla_q, latent, None, mla_layer, mla_cache, b.prepare(mla_meta, mla_cache))   # an fp8_e4m3 or 16/32-bit cache",
        related=("AK410",),
    ),
    entry(
        "AK463", "Page size not served by triton_mla",
        meaning="The page size is a compile-time constant of the kernels; only the declared page "
                "sizes are built and tested.",
        trigger="TritonMLABackend.forward with a cache whose page_size is not declared.",
        situations=["A cache built with page_size 8 or 128 for an MLA model."],
        solutions=["Use page size 64 (or 1, 16, 32) for MLA models on triton_mla.", _PLAN],
        before="b = load_backend(\"triton_mla\"); b.forward(mla_q, latent, None, mla_layer, mla_cache_p128, b.prepare(mla_meta_p128, mla_cache_p128))   # page_size 128",
        after="b = load_backend(\"triton_mla\"); b.forward(mla_q, latent, None, mla_layer, mla_cache, b.prepare(mla_meta, mla_cache))   # page_size 16",
        related=("AK418",),
    ),
    entry(
        "AK464", "Layer feature not served by triton_mla",
        meaning="triton_mla runs causal decoder self-attention only, with no layer feature beyond "
                "its declaration: no sliding window, logit softcap, attention sinks, chunked local "
                "attention, cross-attention or non-causal (encoder) layers.",
        trigger="TritonMLABackend.forward with a layer that needs one of those features.",
        situations=["An MLA variant with a sliding window on some layers."],
        solutions=["Serve such layers with torch_native.", _PLAN],
        before="b = load_backend(\"triton_mla\"); b.forward(mla_q, latent, None, mla_swa_layer, mla_cache, b.prepare(mla_meta, mla_cache))   # sliding window",
        after="b = load_backend(\"torch_native\"); b.forward(mla_q, latent, None, mla_swa_layer, mla_cache, b.prepare(mla_meta, mla_cache))",
        related=("AK420",),
    ),
    entry(
        "AK465", "triton_mla needs a CUDA device",
        meaning="The kernels are Triton GPU kernels; on a CPU tensor they run only under the Triton "
                "interpreter (TRITON_INTERPRET=1, for tests).",
        trigger="TritonMLABackend.forward with tensors off CUDA while TRITON_INTERPRET is unset.",
        situations=["A CPU-only machine asked for --attention-backend triton_mla."],
        solutions=["Run on a CUDA GPU, or use torch_native on CPU.",
                   "For tests only: set TRITON_INTERPRET=1 before importing triton."],
        before="b = load_backend(\"triton_mla\"); b.forward(mla_q, latent, None, mla_layer, mla_cache, b.prepare(mla_meta, mla_cache))   # CPU tensors, TRITON_INTERPRET unset",
        after="TRITON_INTERPRET=1 python my_kernel_test.py   # or CUDA tensors",
        related=(),
    ),
    entry(
        "AK466", "MLA tensor shapes disagree",
        meaning="q must be [T, H, qk_nope + rope], the latent k [T, kv_lora_rank + rope], v None, "
                "w_kc [H, qk_nope, kv_lora_rank] and w_vc [H, kv_lora_rank, v_head_dim], with H the "
                "per-rank head count and T the step's token count.",
        trigger="TritonMLABackend.forward found a tensor whose shape contradicts the layer spec.",
        situations=["Tensor parallelism split q's heads but not w_kc / w_vc.",
                    "w_kc passed as [H, L, qk_nope] (transposed)."],
        solutions=["Slice w_kc and w_vc to this rank's heads.",
                   "Pass w_kc as [H, qk_nope, L]: nope key = latent_L @ w_kc[h].T."],
        before="RuntimeLayer(spec, w_kc=kv_b_proj_k)             # [H, L, qk_nope]",
        after="RuntimeLayer(spec, w_kc=kv_b_proj_k.transpose(1, 2))  # [H, qk_nope, L]",
        related=("AK411", "AK413"),
    ),
]
