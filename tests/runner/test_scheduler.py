"""The scheduler: continuous batching, chunked prefill and preemption give transformers'
greedy tokens; budgets and page limits hold in every step; no page leaks."""
import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.runner import Engine, SamplingParams, Scheduler
from test_runner_generate import hf_greedy

PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22], [4, 6], [3, 3, 3, 3, 3, 9, 17], [11, 12, 13, 14, 15]]
NEW = 10


@pytest.fixture(scope="module")
def expected(tiny_model):
    _, hf = tiny_model("llama")
    return [hf_greedy(hf, p, NEW) for p in PROMPTS]


def engine(tiny_model, family="llama", **kw):
    path, _ = tiny_model(family)
    return Engine.from_pretrained(path, backend=kw.pop("backend", "torch_native"),
                                  page_size=kw.pop("page_size", 4), **kw)


def greedy(n=NEW):
    return SamplingParams(max_new_tokens=n)


class Watch:
    """Record every step's plan and check the budget and page invariants as it is built."""

    def __init__(self, sched: Scheduler):
        self.sched, self.plans, self.pressured = sched, [], 0
        inner = sched.schedule

        def schedule():
            preempted = sched.stats.preemptions
            plan = inner()
            if sched.stats.preemptions > preempted:     # memory pressure: nothing (re)admitted
                assert all(r.computed for r in plan)
                self.pressured += 1
            alloc, ps = sched.engine.allocator, sched.page_size
            need = sum(max(0, -(-(r.computed + n) // ps) - sched._held(r)) for r, n in plan.items())
            assert sum(plan.values()) <= sched.budget and need <= alloc.num_free
            assert len(sched.running) <= sched.max_num_seqs
            self.plans.append({r.request_id: (n, r.decoding) for r, n in plan.items()})
            return plan

        sched.schedule = schedule


def drain(sched):
    done = {}
    while sched.has_unfinished():
        for r in sched.step():
            done[r.request_id] = r
    return done


def test_staggered_arrivals_mixed_steps_equal_transformers(tiny_model, expected):
    eng = engine(tiny_model)
    sched = Scheduler(eng, max_num_batched_tokens=64)
    watch = Watch(sched)
    done = {}
    for i, prompt in enumerate(PROMPTS):      # a new request every second step
        sched.add(prompt, greedy(), request_id=i)
        for _ in range(2):
            done.update({r.request_id: r for r in sched.step()})
    done.update(drain(sched))
    assert [done[i].output for i in range(len(PROMPTS))] == expected
    assert all(done[i].finish_reason == "length" for i in done)
    mixed = [p for p in watch.plans if any(d for _, d in p.values()) and not all(d for _, d in p.values())]
    assert mixed, "a later arrival should be prefilled while earlier ones decode"
    assert eng.ids == [] and eng.allocator.num_free == eng.allocator.num_pages


def test_chunked_prefill_equals_transformers(tiny_model, expected):
    eng = engine(tiny_model)
    sched = Scheduler(eng, max_num_batched_tokens=3)     # shorter than most prompts
    watch = Watch(sched)
    reqs = [sched.add(p, greedy()) for p in PROMPTS]
    drain(sched)
    assert [r.output for r in reqs] == expected
    first = watch.plans[0]
    assert first == {0: (3, False)}                      # only a chunk of the oldest prompt
    assert eng.allocator.num_free == eng.allocator.num_pages


def test_decodes_first_then_prompt_chunks(tiny_model):
    sched = Scheduler(engine(tiny_model), max_num_batched_tokens=4)
    watch = Watch(sched)
    sched.add(PROMPTS[1], greedy(3), request_id="a")          # 2 tokens: prefilled in step 1
    sched.step()
    sched.add(PROMPTS[0], greedy(3), request_id="b")          # 9 tokens: chunks of 3
    sched.step()
    assert watch.plans[1] == {"a": (1, True), "b": (3, False)}
    drain(sched)


@pytest.mark.parametrize("max_tokens", [20, 24])
def test_page_exhaustion_preempts_and_recomputes(tiny_model, expected, max_tokens):
    eng = engine(tiny_model, max_tokens=max_tokens)           # 5 or 6 pages of 4 tokens
    sched = Scheduler(eng, max_num_batched_tokens=8)
    watch = Watch(sched)
    reqs = [sched.add(p, greedy()) for p in PROMPTS]
    drain(sched)
    assert [r.output for r in reqs] == expected
    assert sched.stats.preemptions > 0 and sum(r.stats.num_preemptions for r in reqs) > 0
    assert any(r.stats.num_computed_tokens > r.stats.num_prompt_tokens + NEW - 1 for r in reqs)
    assert eng.ids == [] and eng.allocator.num_free == eng.allocator.num_pages
    assert len(watch.plans) == sched.stats.steps and watch.pressured


def test_max_num_seqs_limits_running(tiny_model, expected):
    sched = Scheduler(engine(tiny_model), max_num_seqs=2)
    watch = Watch(sched)
    reqs = [sched.add(p, greedy()) for p in PROMPTS]
    drain(sched)
    assert [r.output for r in reqs] == expected
    assert max(len(p) for p in watch.plans) == 2 and sched.stats.max_running == 2


def test_dual_chunk_chunked_prefill_equals_one_go(tiny_model, tmp_path):
    """original_max_position_embeddings 8: the length scale grows with the prompt, so prompt
    chunks must use the whole prompt's length (as one go does)."""
    import json
    import shutil

    path, _ = tiny_model("qwen2_dca")
    cfg = json.loads((path / "config.json").read_text())
    cfg["dual_chunk_attention_config"]["original_max_position_embeddings"] = 8
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shutil.copy(path / "model.safetensors", tmp_path / "model.safetensors")
    prompt = list(range(3, 30))                               # past chunk_size 16
    build = lambda: Engine.from_pretrained(tmp_path, backend="dual_chunk", page_size=4)
    one_go = build().generate([prompt], 6)
    sched = Scheduler(build(), max_num_batched_tokens=5)
    req = sched.add(prompt, greedy(6))
    drain(sched)
    assert [req.output] == one_go


def test_requests_checked_when_added(tiny_model):
    eng = engine(tiny_model, max_tokens=16)
    sched = Scheduler(eng)
    with pytest.raises(AttnkitError) as e:                    # 9 + 10 - 1 > 16 tokens of KV
        sched.add(PROMPTS[0], greedy())
    assert e.value.code == "AK485"
    sched.add(PROMPTS[0], greedy(8), request_id="x")          # 9 + 8 - 1 = 16 fits exactly
    with pytest.raises(AttnkitError) as e:
        sched.add(PROMPTS[1], greedy(), request_id="x")
    assert e.value.code == "AK486"
    for bad in ([], [128]):
        with pytest.raises(AttnkitError) as e:
            sched.add(bad, greedy())
        assert e.value.code == "AK483"
    for kw in ({"max_num_batched_tokens": 0}, {"max_num_seqs": 0}, {"max_num_seqs": None}):
        with pytest.raises(AttnkitError) as e:
            Scheduler(eng, **kw)
        assert e.value.code == "AK486"
    assert sched.add(PROMPTS[1], greedy(0)).finish_reason == "length"
    drain(sched)
    assert eng.allocator.num_free == eng.allocator.num_pages


def mid_run(tiny_model):
    """(engine, a scheduler two chunked steps into every prompt)."""
    eng = engine(tiny_model)
    sched = Scheduler(eng, max_num_batched_tokens=4)
    for p in PROMPTS:
        sched.add(p, greedy())
    sched.step()
    sched.step()
    return eng, sched


def test_failed_step_releases_every_sequence(tiny_model):
    eng, sched = mid_run(tiny_model)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    eng.step = broken
    with pytest.raises(RuntimeError):
        list(sched.run())
    assert eng.ids == [] and eng.allocator.num_free == eng.allocator.num_pages
    assert not sched.has_unfinished()


@pytest.mark.gpu
def test_cuda_triton_scheduler_matches_cpu(tmp_path):
    import transformers

    config = transformers.LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=256,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, initializer_range=0.2)
    torch.manual_seed(2)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    cpu = Engine.from_pretrained(tmp_path, backend="torch_native", page_size=16)
    want = cpu.generate(PROMPTS, max_new_tokens=NEW)
    gpu = Engine.from_pretrained(tmp_path, backend="triton", page_size=16, device="cuda",
                                 max_tokens=48)
    sched = Scheduler(gpu, max_num_batched_tokens=6)
    reqs = [sched.add(p, greedy()) for p in PROMPTS]
    drain(sched)
    assert [r.output for r in reqs] == want and sched.stats.preemptions > 0
    assert gpu.allocator.num_free == gpu.allocator.num_pages
