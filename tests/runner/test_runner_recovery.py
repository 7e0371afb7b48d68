"""A step that fails part-way (after pages were handed out, before the KV was committed)
leaves the engine, its page allocator and an LLM usable, with the same outputs as before."""
import pytest

from attnkit.runner import LLM, Engine

PROMPTS = [[1, 5, 9, 3, 7, 8, 20], [4, 6], [3, 3, 3, 9, 17]]


class FailOnce:
    """Wrap ``model.forward`` so that its ``nth`` call raises RuntimeError."""

    def __init__(self, model, nth: int):
        self.model, self.inner, self.calls, self.nth = model, model.forward, 0, nth
        model.forward = self

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.nth:
            raise RuntimeError("injected failure")
        return self.inner(*args, **kwargs)


def test_failed_extend_keeps_page_accounting(tiny_model, hf_logits):
    path, hf = tiny_model("llama")
    engine = Engine.from_pretrained(path, backend="torch_native", page_size=4, max_tokens=16)
    engine.prefill([PROMPTS[0][:3]], ids=["a"])
    FailOnce(engine.model, nth=1)
    with pytest.raises(RuntimeError):
        engine.step({"a": PROMPTS[0][3:]})                  # grew to 7 tokens, then failed
    assert engine.tokens("a") == PROMPTS[0][:3]
    for t in PROMPTS[0][3:]:                                # the same tokens, one at a time
        engine.step({"a": [t]})
        held = engine.sequence("a").pages
        assert len(held) * 4 >= len(engine.tokens("a"))
        assert len(held) == max(2, -(-len(engine.tokens("a")) // 4))   # no page drift
    out = engine.step({"a": [PROMPTS[1][0]]})["a"]
    from runner_helpers import close

    close(out, hf_logits(hf, PROMPTS[0] + PROMPTS[1][:1])[-1:])
    engine.release()
    assert engine.allocator.num_free == engine.allocator.num_pages


@pytest.mark.parametrize("nth", [1, 3, 6])
def test_llm_is_usable_after_a_failed_generate(tiny_model, nth):
    path, _ = tiny_model("llama")
    llm = LLM(path, device="cpu", attention_backend="torch_native", page_size=4, max_tokens=24,
              max_num_batched_tokens=4)                     # chunks and preemptions
    kw = dict(max_new_tokens=8, ignore_eos=True, temperature=0.8, seed=3)
    want = [o.token_ids for o in llm.generate(PROMPTS, **kw)]
    FailOnce(llm.engine.model, nth=nth)
    with pytest.raises(RuntimeError):
        llm.generate(PROMPTS, **kw)
    engine = llm.engine
    assert engine.ids == [] and engine.allocator.num_free == engine.allocator.num_pages
    assert [o.token_ids for o in llm.generate(PROMPTS, **kw)] == want
