"""Hypothesis over the runner API: random sequences of Engine, Scheduler and LLM calls with
random (often bad) prompts, ids, sampling parameters and limits. Every call either runs or
raises AttnkitError; after a refusal the engine's live sequences, their pages and those
pages' cache contents, the free pages and the scheduler's queues are what they were; after
a success the bookkeeping is consistent (every page free or owned once, each sequence's
tokens fit its row) and generated tokens are in the vocabulary."""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from attnkit.errors import AttnkitError
from attnkit.runner import LLM, SamplingParams, Scheduler

VOCAB, PAGE, MAX_TOKENS = 128, 4, 32

def mostly(good, bad):
    """``good`` about four times in five."""
    return st.integers(0, 4).flatmap(lambda i: bad if i == 0 else good)


token = mostly(st.integers(0, VOCAB - 1),
               st.one_of(st.integers(-2, VOCAB + 2), st.just(2 ** 70), st.floats(-1, 200),
                         st.booleans(), st.text(max_size=1)))
prompt = mostly(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=7),
                st.one_of(st.lists(token, max_size=7), st.text(max_size=3), st.integers()))
seq_id = mostly(st.one_of(st.integers(0, 3), st.sampled_from(["a", "b"])),
                st.one_of(st.none(), st.lists(st.integers(), max_size=1),
                          st.tuples(st.lists(st.integers(), max_size=1))))
number = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3),
                   st.just(2 ** 64), st.none(), st.text(max_size=1))
good_sampling = st.fixed_dictionaries({}, optional={
    "temperature": st.one_of(st.just(0.0), st.floats(0, 2)), "top_p": st.floats(0.05, 1),
    "top_k": st.one_of(st.integers(0, 5), st.just(2 ** 63), st.just(2 ** 70)),
    "seed": st.integers(0, 2 ** 64 - 1), "max_new_tokens": st.integers(0, 5),
    "eos_token_id": st.one_of(st.integers(0, VOCAB), st.lists(st.integers(0, 3), max_size=2)),
    "ignore_eos": st.booleans(), "max_num_seqs": st.integers(1, 3),
    "max_num_batched_tokens": st.integers(1, 9)})
bad_sampling = st.fixed_dictionaries({}, optional={
    "temperature": number, "top_p": number, "top_k": number, "seed": number,
    "max_new_tokens": st.one_of(st.just(10 ** 9), number), "eos_token_id": number,
    "ignore_eos": number, "max_num_seqs": number, "max_num_batched_tokens": number,
    "bogus": st.integers()})
sampling = mostly(good_sampling, bad_sampling)
maybe_ids = st.one_of(st.none(), st.lists(seq_id, max_size=3))

op = st.one_of(
    st.tuples(st.just("prefill"), st.lists(prompt, max_size=3), maybe_ids),
    st.tuples(st.just("decode"), st.lists(token, max_size=3), maybe_ids),
    st.tuples(st.just("step"), st.dictionaries(st.one_of(st.integers(0, 3), st.sampled_from("ab")),
                                               prompt, max_size=3),
              mostly(st.sampled_from(["all", "last"]), st.just("x"))),
    st.tuples(st.just("release"), st.one_of(maybe_ids, seq_id)),
    st.tuples(st.just("add"), prompt, sampling, seq_id),
    st.tuples(st.just("sched_step")), st.tuples(st.just("sched_step")),
    st.tuples(st.just("abort")),
    st.tuples(st.just("generate"), st.lists(prompt, max_size=3), sampling),
)


@pytest.fixture(scope="module")
def llm(tiny_model):
    path, _ = tiny_model("llama")
    return LLM(path, device="cpu", attention_backend="torch_native", page_size=PAGE,
               max_tokens=MAX_TOKENS)


def snapshot(engine, sched):
    """What a refusal must leave as it was."""
    alloc, cache = engine.allocator, engine.cache
    rows = {i: (engine.tokens(i), list(engine.sequence(i).pages)) for i in engine.ids}
    pages = sorted({p for _, row in rows.values() for p in row})
    contents = [buf[pages].clone() for buf in (*cache.k.values(), *cache.v.values())]
    queues = [[(r.request_id, r.computed, list(r.output)) for r in q]
              for q in (sched.waiting, sched.running)]
    return rows, alloc.free_pages(), pages, contents, queues, sorted(map(repr, engine.sequences.request_ids(sched._token)))


def same(before, after) -> bool:
    (rows, free, pages, contents, queues, ids), (rows2, free2, pages2, contents2, queues2, ids2) = \
        before, after
    return (rows, free, pages, queues, ids) == (rows2, free2, pages2, queues2, ids2) and all(
        torch.equal(a, b) for a, b in zip(contents, contents2))


def consistent(engine) -> None:
    alloc = engine.allocator
    owned = [p for i in engine.ids for p in engine.sequence(i).pages]
    assert sorted(owned + alloc.free_pages()) == list(range(alloc.num_pages))
    for i in engine.ids:
        assert len(engine.tokens(i)) <= len(engine.sequence(i).pages) * PAGE


