"""AK484-AK487: generation on the runner — the scheduler, sampling, LLM and `attnkit generate`."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK484", "No tokenizer for text prompts",
        meaning="`attnkit generate --prompt TEXT` turns text into token ids with the "
                "checkpoint's own tokenizer (tokenizer.json read by the `tokenizers` package, or "
                "the files `transformers.AutoTokenizer` reads). Neither package is installed, or "
                "the model directory holds no tokenizer files.",
        trigger="attnkit generate MODEL_DIR --prompt ... without a usable tokenizer.",
        situations=["A bare torch install (no tokenizers / transformers).",
                    "A model directory with config.json and weights only (saved with "
                    "model.save_pretrained, not tokenizer.save_pretrained)."],
        solutions=["Pass token ids instead: --prompt-ids \"1,2,3\".",
                   "pip install tokenizers (or transformers).",
                   "Save the tokenizer next to the weights: tokenizer.save_pretrained(MODEL_DIR)."],
        before="attnkit generate ./tiny-llama --prompt \"Hello\"",
        after="attnkit generate ./tiny-llama --prompt-ids \"1,15043\"   # ids from the model's own tokenizer",
        related=("AK486",),
    ),
    entry(
        "AK485", "Request can never fit the KV cache",
        meaning="A request needs KV room for its prompt plus all but the last of its new "
                "tokens. When that exceeds the whole cache (max_tokens, rounded up to pages), it "
                "could not run even alone, so the scheduler refuses it before anything runs "
                "(requests that merely have to wait for room are queued or preempted instead).",
        trigger="Scheduler.add / LLM.generate / Engine.generate / attnkit generate with "
                "len(prompt) + max_new_tokens - 1 > the cache's tokens.",
        situations=["A long prompt on the default max_tokens=4096.",
                    "max_new_tokens set far past what the cache was sized for."],
        solutions=["Build the engine with a larger max_tokens (LLM(..., max_tokens=N), "
                   "attnkit generate --max-tokens N).",
                   "Shorten the prompt or lower max_new_tokens."],
        before="LLM(model, max_tokens=1024).generate([prompt_of_1000], max_new_tokens=100)",
        after="LLM(model, max_tokens=2048).generate([prompt_of_1000], max_new_tokens=100)",
        related=("AK400",),
    ),
    entry(
        "AK486", "Invalid generation request",
        meaning="A sampling or scheduling parameter is out of range: temperature must be a "
                "finite number >= 0 (0 is greedy), top_p in (0, 1], top_k, max_new_tokens and "
                "stop / EOS token ids ints >= 0, a seed an int in [0, 2**64 - 1]; "
                "max_num_batched_tokens and max_num_seqs ints >= 1; seeds one per prompt; "
                "prompts a list of token-id lists (not text); progress and ignore_eos bools; "
                "SamplingParams for params and a hashable request id not already in use; "
                "SamplingParams, Scheduler and Scheduler.add called with keywords they take. "
                "A top_k at or above the vocabulary size keeps every token.",
        trigger="SamplingParams(...), Scheduler(...), Scheduler.add, LLM.generate or attnkit "
                "generate with such a value.",
        situations=["top_p=0 meant as 'off' (use 1.0).", "temperature=-1 meant as greedy (use 0).",
                    "A list of seeds shorter than the list of prompts."],
        solutions=["Use temperature=0 for greedy, top_p=1.0 and top_k=0 for no filtering.",
                   "Give one seed, or exactly one seed per prompt."],
        before="llm.generate(prompts, top_p=0)",
        after="llm.generate(prompts, top_p=1.0)",
        related=("AK483",),
        fixes={"seed": ["Give one seed, or exactly one seed per prompt."],
               **dict.fromkeys(("temperature", "top_p", "top_k"),
                               ["Use temperature=0 for greedy, top_p=1.0 and top_k=0 for no filtering."]),
               "*": ["The message names the argument and the values it accepts."]},
    ),
    entry(
        "AK487", "Setting the runner does not support",
        meaning="The runner plans its backends with attnkit's planner, but runs without "
                "speculative decoding and plans with the backends it is given. Planning flags "
                "that describe those features are refused rather than ignored.",
        trigger="LLM(...) or attnkit generate with speculative_tokens > 0, deny, or a keyword "
                "that is neither a planning setting nor an Engine option (backend_options, "
                "tp_timeout); LLM.generate with a keyword it does not take (or the prompts "
                "missing, or extra positional arguments).",
        situations=["A fleet-wide flag set copied from `attnkit plan` (--speculative-tokens 4).",
                    "A misspelt keyword (attention_backed=...).",
                    "LLM's max_tokens passed to generate (meant: max_new_tokens)."],
        solutions=["Drop the flag for runner runs; check the full-engine setting with "
                   "`attnkit plan MODEL --device D --speculative-tokens N`.",
                   "Pick the backend directly (--attention-backend NAME) instead of --deny."],
        before="LLM(\"./tiny-llama\", speculative_tokens=4)",
        after="LLM(\"./tiny-llama\")",
        related=("AK306", "AK483"),
    ),
]
