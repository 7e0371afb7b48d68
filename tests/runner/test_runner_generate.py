"""Greedy generation equals transformers' ``generate(do_sample=False)``."""
import pytest

from attnkit.runner import Engine
from runner_helpers import hf_greedy

PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22], [4, 6], [3, 3, 3, 3, 3, 9, 17]]
NEW = 12


@pytest.mark.parametrize("family,backend", [("llama", "torch_native"), ("qwen2", "sdpa"),
                                            ("mistral", "sdpa"), ("gemma2", "torch_native"),
                                            ("gpt_oss", "torch_native")])
def test_greedy_generation_matches_transformers(tiny_model, family, backend):
    path, hf = tiny_model(family)
    engine = Engine.from_pretrained(path, backend=backend, page_size=4)
    got = engine.generate(PROMPTS, max_new_tokens=NEW)      # batched, different lengths
    assert got == [hf_greedy(hf, p, NEW) for p in PROMPTS]
    assert engine.ids == [] and engine.allocator.num_free == engine.allocator.num_pages


def test_generation_stops_at_eos_and_accepts_one_prompt(tiny_model):
    path, _ = tiny_model("llama")
    engine = Engine.from_pretrained(path, page_size=4)
    free = engine.generate(PROMPTS[0], max_new_tokens=NEW)
    assert isinstance(free[0], int) and len(free) == NEW
    eos = free[3]
    stopped = engine.generate([PROMPTS[0], PROMPTS[1]], max_new_tokens=NEW, eos_token_id=eos)
    assert stopped[0] == free[:free.index(eos) + 1]
    assert engine.generate(PROMPTS[0], max_new_tokens=0) == []
