"""AK440-AK449: a layer or step outside the running backend's declaration, and what a layer
lacks. One code per concept for every backend, raised by the shared check layer
(backends/envelope.py) from the backend's declaration (backends/<name>/declaration.py).

A plan from ``attnkit plan`` never pairs a layer with a backend that refuses it, so these mean
the backend was picked by hand or the input changed after planning. The codes each backend
had before (AK441, AK450-AK453, AK460-AK466, AK471) are merged into these; their pages say so.
"""
from attnkit.errors.catalog import entry

_PLAN = "Let `attnkit plan MODEL --device DEVICE` choose: it reads the same declarations."

ENTRIES = [
    entry(
        "AK440", "Layer kind or feature not served by this backend",
        meaning="A layer is of a kind (MHA or MLA) or needs an attention feature (logit softcap, "
                "attention sinks, sliding window, cross-attention, non-causal, dual chunk "
                "attention, ...) that the backend running it does not declare; or, for a backend "
                "that computes only one kind of attention (dual_chunk), the layer lacks it. The "
                "backend refuses instead of silently computing plain attention, which would give "
                "wrong numbers. The message names the registered backends that serve the layer.",
        trigger="AttentionBackend.forward (backends/envelope.py), the first time a layer spec "
                "reaches a backend whose declaration does not list its kind or one of its "
                "features, or whose declared runtime_check refuses it.",
        situations=["A Gemma-2 style layer (logit_softcap) run on the sdpa backend: torch's "
                    "scaled_dot_product_attention has no softcap.",
                    "An MLA model (DeepSeek-V3) forced onto the triton backend, or an MHA model "
                    "onto triton_mla.",
                    "A layer without dual_chunk_attention_config handed to the dual_chunk backend.",
                    "A backend instantiated by hand, bypassing the planner."],
        solutions=["Run the layer on a backend that serves it; the error lists them.",
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
        related=("AK440",), merged_into="AK440",
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
    entry(
        "AK448", "DeepSeek sparse attention layer without (or with wrong) indexer inputs",
        meaning="A DSA layer (spec.sparse_topk: DeepSeek-V3.2, GLM-5) attends only to the top-k "
                "cached tokens its lightning indexer scores best, so its forward needs the "
                "indexer's inputs for the step: indexer=IndexerInputs(q [T, H_i, D_i] in q's "
                "dtype, weights [T, H_i] float32, k [T, D_i] in q's dtype), on the cache's device "
                "(docs/dsa.md). Without them the backend could only compute dense attention, "
                "which is not what the model computes. A layer without sparse_topk takes none.",
        trigger="AttentionBackend.forward on a layer with sparse_topk and indexer=None or a "
                "value that is not an IndexerInputs, or whose tensors have the wrong shape, dtype "
                "or device; or on a layer without sparse_topk with an indexer given.",
        situations=["A model runner that computes the MLA inputs but not the indexer's.",
                    "Indexer weights left in bf16 (they are float32, every scale folded in).",
                    "Indexer keys handed per head [T, H_i, D_i]: DSA keys have one head [T, D_i]."],
        solutions=["Compute the indexer's q, weights and k as the model defines them and pass "
                   "indexer=IndexerInputs(q=..., weights=..., k=...) to forward for DSA layers only.",
                   "Cast weights to float32 after folding in the model's scales."],
        before="backend.forward(q, latent, None, dsa_layer, cache, step)",
        after="backend.forward(q, latent, None, dsa_layer, cache, step, "
              "indexer=IndexerInputs(q=iq, weights=iw, k=ik))",
        related=("AK440", "AK411"),
    ),
    entry(
        "AK444", "dtype or KV-cache dtype not served by this backend",
        meaning="The compute dtype of q (and so of k and v), the KV cache's dtype, or (DSA layers) "
                "the indexer-key cache's dtype is not one the backend declares (its dtypes, "
                "kv_cache_dtypes, index_dtypes). fp8 pages are read back as stored * scale by the "
                "backends that declare them.",
        trigger="AttentionBackend.prepare for the cache's dtype (once per step; a hybrid checks "
                "every inner backend, idle ones too), AttentionBackend.forward for q's dtype.",
        situations=["q handed in as float64 from a reference computation.",
                    "An int8 KV cache from another engine.",
                    "--kv-cache-dtype fp8_e5m2 with triton_mla, which reads fp8_e4m3 only."],
        solutions=["Cast q, k and v to the model's compute dtype (bf16 on GPUs).",
                   "Build the cache in a KV dtype the backend declares (`attnkit backends`).", _PLAN],
        before="attnkit plan deepseek-v3 --attention-backend triton_mla --kv-cache-dtype fp8_e5m2",
        after="attnkit plan deepseek-v3 --attention-backend triton_mla --kv-cache-dtype fp8_e4m3",
        related=("AK410", "AK106"),
    ),
    entry(
        "AK445", "Head dim not served by this backend",
        meaning="A layer's q/k head dim, its value head dim, its MLA latent sizes "
                "(kv_lora_rank, qk_rope_head_dim), or a DSA layer's indexer sizes (index_n_heads, "
                "index_head_dim) or top-k are outside what the backend declares "
                "(head_dims, v_head_dims, mla_dims, sparse_dims, sparse_topks): kernels built around whole power-of-two tiles "
                "serve only the sizes they were built and tested for, and refuse the rest rather "
                "than run them unverified.",
        trigger="AttentionBackend.forward, the first time such a layer spec reaches the backend; "
                "DualChunkBackend(impl='triton') with a head or value dim above 256 (its 'auto' "
                "takes the torch path there).",
        situations=["A small research model with 48-wide heads on the triton backend.",
                    "An MLA model with kv_lora_rank 384 on triton_mla.",
                    "Values narrower than queries and keys on a backend that declares none.",
                    "A DSA layer whose indexer heads or top-k the sparse kernels were not built for."],
        solutions=["Serve the layer with sdpa or torch_native, which take any head dim.", _PLAN],
        before="attnkit plan ./wide-heads --attention-backend triton",
        after="attnkit plan ./wide-heads --attention-backend sdpa",
        related=("AK102", "AK440"),
    ),
    entry(
        "AK446", "Page size not served by this backend",
        meaning="The KV cache's page size is not one the backend declares (page_sizes): some "
                "kernels take the page size as a compile-time constant and are built and tested "
                "for a few sizes only.",
        trigger="AttentionBackend.prepare (once per step) with a cache whose page_size the "
                "declaration does not accept; a HybridBackend checks every inner backend, idle "
                "ones too, since they share the cache.",
        situations=["A cache built with page_size 8 or 128 for an MLA model on triton_mla.",
                    "A hybrid whose decode backend accepts fewer page sizes than its prefill one."],
        solutions=["Build the cache with a page size the backend declares (`attnkit backends`).",
                   _PLAN],
        before="attnkit plan deepseek-v3 --attention-backend triton_mla --page-size 128",
        after="attnkit plan deepseek-v3 --attention-backend triton_mla --page-size 64",
        related=("AK107", "AK418", "AK470"),
    ),
    entry(
        "AK447", "Device not served by this backend",
        meaning="The KV cache (and so the step's tensors) is on a device the backend does not "
                "declare (platforms, compute capability). Triton kernels run on CPU tensors only "
                "through the Triton interpreter (TRITON_INTERPRET=1, slow, for tests).",
        trigger="AttentionBackend.prepare (once per step) with a cache on a device outside the "
                "declaration; DualChunkBackend(impl='triton') off CUDA with the interpreter off.",
        situations=["A CPU-only machine with --attention-backend triton or triton_mla.",
                    "The KV cache allocated on the CPU while the model runs on a GPU.",
                    "A GPU older than the backend's minimum compute capability."],
        solutions=["Run on a device the backend declares, with the cache and tensors on it.",
                   "On CPUs use torch_native or sdpa.",
                   "For kernel tests on a CPU, set TRITON_INTERPRET=1 before triton is imported."],
        before="attnkit plan llama-3-8b --device cpu --attention-backend triton",
        after="attnkit plan llama-3-8b --device cpu --attention-backend sdpa",
        related=("AK210", "AK211", "AK412"),
    ),
]
