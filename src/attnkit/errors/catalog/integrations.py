"""AK490-AK499: integrations with other libraries (attnkit.integrations.transformers)."""
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
]
