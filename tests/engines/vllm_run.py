"""Run tiny models through ``vllm.LLM(...).generate`` in this process and write what came out.

    python tests/engines/vllm_run.py [--kv-cache-dtype=fp8] OUT.json MODEL_DIR [MODEL_DIR ...]

Greedy, fp32, eager, logprobs of the top 5 tokens at every step, prompts of several lengths
(some longer than the sliding windows and than one 32-token block). The test environment
decides which backend vLLM runs (ATTNKIT_VLLM=1 or not). OUT.json holds, per model, the tokens
and logprobs of each prompt, plus attnkit's counts in this process and the class of the
attention implementation vLLM built (when the engine runs in this process).
"""
from __future__ import annotations

import gc
import json
import sys

PROMPT_LENGTHS = (5, 17, 40)
MAX_TOKENS = 16


def prompts(vocab: int = 256) -> list[list[int]]:
    return [[(7 * i + 3 * j + 1) % vocab for j in range(n)] for i, n in enumerate(PROMPT_LENGTHS)]


def run(model_dir: str, kv_cache_dtype: str = "auto") -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, skip_tokenizer_init=True,
              max_model_len=128, block_size=32, max_num_seqs=4, seed=0,
              kv_cache_dtype=kv_cache_dtype)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, logprobs=5, detokenize=False)
    results = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts()], params)
    out = {"outputs": [{"tokens": list(r.outputs[0].token_ids),
                        "logprobs": [{str(t): lp.logprob for t, lp in step.items()}
                                     for step in r.outputs[0].logprobs]} for r in results]}
    out["impl"] = _impl_class(llm)
    del llm
    gc.collect()
    return out


def _impl_class(llm) -> str | None:
    """The class of the first attention layer's impl, where the engine runs in this process."""
    try:
        from vllm.config import get_layers_from_vllm_config  # noqa: F401
        runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
        for module in runner.model.modules():
            impl = getattr(module, "impl", None)
            if impl is not None:
                return f"{type(impl).__module__}.{type(impl).__qualname__}"
    except AttributeError:
        return None
    return None


def main(argv: list[str]) -> int:
    kv = "auto"
    if argv and argv[0].startswith("--kv-cache-dtype="):
        kv = argv.pop(0).split("=", 1)[1]
    out_path, *models = argv
    report = {m: run(m, kv) for m in models}
    try:
        from attnkit.integrations.vllm.backend import STATS
        report["attnkit_stats"] = dict(STATS)
    except ImportError:
        report["attnkit_stats"] = None
    with open(out_path, "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
