"""AK480-AK489: the minimal engine (attnkit.runner) — loading a model and feeding it requests."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK480", "Model not runnable by the attnkit runner",
        meaning="The runner holds block recipes (norms, MLP, rotary, LM head) for a few "
                "decoder-only families: llama, mistral, qwen2, qwen3, gemma2, gpt_oss, "
                "deepseek_v2, deepseek_v3, kimi_k2 and deepseek_v32 (MLA; V3.2 with DeepSeek sparse "
                "attention), with RoPE of type default, linear, "
                "llama3 or yarn, from unquantized weights. A config outside them parses for "
                "planning, but the runner cannot compute it.",
        trigger="Engine.from_pretrained on a config whose model_type, activation, rope type, "
                "expert routing (DeepSeek scoring_func / topk_method / expert groups) or "
                "attention layout (encoder-decoder) the runner lacks, that carries a "
                "quantization_config, whose rope type needs a field it does not set (llama3 "
                "without low_freq_factor), that combines dual chunk attention with scaled RoPE, "
                "whose DSA indexer cannot be computed as defined (no q_lora_rank, an "
                "index_head_dim that is not a power of two at least qk_rope_head_dim, an "
                "mlp_layer_types other than first_k_dense_replace gives), "
                "or whose hidden_size / intermediate_size / vocab_size is not a positive integer.",
        situations=["A Whisper (encoder-decoder) checkpoint given to the runner.",
                    "DeepSeek-V3 / Kimi-K2 as released (fp8 weights with block scales, a "
                    "quantization_config): the runner does not dequantize.",
                    "A DeepSeek-V2 config edited to topk_method 'noaux_tc' (a V3 router), or "
                    "a V3 config to 'group_limited_greedy'.",
                    "A config with rope_type 'dynamic' or 'longrope'."],
        solutions=["Plan such models with `attnkit plan` and serve them in a full engine; the "
                   "runner is a correctness harness for the families it lists.",
                   "Dequantize a quantized checkpoint to bf16 (and drop its "
                   "quantization_config) before giving it to the runner.",
                   "For tests, build the tiny model from a supported family "
                   "(LlamaConfig, Qwen2Config, MistralConfig, Qwen3Config, Gemma2Config, "
                   "GptOssConfig, DeepseekV2Config, DeepseekV3Config)."],
        before="Engine.from_pretrained('./whisper-tiny')",
        after="attnkit plan ./whisper-tiny --device h100",
        related=("AK481", "AK512"),
    ),
    entry(
        "AK481", "Model weights missing or mismatched",
        meaning="The runner loads weights from a local directory (config.json plus *.safetensors) "
                "or from an in-memory transformers model, and checks every tensor it needs "
                "against the shape the config implies. It never downloads.",
        trigger="Engine.from_pretrained with a path that is not a local model directory, a "
                "directory without safetensors, a config.json / generation_config.json that is "
                "not a JSON object or a *.safetensors file that does not read, a checkpoint "
                "lacking a tensor the config needs, a tensor whose shape disagrees with the "
                "config, or a tensor of integer or bool values (packed or quantized data, which "
                "the runner does not dequantize).",
        situations=["A Hub repo id passed as the source (no download happens).",
                    "A checkpoint saved as pytorch_model.bin only.",
                    "config.json edited (heads, head_dim) without re-saving the weights."],
        solutions=["Pass a local directory written by save_pretrained (safetensors), or the "
                   "transformers model object itself.",
                   "Re-save old checkpoints with save_pretrained(dir, safe_serialization=True).",
                   "Keep config.json and the weights from the same save."],
        before="Engine.from_pretrained('meta-llama/Llama-3.1-8B')",
        after="Engine.from_pretrained('/models/Llama-3.1-8B')",
        related=("AK480", "AK500"),
    ),
    entry(
        "AK483", "Invalid engine request",
        meaning="An argument to the runner's Engine names nothing or cannot be served: an "
                "unknown, repeated or unhashable sequence id, an empty token list, tokens that "
                "are not int ids (text, floats, bools, nested lists), a token id outside the "
                "vocabulary, counts that disagree (tokens vs ids, prompts vs prompt_lens), a "
                "max_new_tokens, max_tokens or page_size that is not a whole number, a max_tokens "
                "whose KV cache would not fit (more pages than int32 block tables index, or more "
                "bytes than the device has free), an unknown dtype, a device that cannot run "
                "kernels here (meta, cuda without CUDA, mps without MPS, xpu, a GPU index past the "
                "count), a backend option the backend does not take, or a call the method's "
                "signature does not accept (an unknown keyword, a missing argument).",
        trigger="Engine.from_pretrained / prefill / decode / step / generate / release with such "
                "an argument.",
        situations=["decode called after release, or with a token per finished sequence too many.",
                    "A tokenizer from another model producing ids >= vocab_size.",
                    "dtype='float8' or kv_cache_dtype='int8'.",
                    "max_tokens=10**12 meant as 'no limit'.",
                    "release(['a', 'b']) where 'b' already finished: nothing is freed."],
        solutions=["Use engine.ids for the live sequences; decode one token per id.",
                   "Size max_tokens to the KV room the device has (the message gives the bytes "
                   "per token and the memory free).",
                   "Check the tokenizer matches the model (ids < vocab_size).",
                   "Use fp32, fp16 or bf16 compute; fp32/fp16/bf16/fp8_e4m3/fp8_e5m2 KV cache.",
                   "Pick a device this machine has (device='cpu', or 'cuda:N' below "
                   "torch.cuda.device_count()).",
                   "Pass backend_options only with a backend that takes them (e.g. "
                   "torch_native's mla_form)."],
        before="engine.decode([7, 9])            # one live sequence",
        after="engine.decode([7], ids=engine.ids)",
        fixes={
            **dict.fromkeys(("seq_id", "ids", "seqs", "batch", "prompt_lens"),
                            ["Use engine.ids for the live sequences; decode one token per id."]),
            **dict.fromkeys(("tokens", "prompts"),
                            ["Check the tokenizer matches the model (ids < vocab_size)."]),
            "max_tokens": ["Size max_tokens to the KV room the device has (the message gives the bytes "
                           "per token and the memory free)."],
            **dict.fromkeys(("dtype", "kv_cache_dtype"),
                            ["Use fp32, fp16 or bf16 compute; fp32/fp16/bf16/fp8_e4m3/fp8_e5m2 KV cache."]),
            **dict.fromkeys(("device", "tp_size"),
                            ["Pick a device this machine has (device='cpu', or 'cuda:N' below "
                             "torch.cuda.device_count()); `attnkit plan --device` presets are for planning only."]),
            **dict.fromkeys(("backend", "backend_options"),
                            ["Name a backend attnkit has (attnkit backends), and pass backend_options only "
                             "with a backend that takes them (e.g. torch_native's mla_form)."]),
            "*": ["The message names the argument and what it accepts."],
        },
        related=("AK400", "AK405"),
    ),
    entry(
        "AK488", "Per-step state used with another step",
        meaning="The runner builds one per-step object for each step (the StepContext: the "
                "backend and its plan for the step's metadata, the rotary cos/sin tables at "
                "the step's positions, the dual chunk tables) and passes it to every layer of "
                "that step. A context built for one step was handed to the model with another "
                "step's tokens: its tables hold other positions and its plan other requests, "
                "so the result would be silently wrong.",
        trigger="DecoderModel.forward(tokens, ctx) with a token count other than the count of "
                "the step ctx was built for.",
        situations=["Code that drives the model itself keeps one context across steps.",
                    "A context built from one BatchMetadata, then the batch rebuilt."],
        solutions=["Build the context for each step from that step's StepState: "
                   "model.context(backend, cache, step), or use Engine.step, which does."],
        before="model.forward(tokens_of_step2, model.context(backend, cache, step1))",
        after="model.forward(tokens_of_step2, model.context(backend, cache, step2))",
        related=("AK483",),
    ),
]
