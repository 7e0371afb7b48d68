"""AK490-AK499: integrations with other libraries (attnkit.integrations.transformers, .vllm, .sglang)."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK490", "Model not servable through the transformers integration",
        meaning="attn_implementation='attnkit' replaces the attention of a transformers model by "
                "an attnkit backend, fed with the query, key and value tensors transformers "
                "computes. That serves decoder self-attention (MHA/GQA/MQA, causal, with sliding "
                "windows, logit softcap, sinks and custom scaling). Some models hand their "
                "attention something else, or run in a dtype attnkit does not compute.",
        trigger="Loading a model with attn_implementation='attnkit' (or "
                "set_attn_implementation('attnkit'), plan_for_model, or the first call on a new "
                "device or dtype) when its config has MLA layers, encoder or cross-attention "
                "layers, bidirectional attention, or its dtype is not fp32, fp16 or bf16.",
        situations=["A DeepSeek-V3 checkpoint: transformers decompresses MLA into per-head keys, "
                    "attnkit's MLA backends read the compressed latent cache.",
                    "Whisper or T5 (encoder-decoder), or an embedding model with "
                    "use_bidirectional_attention.",
                    "A model loaded in float64."],
        solutions=["Load such models with a transformers implementation (sdpa, eager); serve MLA "
                   "models with an engine that keeps the latent cache.",
                   "Load the model in fp32, fp16 or bf16 (from_pretrained(..., dtype=...))."],
        before="AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64, "
               "attn_implementation='attnkit')",
        after="AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, "
              "attn_implementation='attnkit')",
        related=("AK491", "AK492"),
    ),
    entry(
        "AK491", "Attention call the transformers integration cannot serve",
        meaning="Each attention call is turned into one attnkit step: every query of the mask "
                "is placed in a request at a position whose causal window (with the layer's "
                "window) holds exactly the keys the mask gives it, sharing a batch row's pages "
                "where it can and copying keys where it must (right padding, bidirectional "
                "blocks, packed sequences are computed exactly). A mask no such layout can "
                "reproduce within the copy bound, or a call that asks for something the plan "
                "was not made for, is refused rather than computed differently.",
        trigger="A forward pass of a model loaded with attn_implementation='attnkit' whose mask "
                "gives a query more keys than its layer's sliding window holds (one custom 4D "
                "mask without the window of a sliding layer), whose exact reading would copy "
                "more than twice the call's keys (an arbitrary custom pattern), that differs "
                "between heads, that is a 4D mask of an integer dtype or an additive mask with "
                "biases or NaN; a call that runs with dropout (training), that is not causal or "
                "not a decoder layer (a vision tower), that passes an argument attnkit cannot "
                "apply (position_bias, per-token sinks, sparse indices, head_mask), or whose "
                "heads, head size, softcap, sinks or window differ from what the plan was made "
                "for.",
        situations=["Training (module.training with attention_dropout > 0).",
                    "One custom 4D attention_mask for a model with full and sliding layers.",
                    "A custom 4D mask whose queries each see a scattered set of keys.",
                    "A 0/1 integer 4D mask (eager would add it as a bias).",
                    "A multimodal model loaded with 'attnkit' for every part: its vision tower's "
                    "attention is not decoder self-attention.",
                    "A model that changes its config after loading, or a family whose sinks or "
                    "softcap attnkit's config reading does not know."],
        solutions=["Run inference (model.eval()); attnkit backends have no dropout.",
                   "Pass custom masks as a dict by layer type ({'full_attention': ..., "
                   "'sliding_attention': ...}), boolean or 0/-inf (mask.bool() for an integer "
                   "mask); use a transformers implementation (sdpa, eager) for other mask "
                   "patterns.",
                   "Multimodal: attn_implementation={'text_config': 'attnkit', "
                   "'vision_config': 'sdpa'}.",
                   "Re-plan after changing the config: attnkit.integrations.transformers."
                   "plan_for_model(model); for a feature the config reading lacks, load the "
                   "model with eager or sdpa."],
        before="model(ids, attention_mask=full_causal_4d)      # a model with sliding layers",
        after="model(ids, attention_mask={'full_attention': full_causal_4d, "
              "'sliding_attention': sliding_4d})",
        related=("AK490",),
    ),
    entry(
        "AK492", "transformers missing or too old for the attnkit integration",
        meaning="attnkit registers itself in transformers' AttentionInterface and "
                "AttentionMaskInterface and plans when a model is built. The integration "
                "supports transformers 4.55 and later (4.55 is the oldest version tested and "
                "the first with gpt-oss; see docs/integrations.md).",
        trigger="attnkit.integrations.transformers.register() (or any function of that module "
                "that needs transformers) without transformers installed, or with a version "
                "older than the supported range.",
        situations=["A CPU box with only attnkit and torch installed.",
                    "An environment pinned to transformers 4.4x."],
        solutions=["pip install 'attnkit[transformers]' (transformers >= 4.55)."],
        before="pip install transformers==4.45.2",
        after="pip install 'transformers>=4.55'",
        related=("AK490",),
    ),
    entry(
        "AK496", "Model or layer not servable through the vLLM or SGLang plugin",
        meaning="With ATTNKIT_VLLM=1 (vLLM) or --attention-backend attnkit (SGLang) attnkit plans "
                "the model the engine loaded, at the engine's start-up, and then runs its planned "
                "backend on the engine's own paged KV cache for every attention layer. It serves "
                "what it planned: decoder self-attention (MHA/GQA/MQA, sliding windows, logit "
                "softcap, sinks) in the engine's dtype, KV-cache dtype and page size. A layer the "
                "engine builds differently from the plan, or a kind of attention the plugin does "
                "not run, is refused at start-up rather than computed differently.",
        trigger="Starting vLLM with ATTNKIT_VLLM=1 (or SGLang with --attention-backend attnkit) "
                "on a model with MLA layers, encoder or cross-attention layers, ALiBi slopes or "
                "KV sharing between layers; a layer whose head counts, head size, softmax scale, "
                "window, softcap or sinks differ from what attnkit reads in the model's config; "
                "an fp8 KV cache the plugin does not run; a compute dtype other than fp32, fp16 "
                "or bf16; SGLang options attnkit's SGLang backend does not serve (dual chunk "
                "attention, MLA, a page size the plan refuses).",
        situations=["DeepSeek-V2/V3 (MLA) under ATTNKIT_VLLM=1: MLA through the plugins is not "
                    "built; vLLM's own MLA backend serves it without the variable.",
                    "A model whose config attnkit reads differently from the engine (a custom "
                    "attention scale that the engine computes from another field)."],
        solutions=["Run the model without the plugin (unset ATTNKIT_VLLM, or choose another "
                   "SGLang --attention-backend).",
                   "Check what attnkit plans for the model: attnkit plan MODEL_DIR --device cpu.",
                   "For a KV-cache dtype the plugin refuses, run with the model's dtype "
                   "(kv_cache_dtype='auto')."],
        before="ATTNKIT_VLLM=1 vllm serve deepseek-ai/DeepSeek-V2-Lite",
        after="vllm serve deepseek-ai/DeepSeek-V2-Lite",
        related=("AK497", "AK490"),
    ),
    entry(
        "AK497", "Engine plugin switched on with a conflicting choice, or an engine version it does not know",
        meaning="The vLLM plugin registers attnkit's backend as vLLM's CUSTOM backend on CUDA (and "
                "as the override of CPU_ATTN on CPU) and selects it for every layer; the SGLang "
                "plugin registers 'attnkit' in SGLang's attention registry. Each is built for the "
                "engine versions its tests run (pinned in the attnkit[vllm] and attnkit[sglang] "
                "extras) and for the classes and method signatures of those versions.",
        trigger="ATTNKIT_VLLM=1 together with an explicit other attention_backend on CUDA; "
                "calling the plugins with an engine whose attention interface differs from the "
                "one they were built for (a class or method signature that changed), or without "
                "the engine installed.",
        situations=["attention_backend='FLASH_ATTN' set in a fleet-wide config while "
                    "ATTNKIT_VLLM=1 is exported.",
                    "An upgrade of vLLM or SGLang past the tested versions."],
        solutions=["Leave attention_backend unset (or CUSTOM), or unset ATTNKIT_VLLM.",
                   "Install the tested versions: pip install 'attnkit[vllm]' or 'attnkit[sglang]'."],
        before="ATTNKIT_VLLM=1 vllm serve MODEL --attention-backend FLASH_ATTN",
        after="ATTNKIT_VLLM=1 vllm serve MODEL",
        related=("AK496",),
    ),
]
