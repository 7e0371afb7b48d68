"""AK470-AK479: dual chunk attention (Qwen2.5-1M) at run time — the DCA rotary and the
``dual_chunk`` backend."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK470", "Page size does not divide the dual-chunk length",
        meaning="Dual chunk attention cuts the sequence into chunks of cl = chunk_size - "
                "local_size tokens and treats keys by chunk. The dual_chunk backend needs every "
                "KV-cache page to lie inside one chunk, so the page size must divide cl.",
        trigger="dual_chunk backend forward with cl % page_size != 0. Before launch, `attnkit plan` "
                "reports the same cause (AK110 for the candidate, AK303 for an explicit --page-size).",
        situations=["A fleet-wide --page-size (e.g. 100) used for a Qwen2.5-1M model "
                    "(cl = 262144 - 8192 = 253952 = 2^13 * 31).",
                    "Toy test settings (chunk_size 8, local_size 2: cl = 6) with page size 4."],
        solutions=["Use a page size that divides chunk_size - local_size; the message lists the "
                   "nearest ones (any power of two up to 8192 divides Qwen2.5-1M's 253952).",
                   "Leave --page-size unset so the planner picks one."],
        before="PagedKVCache(layers, num_pages=n, page_size=100)  # Qwen2.5-1M: cl = 253952",
        after="PagedKVCache(layers, num_pages=n, page_size=64)",
        related=("AK473", "AK110", "AK303"),
    ),
    entry(
        "AK471", "Layer without dual chunk attention handed to the dual_chunk backend",
        meaning="The dual_chunk backend computes only dual chunk attention; it needs the layer's "
                "DualChunkConfig (chunk_size, local_size) to split keys into chunks. A layer "
                "without one is plain attention and belongs on another backend.",
        trigger="DualChunkBackend.forward on a LayerAttention whose dual_chunk is None.",
        situations=["The dual_chunk backend forced for a whole fleet, including models without "
                    "dual_chunk_attention_config.",
                    "A LayerAttention built by hand without dual_chunk=DualChunkConfig(...)."],
        solutions=["Run models without dual_chunk_attention_config on another backend "
                   "(let `attnkit plan` choose).",
                   "Build the layer spec with dual_chunk=DualChunkConfig(chunk_size, local_size, "
                   "original_max_position_embeddings)."],
        before="DualChunkBackend().forward(q, k, v, RuntimeLayer(llama_spec), cache, step)",
        after="TorchNativeBackend().forward(q, k, v, RuntimeLayer(llama_spec), cache, step)",
        related=("AK472",), merged_into="AK440",
    ),
    entry(
        "AK472", "Dual chunk attention needs the three query variants",
        meaning="Each query is rotated three ways (intra-chunk, successor-chunk, inter-chunk "
                "positions) and the dual_chunk backend picks the variant by chunk distance, so q "
                "must be [T, 3, H_q, D] (variants stacked on dim 1, in that order), as produced "
                "by attnkit.runner.layers.rotary.DualChunkRotary.",
        trigger="A backend's forward (validation.py) or the reference, for a dual chunk layer, with "
                "q of another shape (e.g. the ordinary [T, H_q, D]).",
        situations=["The model applied ordinary RoPE and passed one query per token.",
                    "The variants were concatenated on the head axis instead of stacked on dim 1."],
        solutions=["Rotate with DualChunkRotary: q3, k = rotary(q, k, positions, length_scale=s); "
                   "pass q3 [T, 3, H_q, D] and the chunk-local keys k [T, H_kv, D]."],
        before="backend.forward(apply_rope(q, pos, base=b), k, v, layer, cache, step)",
        after="q3, k = DualChunkRotary(cfg, base=b)(q, k, pos); backend.forward(q3, k, v, layer, cache, step)",
        related=("AK471", "AK411"),
    ),
    entry(
        "AK473", "Invalid dual chunk attention config",
        meaning="A DualChunkConfig must have 0 <= local_size < chunk_size (so the chunk length "
                "chunk_size - local_size is at least 1) and original_max_position_embeddings >= 0 "
                "(0 disables the length scale).",
        trigger="DualChunkRotary, the dual_chunk backend or the planner's check given such a config.",
        situations=["local_size and chunk_size swapped in a hand-written config.",
                    "A config.json edited to chunk_size == local_size."],
        solutions=["Use the values from the model's config.json (Qwen2.5-1M: chunk_size 262144, "
                   "local_size 8192, original_max_position_embeddings 262144)."],
        before="DualChunkConfig(chunk_size=8192, local_size=262144)",
        after="DualChunkConfig(chunk_size=262144, local_size=8192, original_max_position_embeddings=262144)",
        related=("AK470",),
    ),
    entry(
        "AK474", "Invalid input to the dual-chunk rotary",
        meaning="The DCA rotary rotates each token by its absolute position and scales it by the "
                "length scale s = max(1, 0.1 * ln(L / original_max) + 1). Positions must be "
                "non-negative integers, one per token; a length L must be >= 1; a per-token scale "
                "must have one entry per token.",
        trigger="DualChunkRotary or dca_length_scale given such an input.",
        situations=["positions with another length than the token count of q/k.",
                    "A length of 0 for an empty request."],
        solutions=["Pass meta.positions [T] and the scales from step_length_scales(meta, config)."],
        before="rotary(q, k, positions[:-1])",
        after="rotary(q, k, meta.positions, length_scale=step_length_scales(meta, cfg))",
        related=("AK472",),
    ),
]
