"""Pipelines and multimodal models (diffusers pipelines, VLMs): reading their components (AK52x)
and the backends a component supports (AK14x)."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK140", "Backend not supported by this component",
        meaning="The component's attention layers run only on a set of backends (its supported set, "
                "named in the message with why), and the backend asked for is not in it.",
        trigger="--attention-backend (or ATTNKIT_ATTENTION_BACKEND) names a backend outside a "
                "component's supported set when a pipeline or VLM is planned.",
        situations=["A fleet-wide --attention-backend (dual_chunk for long-context text models) on a VLM "
                    "whose vision tower runs only on the backends with the varlen call.",
                    "cuDNN / flash SDPA names: they count as sdpa, so they are refused only where sdpa is."],
        solutions=["Name a backend from the supported set in the message.",
                   "Omit --attention-backend: each component then gets the first of its set that serves it."],
        before="attnkit plan qwen2.5-vl-7b-instruct --device h100 --attention-backend dual_chunk",
        after="attnkit plan qwen2.5-vl-7b-instruct --device h100",
        related=("AK141", "AK103"),
    ),
    entry(
        "AK141", "No implementation on this platform for this head size and dtype",
        meaning="The backend chosen for a component (asked for, or the only one its set allows) exists, "
                "but has no kernel on this platform for the component's head size or dtype.",
        trigger="Every reason the chosen backend fails is about the platform, the head size or the dtype "
                "(AK210, AK211, AK102, AK105).",
        situations=["A vision tower with head size 72 (SigLIP) on a kernel compiled for 64/128.",
                    "A backend planned for a GPU older than its kernels (triton on a T4, sm75)."],
        solutions=["Use another backend of the component's supported set that has the head size and dtype "
                   "here (the message lists them), or omit --attention-backend.",
                   "Plan for a device the backend runs on, or with a --dtype it computes in."],
        before="attnkit plan qwen2.5-vl-7b-instruct --device t4 --attention-backend triton",
        after="attnkit plan qwen2.5-vl-7b-instruct --device t4",
        related=("AK140", "AK102", "AK105", "AK210"),
    ),
    entry(
        "AK520", "Unknown pipeline class",
        meaning="model_index.json names a pipeline class whose components attnkit does not know, so it "
                "cannot say which of them attend or how.",
        trigger="The `_class_name` of model_index.json is not in attnkit's list of pipelines "
                "(docs/models.md).",
        situations=["A new diffusers pipeline.", "A custom pipeline class of a fine-tune."],
        solutions=["Plan the components one by one: `attnkit plan DIR/text_encoder` for a transformers "
                   "model; a denoiser of a known class is read through a pipeline of a known class.",
                   "Ask for the pipeline to be modelled (docs/models.md says what that takes)."],
        before="attnkit plan ./MyPipeline --device h100",
        after="attnkit plan ./MyPipeline/text_encoder --device h100",
        related=("AK521",),
    ),
    entry(
        "AK521", "Unknown component class",
        meaning="A pipeline or VLM component (a transformer class, a text encoder, a vision tower) is of a "
                "class attnkit does not know how it attends, so it is refused rather than guessed; the rest "
                "of the pipeline is still planned and listed.",
        trigger="A model_index.json entry or a vision_config whose class attnkit has no builder for.",
        situations=["A new DiT class.", "A VLM with a vision tower attnkit has not modelled."],
        solutions=["Plan the other components; serve this one with the engine's own attention.",
                   "Ask for the class to be modelled (docs/models.md)."],
        before="attnkit plan ./pipeline-with-new-dit --device h100",
        after="attnkit plan ./pipeline-with-new-dit/text_encoder --device h100   # a known component alone",
        related=("AK520", "AK522"),
    ),
    entry(
        "AK522", "Unmodelled attention key in a component config",
        meaning="A denoiser config sets a key that changes how attention is computed (an attention "
                "processor, a window, a mask, sparsity) that attnkit does not read; planning it as plain "
                "attention would be a confident wrong answer.",
        trigger="A key naming attn/attention/window/sparse/mask/causal in a transformer config.json, not "
                "among those attnkit reads for the class.",
        situations=["A sparse or sliding-tile attention variant of a video DiT.",
                    "A fine-tune that turned on a custom attention processor in its config."],
        solutions=["Remove the key if the checkpoint does not use it.",
                   "Serve this component with the engine that implements that attention."],
        before="attnkit plan ./hunyuanvideo-sparse --device h100",
        after="attnkit plan ./hunyuanvideo-sparse --device h100   # after removing the unused key",
        related=("AK521", "AK513"),
    ),
    entry(
        "AK523", "Pipeline component config missing",
        meaning="model_index.json lists a component with attention whose config.json is not in the "
                "pipeline directory, so its layers cannot be read.",
        trigger="DIR/<component>/config.json does not exist.",
        situations=["A partial download (model_index.json and the VAE only)."],
        solutions=["Download the component's config.json (huggingface-cli download REPO "
                   "<component>/config.json)."],
        before="attnkit plan ./HunyuanVideo --device h100",
        after="attnkit plan ./HunyuanVideo --device h100   # after downloading transformer/config.json",
        related=("AK500",),
    ),
    entry(
        "AK524", "Invalid pipeline inputs",
        meaning="The workload a pipeline or VLM is planned for (height, width, frames, text tokens) has a "
                "value that is not a whole number in range, an unknown key, or gives no image token at all "
                "(an image smaller than one latent patch).",
        trigger="--height / --width / --frames / --text-tokens, or the inputs mapping of load_components.",
        situations=["--height 0", "--width 8 on a pipeline whose latent patch covers 16 pixels."],
        solutions=["Give positive sizes of at least one latent patch (docs/models.md lists the formulas).",
                   "Omit the flag to use the model's own default."],
        before="attnkit plan hunyuanvideo --device h100 --height 8",
        after="attnkit plan hunyuanvideo --device h100 --height 720",
        related=("AK306",),
    ),
    entry(
        "AK525", "A pipeline where one model is expected",
        meaning="plan() and load_model read a model of one part; a pipeline (a pipeline preset, or a "
                "directory holding model_index.json) has several components, each planned on its own.",
        trigger="attnkit.plan / load_model given a pipeline preset name or a pipeline directory.",
        situations=["attnkit.plan('flux.1-dev', 'h200')."],
        solutions=["Run `attnkit plan <pipeline> --device DEVICE` (it plans every component).",
                   "In Python: plan_components(load_components(name), platform) "
                   "(attnkit.model.pipeline, attnkit.planning.components)."],
        before="attnkit.plan('flux.1-dev', 'h200')",
        after="from attnkit.model.pipeline import load_components\n"
              "from attnkit.planning.components import plan_components\n"
              "plan_components(load_components('flux.1-dev'), 'h200')",
        related=("AK507", "AK520"),
    ),
    entry(
        "AK493", "Invalid varlen sequence lengths",
        meaning="The varlen call (packed sequences without a KV cache) takes cumulative sequence lengths "
                "cu_seqlens [B+1]: integers starting at 0 and never decreasing, the same number of sequences "
                "for queries and keys, in the VarlenBatch that varlen_batch() builds.",
        trigger="varlen_batch() or AttentionBackend.varlen with malformed lengths or no VarlenBatch.",
        situations=["Sequence lengths passed instead of their cumulative sums.",
                    "cu_seqlens_k for a different number of sequences than cu_seqlens_q.",
                    "float lengths (torch.tensor([0., 5.]))."],
        solutions=["Build cu_seqlens as torch.cumsum of the lengths with a leading 0, int32.",
                   "Pass the VarlenBatch from varlen_batch(cu_seqlens_q, cu_seqlens_k, key_padding_mask=...)."],
        before="backend.varlen(packed_q, packed_k, packed_v, encoder_layer, torch.tensor([5, 9]))",
        after="backend.varlen(packed_q, packed_k, packed_v, encoder_layer, "
              "varlen_batch(torch.tensor([0, 5, 14], dtype=torch.int32)))",
        related=("AK411", "AK417"),
    ),
]
