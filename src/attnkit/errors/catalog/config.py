"""AK300-AK399: settings that conflict with each other, with the model, or name nothing."""
from attnkit.errors.catalog import entry

ENTRIES = [
    entry(
        "AK300", "Unknown attention backend name",
        meaning="The name given to --attention-backend (or --prefill-/--decode-attention-backend, "
                "--deny, ATTNKIT_ATTENTION_BACKEND) is not an attnkit backend or a known alias.",
        trigger="A backend name that matches no registered backend or alias.",
        situations=["A typo (tritn).", "A name from a newer attnkit than the one installed."],
        solutions=["Use the suggested name (did you mean ...); `attnkit backends` lists every name."],
        before="attnkit plan llama-3.1-8b --device h100 --attention-backend tritn",
        after="attnkit plan llama-3.1-8b --device h100 --attention-backend triton",
        related=("AK301",),
    ),
    entry(
        "AK301", "Backend from another engine",
        meaning="The name is a backend of another inference engine (FlashInfer, FA3, FlashMLA, "
                "TRT-LLM, AITER, ...). attnkit has no such backend; the message names attnkit's "
                "backends that serve this model here.",
        trigger="A backend name attnkit knows as another engine's.",
        situations=["Reusing an SGLang or vLLM launch flag (--attention-backend flashinfer)."],
        solutions=["Use one of the attnkit backends the message lists, or omit the flag."],
        before="attnkit plan llama-3.1-8b --device h100 --attention-backend flashinfer",
        after="attnkit plan llama-3.1-8b --device h100 --attention-backend triton",
        related=("AK300", "AK121"),
    ),
    entry(
        "AK302", "Dual chunk attention conflict",
        meaning="The model's config turns on dual chunk attention (dual_chunk_attention_config, "
                "Qwen2.5-1M), which only a backend declaring 'dual_chunk' computes. Another backend "
                "was named, or none that implements it is available. Plain attention is exact up to "
                "chunk_size tokens and loses quality beyond it, so attnkit does not switch silently.",
        trigger="A dual-chunk model with --dual-chunk on/auto and a named backend without "
                "'dual_chunk', or with no such backend registered or usable.",
        situations=["A fleet-wide --attention-backend triton applied to Qwen2.5-7B-Instruct-1M."],
        solutions=["Use --attention-backend dual_chunk.",
                   "Or keep your backend with --dual-chunk off (quality drops beyond chunk_size)."],
        before="attnkit plan qwen2.5-7b-instruct-1m --device h100 --attention-backend triton",
        after="attnkit plan qwen2.5-7b-instruct-1m --device h100 --attention-backend dual_chunk",
        related=("AK103", "AK470"),
    ),
    entry(
        "AK303", "Page size conflict",
        meaning="The --page-size you set is not accepted by the chosen backend(s). attnkit never "
                "changes a page size you set; the message lists the valid sizes. With no backend named, "
                "the planner picks one that accepts it instead; where the device profile measures that "
                "one 1.5x or more slower than the plan without the flag, the plan warns (AK312 with "
                "--strict).",
        trigger="An explicit --page-size rejected by a named backend or by every candidate.",
        situations=["A fleet-wide --page-size 128 with triton_mla (1, 16, 32, 64).",
                    "A page size that does not divide the dual-chunk length."],
        solutions=["Use one of the listed page sizes.", "Omit --page-size (default 16 where accepted)."],
        before="attnkit plan deepseek-v3 --device h100 --attention-backend triton_mla --page-size 128",
        after="attnkit plan deepseek-v3 --device h100 --attention-backend triton_mla --page-size 64",
        related=("AK107", "AK308", "AK314"),
    ),
    entry(
        "AK304", "KV-cache dtype conflict",
        meaning="The --kv-cache-dtype you set (e.g. fp8) is not supported by the chosen or candidate "
                "backends. The message lists the backends that store it.",
        trigger="An explicit --kv-cache-dtype that the named backend, or every candidate, rejects.",
        situations=["--kv-cache-dtype fp8_e4m3 with the dual_chunk backend."],
        solutions=["Use a backend the message lists.", "Omit --kv-cache-dtype (KV in the compute dtype)."],
        before="attnkit plan deepseek-v3 --device h100 --attention-backend triton_mla --kv-cache-dtype fp8_e5m2",
        after="attnkit plan deepseek-v3 --device h100 --attention-backend triton_mla --kv-cache-dtype fp8_e4m3",
        related=("AK106",),
    ),
    entry(
        "AK305", "Tensor-parallel size does not divide the heads",
        meaning="Tensor parallelism splits query heads evenly over ranks; KV heads are split too, or "
                "replicated when ranks outnumber them (then the rank count must be a multiple of the "
                "KV heads). This --tp-size splits unevenly.",
        trigger="--tp-size N where some layer's query heads % N != 0, or KV heads neither divide "
                "nor are divided by N.",
        situations=["--tp-size 3 or 6 for Llama (64 query heads, 8 KV heads)."],
        solutions=["Use a tensor-parallel size from the message's list (powers of two that divide the heads)."],
        before="attnkit plan llama-3.1-70b --device h100 --tp-size 3",
        after="attnkit plan llama-3.1-70b --device h100 --tp-size 4",
        related=(),
    ),
    entry(
        "AK306", "Invalid setting value",
        meaning="A planning setting has a value of the wrong type or outside its range (a page size "
                "< 1, an unknown dtype, --dual-chunk maybe, an unknown request key).",
        trigger="plan() or `attnkit plan` with a malformed request; checked before planning.",
        situations=["--kv-cache-dtype fp7", "--page-size 0", "a request dict with a misspelt key"],
        solutions=["Use a value the message allows (its list of choices, or the type and range it names)."],
        before="attnkit plan llama-3.1-8b --kv-cache-dtype fp7",
        after="attnkit plan llama-3.1-8b --kv-cache-dtype fp8_e4m3",
        related=(),
    ),
    entry(
        "AK307", "Backend denied",
        meaning="The backend is on the deny list (--deny or ATTNKIT_DENY_BACKENDS): never chosen "
                "automatically, and a conflict when also named explicitly.",
        trigger="A denied backend named with --attention-backend (or considered automatically).",
        situations=["ATTNKIT_DENY_BACKENDS=triton set on a fleet, and --attention-backend triton on one job."],
        solutions=["Remove it from the deny list, or name another backend."],
        before="ATTNKIT_DENY_BACKENDS=triton attnkit plan llama-3.1-8b --device h100 --attention-backend triton",
        after="attnkit plan llama-3.1-8b --device h100 --attention-backend triton",
        related=("AK120",),
    ),
    entry(
        "AK308", "No page size shared by the chosen backends",
        meaning="Prefill and decode backends share one KV cache, so they must accept one page size; "
                "the candidates that serve each phase have none in common.",
        trigger="Hybrid plans whose prefill and decode candidates accept disjoint page sizes.",
        situations=["--prefill-attention-backend A --decode-attention-backend B with A pages "
                    "multiples of 64 and B pages of at most 32."],
        solutions=["Use one --attention-backend for both phases, or backends with a common page size."],
        before="attnkit plan llama-3.1-8b --prefill-attention-backend a --decode-attention-backend b",
        after="attnkit plan llama-3.1-8b --attention-backend a",
        related=("AK303",),
    ),
    entry(
        "AK309", "Compute dtype not available on this device",
        meaning="The device cannot compute in the dtype you set: bf16 needs CUDA compute "
                "capability sm80 or newer (Ampere), so a T4 (sm75) or V100 (sm70) has none. attnkit "
                "never changes a dtype you set; when you leave --dtype unset on such a device it "
                "fills fp16 and records why.",
        trigger="--dtype bf16 (or a request dtype bf16) planned for a CUDA device below sm80.",
        situations=["A fleet-wide --dtype bf16 reaching T4 nodes."],
        solutions=["Use --dtype fp16 on this device.", "Omit --dtype (attnkit fills fp16 here).",
                   "Plan for a device with bf16 (sm80+: a100, l4, h100)."],
        before="attnkit plan gemma-2-9b --device t4 --dtype bf16",
        after="attnkit plan gemma-2-9b --device t4 --dtype fp16",
        related=("AK105", "AK306"),
    ),
    entry(
        "AK311", "CUDA graphs asked for on a device without them",
        meaning="--cuda-graph on asks for decode steps captured as CUDA graphs, which record GPU "
                "kernels; a CPU (or MPS, XPU) plan has none to capture. attnkit never changes a "
                "setting you made; with --cuda-graph auto (the default) graphs are turned on only "
                "for CUDA plans whose backends declare cuda_graph, and stay off elsewhere.",
        trigger="--cuda-graph on (or cuda_graph=True in a request) planned for a cpu, mps or xpu "
                "device.",
        situations=["A launch script with --cuda-graph reused for a CPU smoke test."],
        solutions=["Drop --cuda-graph (auto decides per device).", "Plan for a CUDA device."],
        before="attnkit plan llama-3.1-8b --device cpu --cuda-graph on",
        after="attnkit plan llama-3.1-8b --device cpu",
        related=("AK109", "AK120"),
    ),
    entry(
        "AK312", "Backend does not declare a required numeric property",
        meaning="--require batch-invariant (or deterministic) asks for backends whose output is "
                "proven bit for bit: batch_invariant, a request's output does not depend on the "
                "other requests of its batch; deterministic, the same step gives the same bits run "
                "after run. A backend declares them only where tests/conformance/test_bitwise.py "
                "proves them, for all its kernels or through kernel variants (then it serves with "
                "those variants alone, one for each role of the phase, runnable here); this one does "
                "not, so it is not chosen (or, when named, refused).",
        trigger="--require NAME with a backend that does not declare NAME, named or considered, or "
                "whose variants that declare it cannot run for this model here.",
        situations=["--attention-backend sdpa --require batch-invariant: sdpa runs one padded call "
                    "per step, whose shape (and so its kernel's blocking) depends on the batch."],
        solutions=["Drop the backend flag so the planner picks one that declares it.",
                   "Drop --require if tolerance-level agreement is enough."],
        before="attnkit plan llama-3.1-8b --device h100 --attention-backend sdpa --require batch-invariant",
        after="attnkit plan llama-3.1-8b --device h100 --require batch-invariant",
        related=("AK313", "AK121"),
    ),
    entry(
        "AK313", "No backend serves the model with the required numerics",
        meaning="Some backend serves this model here, but none that declares what --require asks "
                "for (batch_invariant, deterministic). The message names those that would serve "
                "without the requirement and those that declare it (and why they do not serve here).",
        trigger="--require NAME when every candidate that declares NAME is denied, not usable on "
                "the device, or lacks a feature the model needs.",
        situations=["--deny torch_native,triton --require batch-invariant on a GPU: torch_native "
                    "declares it, triton through its split_fixed / paged_fixed variants."],
        solutions=["Drop --require (the message names what then serves).",
                   "Let a backend that declares it serve (drop the --deny, plan another device)."],
        before="attnkit plan llama-3.1-8b --device h100 --deny torch_native,triton --require batch-invariant",
        after="attnkit plan llama-3.1-8b --device h100 --deny torch_native,triton",
        related=("AK312", "AK120"),
    ),
    entry(
        "AK310", "Command line not understood",
        meaning="An `attnkit` subcommand could not parse its arguments: an unknown flag, a flag "
                "without its value, a value outside its choices, or no model. With --json the failure "
                "is one JSON object (for `attnkit plan` a failed plan object).",
        trigger="argparse rejects the command line of any `attnkit` subcommand.",
        situations=["A flag from another tool (--model-path, --gpu).", "--device with no value.",
                    "A planning flag the runner does not run (`attnkit generate --deny`, AK487)."],
        solutions=["Run `attnkit COMMAND --help` for its flags."],
        before="attnkit plan llama-3.1-8b --gpu h100",
        after="attnkit plan llama-3.1-8b --device h100",
        related=("AK306",),
    ),
    entry(
        "AK314", "A setting makes the plan measurably slower (--strict)",
        meaning="An explicit setting (a page size, a KV-cache dtype, --deny ...) moves a role "
                "(prefill, extend or decode) to a backend the device profile measures at least 1.5x "
                "slower than the backend the plan without that setting runs. Without --strict this "
                "is a warning and the plan runs; --strict refuses it. The message names the flag, "
                "both backends and both rates, all from the profile.",
        trigger="`attnkit plan --strict` where a flag the user set costs a role 1.5x or more of its "
                "measured rate.",
        situations=["--page-size 128 for DeepSeek-V3: triton_mla (16-64) cannot serve it, decode falls "
                    "to torch_native.",
                    "--kv-cache-dtype fp8_e5m2, which triton_mla does not store."],
        solutions=["Drop the flag: attnkit fills the setting in by measurement.",
                   "Or keep it and drop --strict: the plan runs, slower."],
        before="attnkit plan deepseek-v3 --device h100 --page-size 128 --strict",
        after="attnkit plan deepseek-v3 --device h100 --page-size 64 --strict",
        related=("AK303", "AK107"),
    ),
    entry(
        "AK315", "Unknown error code",
        meaning="`attnkit explain` was given a code the catalog does not hold. Codes are AK and three "
                "digits; the message lists the codes that begin with what was typed, or the nearest.",
        trigger="attnkit explain CODE with a CODE not in the catalog (docs/errors/README.md lists them).",
        situations=["A prefix (AK12) instead of a whole code.", "A code from a newer attnkit."],
        solutions=["Use a code the message suggests.", "Every code: docs/errors/README.md."],
        before="attnkit explain AK12",
        after="attnkit explain AK121",
        related=("AK310",),
    ),
]
