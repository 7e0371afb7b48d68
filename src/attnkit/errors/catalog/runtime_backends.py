"""AK440-AK449: runtime refusals raised from backends/paged_torch.py, shared by the torch
backends (torch_native, sdpa, dual_chunk).

These fire inside ``forward`` when a layer asks for something the chosen backend cannot do
or lacks what it needs. A plan from ``attnkit plan`` never pairs a layer with a backend that
refuses it, so AK440/AK441 mean the backend was picked by hand.
"""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK440", "Layer feature not served by this backend",
        meaning="A layer needs an attention feature (logit softcap, attention sinks, dual chunk "
                "attention, ...) that the backend running it does not implement. The backend "
                "refuses instead of silently computing plain attention, which would give wrong "
                "numbers.",
        trigger="AttentionBackend.forward on a layer whose spec enables a feature missing from "
                "the backend's declared features.",
        situations=["A Gemma-2 style layer (logit_softcap) run on the sdpa backend: torch's "
                    "scaled_dot_product_attention has no softcap.",
                    "A gpt-oss style layer (learned sinks) run on the sdpa backend.",
                    "A backend instantiated by hand, bypassing the planner."],
        solutions=["Run the layer on a backend that serves the feature; the error lists them.",
                   "Let `attnkit plan MODEL` choose: it never pairs a layer with such a backend.",
                   "A hybrid (prefill, decode) pair: give the layer's phase a backend that serves it."],
        before="b = load_backend(\"sdpa\"); b.forward(q, k, v, gemma2_layer, cache, b.prepare(meta, cache))   # logit softcap",
        after="b = load_backend(\"torch_native\"); b.forward(q, k, v, gemma2_layer, cache, b.prepare(meta, cache))",
        related=("AK441",),
    ),
    entry(
        "AK441", "Layer kind not served by this backend",
        meaning="The layer is multi-head latent attention (MLA) or plain multi-head attention "
                "(MHA), and the backend running it only implements the other kind.",
        trigger="AttentionBackend.forward on a layer whose kind is missing from the backend's "
                "declared kinds.",
        situations=["A DeepSeek-V3 layer handed to an MHA-only backend by hand."],
        solutions=["Run the layer on a backend that declares its kind; the error lists them."],
        before='load_backend("<mha-only backend>").forward(q, latent, None, mla_layer, cache, step)',
        after='load_backend("torch_native").forward(q, latent, None, mla_layer, cache, step)',
        related=("AK440",),
    ),
    entry(
        "AK442", "Cross-attention step without encoder pages",
        meaning="A cross-attention layer attends to the encoder's K/V, which live in pages named "
                "by BatchMetadata.encoder_block_tables and encoder_lens. The step's metadata does "
                "not carry them, so there is nothing to attend to.",
        trigger="forward on a layer with role 'cross' while meta.encoder_block_tables, "
                "meta.encoder_lens_cpu (or, when new encoder K/V are passed, "
                "meta.encoder_slot_mapping) is None.",
        situations=["The batch builder was called without the encoder lengths of an "
                    "encoder-decoder model (Whisper, T5, BART)."],
        solutions=["Build the step's metadata with encoder lengths and encoder pages for every "
                   "request that runs cross-attention layers."],
        before="build_batch([Request(0, 5, [3])], page_size=16)",
        after="build_batch([Request(0, 5, [3], encoder_len=30, encoder_block_table=[7, 8])], page_size=16)",
        related=(),
    ),
    entry(
        "AK443", "Layer tensor missing",
        meaning="The layer's spec needs a per-layer tensor that its RuntimeLayer does not carry: "
                "an MLA layer is computed from the cached latent and needs the key and value "
                "up-projections (w_kc [H, qk_nope, L], w_vc [H, L, v_head_dim]); a layer with "
                "sinks needs its per-head sink logits (sinks [H]). Running without them would "
                "give wrong numbers, so the backend refuses.",
        trigger="forward on an MLA layer whose w_kc or w_vc is None, or on a layer with "
                "spec.sinks=True whose sinks tensor is None.",
        situations=["An RuntimeLayer built from the spec alone, weights not attached.",
                    "A checkpoint loader that did not split kv_b_proj into w_kc / w_vc."],
        solutions=["Attach the tensors with per-rank shapes: RuntimeLayer(spec, w_kc=..., "
                   "w_vc=...) for MLA, RuntimeLayer(spec, sinks=...) for sinks."],
        before="RuntimeLayer(spec)",
        after="RuntimeLayer(spec, w_kc=w_kc, w_vc=w_vc)",
        related=("AK411",),
    ),
]
