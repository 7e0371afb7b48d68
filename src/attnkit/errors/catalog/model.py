"""1xx: a backend does not fit the model (kind, head dims, features, phases, dtypes, pages).

AK101-AK110 are the reasons the planner generates per candidate from its declaration;
AK120/AK121 the plan errors built from them; AK130 a malformed ModelAttention.
"""
from attnkit.errors.catalog import entry

_SEE_ALL = "Run `attnkit plan MODEL --device D --json` to see every reason of every candidate."

ENTRIES = [
    entry(
        "AK101", "Backend does not support the model's attention kind",
        meaning="The backend serves multi-head attention (MHA/GQA/MQA) but the model uses multi-head "
                "latent attention (MLA), or the other way round, or it serves MLA with other latent "
                "sizes (kv_lora_rank, qk_rope_head_dim) than the model's.",
        trigger="A candidate whose declared `kinds` (or `mla_dims`) exclude the model's.",
        situations=["An MHA-only backend forced onto DeepSeek-V3 or Kimi-K2 (MLA).",
                    "An MLA kernel forced onto Llama."],
        solutions=["Use a backend that declares the model's kind; the error lists those that serve here.",
                   "Omit --attention-backend and let attnkit choose."],
        before="attnkit plan deepseek-v3 --device h100 --attention-backend triton",
        after="attnkit plan deepseek-v3 --device h100 --attention-backend triton_mla",
        related=("AK121", "AK120"),
    ),
    entry(
        "AK102", "Head dimension not supported",
        meaning="Some layer's query/key head dimension is not one the backend declares. The message "
                "names the dimension and the layers that have it.",
        trigger="A candidate whose `head_dims` exclude some layer's head_dim.",
        situations=["Unusual head sizes (e.g. 80, 96, 256) on a kernel compiled for a few sizes."],
        solutions=["Use a backend with head_dims 'any' (torch_native, sdpa).", _SEE_ALL],
        before="attnkit plan ./my-model --device h100 --attention-backend triton   # head_dim 32",
        after="attnkit plan ./my-model --device h100 --attention-backend sdpa",
        related=("AK121",),
    ),
    entry(
        "AK111", "DeepSeek sparse attention sizes not served",
        meaning="The backend serves DeepSeek sparse attention (feature sparse_topk) but not this "
                "model's: its top-k, its indexer's heads and head dim, or the dtype the index keys "
                "are cached in (fp8 e4m3 beside an fp8 KV cache, else the KV-cache dtype) are "
                "outside the backend's declared sparse_topks, sparse_dims or index_dtypes "
                "(docs/dsa.md). Sparse kernels are built around a top-k tile and an indexer "
                "width, and serve only the sizes they were tested for.",
        trigger="A candidate declaring sparse_topk whose sparse_topks, sparse_dims or "
                "index_dtypes exclude some DSA layer's.",
        situations=["A GLM-5 style indexer (32 heads) on kernels declared for DeepSeek-V3.2's 64.",
                    "A top-k that is not a multiple of the kernel's tile.",
                    "--kv-cache-dtype fp8 (fp8 index keys) on a backend reading 16-bit index keys."],
        solutions=["Use torch_native, which serves any top-k, indexer size and index dtype.",
                   "Change --kv-cache-dtype so the index keys are cached in a dtype the backend reads.",
                   _SEE_ALL],
        before="attnkit plan deepseek-v3.2 --device h200 --attention-backend <sparse backend> --kv-cache-dtype fp8",
        after="attnkit plan deepseek-v3.2 --device h200 --attention-backend torch_native --kv-cache-dtype fp8",
        related=("AK103", "AK445"),
    ),
    entry(
        "AK103", "Layer feature not supported",
        meaning="Some layers need a feature the backend does not implement: sliding_window, "
                "logit_softcap, sinks, cross_attention, non_causal (encoder), chunked_local (Llama-4) "
                "or dual_chunk. The message "
                "names the feature and the layers that need it.",
        trigger="A candidate whose declared `features` lack one that some layer needs.",
        situations=["Gemma-2 (logit softcap) on sdpa.", "gpt-oss (attention sinks) on sdpa.",
                    "Whisper (encoder and cross-attention) on a decoder-only backend."],
        solutions=["Use a backend that declares the feature (torch_native implements every feature but "
                   "dual_chunk).", "Omit --attention-backend and let attnkit choose."],
        before="attnkit plan gemma-2-9b --device cpu --attention-backend sdpa",
        after="attnkit plan gemma-2-9b --device cpu --attention-backend torch_native",
        related=("AK121", "AK302"),
    ),
    entry(
        "AK104", "Phase not supported",
        meaning="The backend implements only prefill or only decode, and was asked for the other.",
        trigger="A candidate whose declared `phases` lack the phase it is considered for.",
        situations=["A decode-only kernel named with --attention-backend (both phases)."],
        solutions=["Name it for its phase only (--decode-attention-backend / --prefill-attention-backend)."],
        before="attnkit plan llama-3.1-8b --attention-backend my_decode_kernel",
        after="attnkit plan llama-3.1-8b --decode-attention-backend my_decode_kernel",
        related=("AK121",),
    ),
    entry(
        "AK105", "Compute dtype not supported",
        meaning="The backend does not compute in the requested dtype (fp32, fp16 or bf16).",
        trigger="A candidate whose `dtypes` exclude --dtype (or the model config's dtype).",
        situations=["--dtype fp32 with a kernel that only has fp16/bf16 tiles."],
        solutions=["Use a dtype the backend declares, or another backend."],
        before="attnkit plan llama-3.1-8b --device h100 --dtype fp32 --attention-backend my_kernel",
        after="attnkit plan llama-3.1-8b --device h100 --dtype bf16 --attention-backend my_kernel",
        related=("AK121",),
    ),
    entry(
        "AK106", "KV-cache dtype not supported by the backend",
        meaning="The backend cannot store or read the KV cache in the requested dtype (e.g. fp8).",
        trigger="A candidate whose `kv_cache_dtypes` exclude --kv-cache-dtype.",
        situations=["--kv-cache-dtype fp8_e5m2 with a backend that only reads fp8_e4m3."],
        solutions=["Use a KV-cache dtype the backend declares, or a backend that stores this one."],
        before="attnkit plan deepseek-v3 --device h100 --attention-backend triton_mla --kv-cache-dtype fp8_e5m2",
        after="attnkit plan deepseek-v3 --device h100 --attention-backend triton_mla --kv-cache-dtype fp8_e4m3",
        related=("AK304",),
    ),
    entry(
        "AK107", "Page size not supported by the backend",
        meaning="The backend does not accept the requested KV-cache page size.",
        trigger="A candidate whose `page_sizes` exclude --page-size.",
        situations=["A fleet-wide --page-size 128 with a kernel that accepts 1, 16, 32 or 64."],
        solutions=["Use a page size the backend accepts, or omit --page-size."],
        before="attnkit plan deepseek-v3 --device h100 --attention-backend triton_mla --page-size 128",
        after="attnkit plan deepseek-v3 --device h100 --attention-backend triton_mla --page-size 64",
        related=("AK303",),
    ),
    entry(
        "AK108", "Speculative verify not supported",
        meaning="Speculative decoding verifies several draft tokens per request in one step "
                "(causal among themselves); the backend does not implement that (no 'verify'). "
                "A verify step is prefill-like (a hybrid runs it on its prefill / extend backend), "
                "so every chosen backend must declare 'verify'.",
        trigger="--speculative-tokens N > 0 with a prefill or decode candidate without the "
                "'verify' feature.",
        situations=["EAGLE / draft-model speculation with a decode-only kernel."],
        solutions=["Use backends that declare 'verify'.", "Turn speculation off."],
        before="attnkit plan qwen2.5-7b-instruct-1m --device h100 --attention-backend dual_chunk --speculative-tokens 4",
        after="attnkit plan qwen2.5-7b-instruct-1m --device h100 --attention-backend dual_chunk",
        related=("AK121",),
    ),
    entry(
        "AK109", "CUDA graph capture not supported",
        meaning="--cuda-graph asks for decode to be captured in a CUDA graph; the decode backend does "
                "not declare 'cuda_graph' (its per-step work is not capture-safe).",
        trigger="--cuda-graph with a decode candidate without the 'cuda_graph' feature.",
        situations=["Turning on CUDA graphs fleet-wide."],
        solutions=["Drop --cuda-graph, or use a decode backend that declares 'cuda_graph'."],
        before="attnkit plan llama-3.1-8b --device h100 --attention-backend torch_native --cuda-graph on",
        after="attnkit plan llama-3.1-8b --device h100 --attention-backend torch_native",
        related=("AK120", "AK121"),
    ),
    entry(
        "AK110", "Backend-specific check failed",
        meaning="The backend's own check (for what its capability data cannot say) refused this "
                "model or setting; the message says what and why.",
        trigger="A declaration's `check` function returned a problem for this model/platform/settings.",
        situations=["dual_chunk named for a model without dual_chunk_attention_config.",
                    "A page size that does not divide the dual-chunk length."],
        solutions=["Follow the message; it names the field and the valid values.", _SEE_ALL],
        before="attnkit plan llama-3.1-8b --attention-backend dual_chunk",
        after="attnkit plan llama-3.1-8b",
        related=("AK121", "AK470"),
    ),
    entry(
        "AK120", "No backend can serve this model here",
        meaning="attnkit tried every candidate in the priority order for this platform and model kind, "
                "and each failed at least one constraint. The plan's `rejected` lists every reason of "
                "every candidate; causes all of them share are shown once.",
        trigger="Automatic choice (no backend named) where no candidate serves every layer.",
        situations=["Planning for a platform with no backends (e.g. xpu today).",
                    "A package every backend needs (torch) missing on the platform.",
                    "Every candidate denied (--deny, ATTNKIT_DENY_BACKENDS) or rejected by a setting."],
        solutions=["Read the rejected reasons (add --json for all fields) and change the setting, "
                   "device or install they name."],
        before="attnkit plan llama-3.1-8b --device mi300x   # no attnkit backend declares rocm yet",
        after="attnkit plan llama-3.1-8b --device h100",
        related=("AK121", "AK210", "AK212"),
    ),
    entry(
        "AK121", "The named backend cannot serve this model here",
        meaning="You named a backend (--attention-backend, --prefill-attention-backend, "
                "--decode-attention-backend or ATTNKIT_ATTENTION_BACKEND) and it fails some "
                "constraint. attnkit does not silently pick another: it lists every reason and the "
                "backends that would serve on this device.",
        trigger="A named backend with at least one reason (kind, head dim, feature, platform, ...).",
        situations=["An MHA-only backend forced onto an MLA model (DeepSeek-V3).",
                    "A GPU-only backend named on a CPU box (triton on --device cpu).",
                    "A fleet-wide --attention-backend that lacks a feature some model needs."],
        solutions=["Use one of the backends the message lists.", "Omit the flag and let attnkit choose."],
        before="attnkit plan llama-3.1-8b --device cpu --attention-backend triton",
        after="attnkit plan llama-3.1-8b --device cpu --attention-backend sdpa",
        related=("AK101", "AK103", "AK210", "AK120"),
    ),
    entry(
        "AK122", "No attnkit backend implements an attention feature the model needs",
        meaning="Some layers need an attention feature (e.g. sparse_topk: DeepSeek sparse attention; "
                "chunked_local: Llama-4's chunked local attention) that no registered attnkit backend "
                "declares, so nothing here can serve the model: not another device, not another flag. "
                "The message says what would serve it elsewhere when attnkit knows.",
        trigger="A model whose layers need a feature absent from every backend declaration.",
        situations=["A feature parsed into the vocabulary before any backend declares it (DeepSeek-V3.2's "
                    "sparse_topk was, until torch_native served it; docs/dsa.md).",
                    "An installation whose registry lacks the backends that declare the feature."],
        solutions=["Serve the model with an engine that implements the feature (the message names some).",
                   "Plan a model without it."],
        before="attnkit plan ./model-with-an-unserved-feature --device h200",
        after="attnkit plan deepseek-v3 --device h200   # a model whose features attnkit serves",
        related=("AK103", "AK120"),
    ),
    entry(
        "AK130", "Invalid model attention spec",
        meaning="A ModelAttention handed to the planner breaks its own invariants (no layers, "
                "non-positive head counts or sizes, query heads not a multiple of KV heads, kind 'mla' "
                "without MLA sizes or with negative ones, a scale that is NaN, infinite or <= 0, an "
                "unknown role, duplicate layer ids, other_layers that are not (id, kind) pairs).",
        trigger="plan() with a hand-built or corrupted ModelAttention.",
        situations=["A LayerAttention built by hand with num_kv_heads=0 or kind='mla' but mla=None."],
        solutions=["Build the spec with attnkit.model.load_model from a config.json, or fix the named field."],
        before="attnkit.plan(ModelAttention(name=\"m\", architecture=\"x\", layers=()), \"h100\")",
        after="attnkit plan ./my-model/config.json",
        related=("AK500",),
    ),
]
