"""Every MHA family x every backend the planner can choose on CPU (forced one at a time) x
page sizes 1 and 16: each prefill row and three decode steps equal transformers (fp32), and
greedy generation of a batch of different lengths is token-identical. (DeepSeek-V2's MLA
backends: test_runner_deepseek.py; dual chunk: test_runner_dual_chunk.py.)"""
import pytest

from attnkit.runner import Engine
from runner_helpers import hf_greedy, prefill_then_decode_match

# 21 tokens: several pages at size 16 as well as 1; windows (mistral 5, gemma2 6) slide.
PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64, 2, 9, 40, 41, 42, 43, 44, 45],
           [4, 6, 8, 10], [3, 3, 3, 3, 3, 9, 17]]
NEW = 6
# What the planner offers on CPU today; the test fails if it offers fewer (or more: add them).
CPU_BACKENDS = {"llama": {"sdpa", "torch_native"}, "qwen2": {"sdpa", "torch_native"},
                "mistral": {"sdpa", "torch_native"}, "qwen2_swa": {"sdpa", "torch_native"},
                "qwen3": {"sdpa", "torch_native"}, "gemma2": {"torch_native"},
                "gpt_oss": {"torch_native"}}


def choosable(path, page_size: int) -> set[str]:
    """The backends the planner would pick or accept for this checkpoint on this CPU."""
    plan = Engine.from_pretrained(path, page_size=page_size, max_tokens=64).plan
    return {plan.prefill_backend, plan.decode_backend, *plan.alternatives["prefill"],
            *plan.alternatives["decode"]}


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("family", sorted(CPU_BACKENDS))
def test_every_cpu_backend_and_page_size_matches_transformers(tiny_model, family, page_size):
    path, hf = tiny_model(family)
    backends = choosable(path, page_size)
    assert backends == CPU_BACKENDS[family]
    expected = [hf_greedy(hf, p, NEW) for p in PROMPTS]
    for backend in sorted(backends):
        engine = Engine.from_pretrained(path, backend=backend, page_size=page_size)
        assert engine.backend.name == backend and engine.page_size == page_size
        prefill_then_decode_match(engine, hf, PROMPTS, decode_steps=3)
        assert engine.generate(PROMPTS, max_new_tokens=NEW) == expected, backend
        assert engine.allocator.num_free == engine.allocator.num_pages
