"""A step that fails part-way (after pages were handed out, before the KV was committed)
leaves the engine and its page allocator as they were before the step (free pages in the
same order, every sequence's tokens, cached count and pages) and an LLM usable, with the same
outputs as before. Decode ahead (several steps in one call): test_runner_graphs.py."""
import pytest

from attnkit.errors import AttnkitError
from attnkit.runner import LLM, Engine
from runner_helpers import FailOnce, close, engine_state

PROMPTS = [[1, 5, 9, 3, 7, 8, 20], [4, 6], [3, 3, 3, 9, 17]]


def test_failed_extend_keeps_page_accounting(tiny_model, hf_logits):
    path, hf = tiny_model("llama")
    engine = Engine.from_pretrained(path, backend="torch_native", page_size=4, max_tokens=16)
    engine.prefill([PROMPTS[0][:3]], ids=["a"])
    before = engine_state(engine)
    FailOnce(engine.model, nth=1)
    with pytest.raises(RuntimeError):
        engine.step({"a": PROMPTS[0][3:]})                  # grew to 7 tokens, then failed
    assert engine_state(engine) == before                   # the page it took came back
    for t in PROMPTS[0][3:]:                                # the same tokens, one at a time
        engine.step({"a": [t]})
        held = engine.sequence("a").pages
        assert len(held) == -(-len(engine.tokens("a")) // 4)   # no page drift
    out = engine.step({"a": [PROMPTS[1][0]]})["a"]
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


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("error", [RuntimeError("kernel"), AttnkitError("AK458", "kernel")],
                         ids=["raw", "coded"])
def test_failed_step_gives_back_its_pages(tiny_model, hf_logits, layer, error):
    """A MIXED step (a prompt continued, a decode that crosses into a new page, a new
    sequence) whose attention raises in either layer: the error is the backend's own, the
    ledger and every record are as before the step, and the same step then runs as on an
    engine that never failed (same logits as transformers, same pages)."""
    path, hf = tiny_model("llama")

    def build():
        engine = Engine.from_pretrained(path, backend="torch_native", page_size=4, max_tokens=40)
        engine.prefill([PROMPTS[0][:3], PROMPTS[1]], ids=["a", "b"])
        engine.decode([7, 11], ids=["a", "b"])          # a: 4 tokens (one full page), b: 3
        return engine

    engine, twin = build(), build()
    batch = {"a": [9], "b": [5, 6], "c": PROMPTS[2]}
    before = engine_state(engine)
    fail = FailOnce(engine.backend, nth=layer + 1, error=error)
    with pytest.raises(type(error)) as raised:
        engine.step(batch)
    assert raised.value is error and fail.calls == layer + 1
    assert engine_state(engine) == before and engine.ids == ["a", "b"]
    fail.disarm()
    out, want = engine.step(batch), twin.step(batch)
    assert engine_state(engine) == engine_state(twin)
    history = {"a": PROMPTS[0][:3] + [7], "b": PROMPTS[1] + [11], "c": []}
    for i, new in batch.items():
        assert out[i].equal(want[i])
        close(out[i], hf_logits(hf, history[i] + new)[-len(new):])
