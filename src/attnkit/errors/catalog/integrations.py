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
        meaning="Each attention call is turned into one attnkit step: every batch row's real "
                "keys go into a paged cache and the backend attends causally by position "
                "(with the layer's window). The integration reads from transformers' mask "
                "which keys are real and checks that the mask is exactly that pattern (causal, "
                "window, left padding, unused cache slots); a call that is not, or that asks "
                "for something the plan was not made for, is refused rather than computed "
                "differently.",
        trigger="A forward pass of a model loaded with attn_implementation='attnkit' whose mask "
                "is not causal-with-padding (packed sequences, bidirectional blocks, padding "
                "between real tokens, a custom 4D mask with biases), that runs with dropout "
                "(training), that is not causal, or whose heads, head size, softcap, sinks or "
                "window differ from the config the plan was made from.",
        situations=["Training (module.training with attention_dropout > 0).",
                    "position_ids that restart inside a row (packed sequences without a cache).",
                    "A right-padded batch continued by generate() (padding between real tokens).",
                    "A model that changes its config after loading."],
        solutions=["Pad on the left for batched generation (tokenizer.padding_side='left').",
                   "Run inference (model.eval()); attnkit backends have no dropout.",
                   "Use a transformers implementation (sdpa, eager) for custom mask patterns.",
                   "Re-plan after changing the config: attnkit.integrations.transformers."
                   "plan_for_model(model)."],
        before="tokenizer.padding_side = 'right'; model.generate(**tokenizer(prompts, padding=True))",
        after="tokenizer.padding_side = 'left'; model.generate(**tokenizer(prompts, padding=True))",
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
