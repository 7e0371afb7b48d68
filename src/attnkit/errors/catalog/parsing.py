"""5xx (AK500-AK599): reading a model's config.json into per-layer attention needs."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK500", "Model config not found or unreadable",
        meaning="The model was given as a path, but there is no readable config.json there.",
        trigger="A path that does not exist, a directory without config.json, a file that "
                "cannot be read as UTF-8 text or is larger than 16 MiB, or a path the OS refuses "
                "(too long, a NUL byte).",
        situations=["A typo in the model path.",
                    "A directory holding only weights (config.json not downloaded).",
                    "A GGUF or safetensors file passed instead of config.json."],
        solutions=["Pass the model directory that contains config.json, or config.json itself.",
                   "Download config.json with the weights (huggingface-cli download REPO config.json).",
                   "Use a preset name (attnkit models lists them)."],
        before="attnkit plan ./Llama-3.1-8B/model.safetensors --device h100",
        after="attnkit plan ./Llama-3.1-8B --device h100",
        related=("AK501", "AK507"),
    ),
    entry(
        "AK501", "Model config is not valid JSON",
        meaning="The config file exists but is not JSON, so no field can be read from it.",
        trigger="json parsing of config.json fails; the message gives the line and column.",
        situations=["A truncated download.", "A hand edit that left a trailing comma.",
                    "An HTML error page saved as config.json."],
        solutions=["Fix the JSON at the reported line and column.",
                   "Download config.json again."],
        before="attnkit plan ./broken-model",
        after="attnkit plan ./redownloaded-model   # the same model, config.json downloaded again",
        related=("AK500", "AK502"),
    ),
    entry(
        "AK502", "Model config is not a JSON object",
        meaning="config.json must hold one JSON object of named fields; this one holds a list, "
                "a string or a number.",
        trigger="The parsed top-level value is not an object, or a dict given to plan() has "
                "a key (at any depth) that is not a string, which no JSON file can hold.",
        situations=["A file of several configs in a list.", "A dict-like API given a list."],
        solutions=["Pass the single config object (the model's config.json)."],
        before="attnkit plan ./list-model   # its config.json holds a list: [{...}]",
        after="attnkit plan ./model   # config.json holds one object",
        related=("AK501",),
    ),
    entry(
        "AK503", "Required config field missing",
        meaning="A field attnkit needs to know the attention layout (head count, layer count, "
                "head width, MLA ranks, window size) is missing or null.",
        trigger="A required field is absent or null, e.g. num_attention_heads, or sliding_window "
                "when layer_types names sliding layers.",
        situations=["A stripped-down or hand-written config.",
                    "A config whose family keeps the field under another name attnkit does not know."],
        solutions=["Add the field named in the message with the model's real value.",
                   "Use the model's original config.json from its Hugging Face repo."],
        before='{"model_type": "llama", "num_hidden_layers": 32}',
        after='{"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, '
              '"hidden_size": 4096}',
        related=("AK504", "AK510"),
    ),
    entry(
        "AK504", "Config field has the wrong type",
        meaning="A field has a JSON type attnkit cannot use: a string or boolean where an integer "
                "belongs, a number where an object belongs, and so on.",
        trigger="Reading a field finds the wrong type (true is not an integer; \"32\" is not 32).",
        situations=["Quoted numbers in a hand-written config.",
                    "A boolean flag put in a size field."],
        solutions=["Write the value with the type named in the message (e.g. 32, not \"32\")."],
        before='{"num_attention_heads": "32", ...}',
        after='{"num_attention_heads": 32, ...}',
        related=("AK503", "AK505"),
    ),
    entry(
        "AK505", "Config value out of range",
        meaning="A size or factor is zero, negative, or inconsistent with another (e.g. a dual "
                "chunk local_size not smaller than chunk_size).",
        trigger="An integer size below its minimum or above 2**31, a scale or softcap <= 0, "
                "local_size >= chunk_size, or a YaRN mscale_all_dim that makes the softmax scale "
                "overflow (1e308).",
        situations=["A placeholder 0 left in a config.", "A sign error in a hand edit."],
        solutions=["Use the model's real value for the field named in the message."],
        before='{"num_key_value_heads": 0, ...}',
        after='{"num_key_value_heads": 8, ...}',
        related=("AK504", "AK506"),
    ),
    entry(
        "AK506", "Inconsistent attention sizes",
        meaning="Two fields disagree: query heads not a multiple of KV heads, a hidden size not "
                "divisible by the head count (with no head_dim), or layer_types of the wrong length.",
        trigger="Cross-field checks after the fields parse.",
        situations=["num_key_value_heads copied from another model size.",
                    "layer_types not updated after changing num_hidden_layers."],
        solutions=["Make num_attention_heads a multiple of num_key_value_heads.",
                   "Give head_dim explicitly when hidden_size / heads is not whole.",
                   "Give layer_types exactly num_hidden_layers entries."],
        before='{"num_attention_heads": 32, "num_key_value_heads": 6, ...}',
        after='{"num_attention_heads": 32, "num_key_value_heads": 8, ...}',
        related=("AK505",),
    ),
    entry(
        "AK507", "Unknown model preset",
        meaning="The model name is neither an existing path nor one of attnkit's model presets.",
        trigger="A model argument without '/' and not ending in .json that names no preset.",
        situations=["A typo such as 'lama-3.1-8b'.",
                    "A Hugging Face repo id (attnkit does not download; pass a local directory)."],
        solutions=["Use the suggested preset from the message.",
                   "Pass a local directory or config.json path (./name or /path).",
                   "List presets with `attnkit models`."],
        before="attnkit plan lama-3.1-8b --device h100",
        after="attnkit plan llama-3.1-8b --device h100",
        related=("AK500",),
    ),
    entry(
        "AK508", "Relative position bias is not supported",
        meaning="The model adds a learned relative position bias to every attention score "
                "(T5 family). No attnkit backend computes per-pair biases, so no plan can serve it.",
        trigger="model_type t5, mt5, umt5, longt5, switch_transformers, deberta, deberta-v2, "
                "sew-d, or a config with relative_attention_num_buckets (MPNet too).",
        situations=["Planning an encoder-decoder T5/Flan-T5 checkpoint.",
                    "Planning a DeBERTa-v3 or MPNet embedding model."],
        solutions=["Serve the model with an engine path that supports attention bias (eager attention).",
                   "Choose a rotary-position model for attnkit."],
        before="attnkit plan ./flan-t5-xl --device a100",
        after="attnkit plan whisper-large-v3 --device a100   # a model attnkit can serve",
        related=("AK509", "AK510"),
    ),
    entry(
        "AK509", "ALiBi is not supported",
        meaning="The model encodes positions with ALiBi (a per-head linear bias added to the "
                "scores). No attnkit backend computes ALiBi.",
        trigger="model_type bloom; mpt with attn_config.alibi; falcon with alibi: true; "
                "baichuan 13B (hidden_size != 4096); any config with alibi / use_alibi true or "
                "position_embedding_type alibi.",
        situations=["Planning BLOOM, MPT-7B, Falcon-RW or Baichuan-13B."],
        solutions=["Serve the model with an engine backend that implements ALiBi.",
                   "Choose a rotary-position variant (e.g. Baichuan-7B, Falcon-7B)."],
        before="attnkit plan ./bloom-7b1 --device a100",
        after="attnkit plan ./falcon-7b --device a100   # a rotary model",
        related=("AK508",),
    ),
    entry(
        "AK510", "Unrecognised model config",
        meaning="The config has none of the fields attnkit reads an attention layout from, so it "
                "cannot say what the model needs.",
        trigger="No num_attention_heads/n_head/num_heads/n_heads with num_hidden_layers/n_layer/"
                "num_layers/n_layers, no kv_lora_rank, no encoder_layers + decoder_layers, no text_config.",
        situations=["A tokenizer_config.json or generation_config.json passed by mistake.",
                    "A model family that names its fields differently."],
        solutions=["Pass the model's config.json (not tokenizer or generation config).",
                   "Add num_attention_heads, num_hidden_layers and hidden_size (or head_dim)."],
        before="attnkit plan ./model/generation_config.json",
        after="attnkit plan ./model/config.json",
        related=("AK503",),
    ),
    entry(
        "AK511", "Invalid model value",
        meaning="The model given to the planning API is not a name, path, config dict or ModelAttention.",
        trigger="attnkit.plan(model=X) or load_model(X) with another type; plan_components(X) with "
                "neither a pipeline nor a pipeline preset name or directory.",
        situations=["Passing a transformers PretrainedConfig object (use config.to_dict())."],
        solutions=["Pass config.to_dict(), a path, a preset name, or a ModelAttention."],
        before="attnkit.plan(AutoConfig.from_pretrained(p), 'h100')",
        after="attnkit.plan(AutoConfig.from_pretrained(p).to_dict(), 'h100')",
        related=("AK507",),
    ),
    entry(
        "AK512", "Unsupported layer type",
        meaning="A per-layer list (layer_types, NemotronH's layers_block_type or "
                "hybrid_override_pattern) names a kind of layer attnkit does not know. Known: "
                "full_attention, sliding_attention, chunked_attention, indexed_attention (MLA "
                "models), linear_attention, mlp, moe, conv and hybrid; the pattern characters * M - E.",
        trigger="An unknown entry such as window_attention or compressed_sparse_attention, or "
                "indexed_attention in a model without MLA.",
        situations=["A model family newer than this attnkit.", "A typo in a hand-edited layer_types."],
        solutions=["Serve the model with an engine backend that implements that layer type.",
                   "Fix the entry if it is a typo (the message lists the known ones)."],
        before="attnkit plan ./windowed-model   # layer_types: [\"window_attention\", ...]",
        after="attnkit plan ./sliding-model   # layer_types: [\"sliding_attention\", ...]",
        related=("AK510", "AK513"),
    ),
    entry(
        "AK513", "Config key changes attention in a way attnkit does not model",
        meaning="The config sets a key that changes what attention computes (its mask, which layers "
                "attend, sparsity or positions) and attnkit does not model it for this model family, "
                "so any plan would silently compute something else. attnkit refuses instead. The "
                "message names the key, its value and what attnkit would need; model/keys.py lists "
                "every such key per family with what attnkit does with it.",
        trigger="A key refused for the family (relative_key positions, is_decoder on an encoder, "
                "ModernBERT's local layers, a two-sided window of a bidirectional model, MiniMax's "
                "attn_type_list, is_causal false); a key other families use (attention_chunk_size, "
                "hybrid_override_pattern ...) in a family attnkit does not know; sliding_window "
                "alone in an unknown family; a masked-LM architecture of an unknown family.",
        situations=["A ModernBERT or EmbeddingGemma encoder (local layers attend both ways).",
                    "A new hybrid family whose layer pattern attnkit has no rule for.",
                    "A BERT variant with relative_key position scores."],
        solutions=["Serve the model with an engine that implements the named mechanism.",
                   "If the key is a leftover the model's code does not read, remove it from config.json "
                   "(check the modeling code first).",
                   "Add a rule for the family to attnkit/model/keys.py with a test (model it or refuse it)."],
        before="attnkit plan ./ModernBERT-base",
        after="attnkit plan bge-m3   # an encoder whose every layer is global",
        related=("AK508", "AK509", "AK512"),
    ),
    entry(
        "AK514", "Config too deeply nested or a number too long",
        meaning="The config file is JSON but cannot be read safely: arrays or objects nested "
                "thousands of levels deep, or an integer of more digits than Python converts (4300).",
        trigger="Reading a config.json whose nesting exhausts the parser's recursion limit, or "
                "holding a 5000-digit number.",
        situations=["A corrupted or generated file.", "A fuzzer's input."],
        solutions=["Use the model's real config.json (a few levels deep, ordinary numbers)."],
        before="attnkit plan ./broken/config.json",
        after="attnkit plan ./model/config.json",
        related=("AK501", "AK505"),
    ),
]