def run(engine, sched, llm, o):
    kind = o[0]
    if kind == "prefill":
        return engine.prefill(o[1], ids=o[2])
    if kind == "decode":
        return engine.decode(o[1], ids=o[2])
    if kind == "step":
        return engine.step(o[1], logits=o[2])
    if kind == "release":
        return engine.release(o[1])
    if kind == "add":
        keys = set(SamplingParams.__dataclass_fields__)
        params = SamplingParams(**{k: v for k, v in o[2].items() if k in keys or k == "bogus"})
        return sched.add(o[1], params, request_id=o[3])
    if kind == "sched_step":
        return sched.step()
    if kind == "abort":
        return sched.abort()
    outs = llm.generate(o[1], **o[2])
    assert all(0 <= t < VOCAB for out in outs for t in out.token_ids)
    return outs


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=10))
def test_every_call_runs_or_refuses_leaving_state_unchanged(llm, ops):
    engine = llm.engine
    engine.release()
    sched = Scheduler(engine, max_num_batched_tokens=6, max_num_seqs=3)
    for o in ops:
        before = snapshot(engine, sched)
        try:
            with torch.no_grad():
                run(engine, sched, llm, o)
        except AttnkitError:
            assert same(before, snapshot(engine, sched)), o
        consistent(engine)
    sched.abort()
    engine.release()


def test_release_is_all_or_nothing(llm):
    """release([live, unknown]) freed the live sequence before raising."""
    engine = llm.engine
    engine.release()
    engine.prefill([[1, 2, 3]], ids=["live"])
    free = engine.allocator.num_free
    for bad in (["live", "unknown"], ["live", "live"], ["live", [1]]):
        with pytest.raises(AttnkitError) as err:
            engine.release(bad)
        assert err.value.code == "AK483"
        assert engine.ids == ["live"] and engine.allocator.num_free == free
    engine.release(["live"])
    assert engine.ids == [] and engine.allocator.num_free == engine.allocator.num_pages


@pytest.mark.parametrize("top_k", [2 ** 63, 2 ** 70, VOCAB, VOCAB + 1])
def test_top_k_past_the_vocabulary_keeps_every_token(llm, top_k):
    """top_k >= 2**63 passed validation and overflowed building the sampler's tensor."""
    kw = dict(max_new_tokens=4, temperature=0.7, seed=3, ignore_eos=True)
    got = llm.generate([[1, 5, 9]], top_k=top_k, **kw)[0].token_ids
    assert got == llm.generate([[1, 5, 9]], top_k=0, **kw)[0].token_ids


@pytest.mark.parametrize("call", [
    lambda llm: llm.generate([[1, 2]], max_tokens=4),          # LLM()'s keyword, not generate's
    lambda llm: llm.generate([[1, 2]], 4),
    lambda llm: llm.generate(),
    lambda llm: SamplingParams(temprature=0.5),
    lambda llm: Scheduler(llm.engine, max_batched_tokens=4),
    lambda llm: llm.engine.prefill([[1]], idz=["a"]),
])
def test_bad_signatures_are_coded(llm, call):
    """Unknown keywords and missing or extra arguments were Python TypeErrors."""
    with pytest.raises(AttnkitError) as err:
        call(llm)
    assert err.value.code in ("AK483", "AK486", "AK487")
    if "max_tokens" in str(err.value.actual):
        assert "did you mean max_new_tokens" in err.value.message


@pytest.mark.parametrize("rid", [[1], ([1],), {"a": 1}])
def test_unhashable_ids_are_coded(llm, rid):
    engine = llm.engine
    engine.release()
    for call in (lambda: engine.prefill([[1]], ids=[rid]), lambda: engine.decode([1], ids=[rid]),
                 lambda: engine.tokens(rid), lambda: engine.release([rid]),
                 lambda: Scheduler(engine).add([1], request_id=rid)):
        with pytest.raises(AttnkitError) as err:
            call()
        assert err.value.code in ("AK483", "AK486")
    assert engine.ids == []


@pytest.mark.parametrize("device", ["meta", "mps", "cuda", "xpu", "bogus", "cuda:-1"])
def test_devices_torch_names_but_cannot_use(tiny_model, device):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    from attnkit.runner import Engine

    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(tiny_model("llama")[0], device=device, backend="torch_native",
                               page_size=4)
    assert err.value.code == "AK483" and err.value.field == "device"


@pytest.mark.parametrize("max_tokens,page_size,words", [
    (2 ** 40, 1, "block tables"),            # more pages than int32 page ids
    (2 ** 45, 2 ** 20, "GiB"),               # more bytes than this machine has
])
def test_kv_cache_sizes_are_checked_before_allocating(tiny_model, max_tokens, page_size, words):
    """A huge max_tokens was a raw RuntimeError (or MemoryError) from the allocation."""
    from attnkit.runner import Engine

    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(tiny_model("llama")[0], backend="torch_native",
                               page_size=page_size, max_tokens=max_tokens)
    assert err.value.code == "AK483" and err.value.field == "max_tokens"
    assert words in err.value.message and math.isfinite(len(err.value.message))
