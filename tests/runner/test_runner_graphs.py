"""The decode graph runner's bookkeeping without capture (``graph_capture=False`` runs the
captured body eagerly): buckets, padding, static-buffer refills, the sync-free expert
dispatch, and greedy tokens equal to plain eager decoding and to transformers. The capture
itself: test_runner_graphs_gpu.py."""
import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.runner import Engine, SamplingParams, Scheduler
from attnkit.runner.engine.graphs import buckets_of
from attnkit.runner.layers.context import StepContext
from runner_helpers import FailOnce, engine_state, hf_greedy, save_tiny

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason="interpreter runs; the GPU tests capture for real")
PROMPTS = [[1, 5, 9, 3, 7], [4, 6], [3, 3, 3, 9, 17, 20]]
WIDE = dict(vocab_size=128, hidden_size=128, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
            initializer_range=0.2)


@pytest.fixture(scope="module")
def llama64(tmp_path_factory):
    """head_dim 64: a size the triton backend declares (the interpreter runs it)."""
    return save_tiny(tmp_path_factory.mktemp("llama64"), "LlamaConfig", "LlamaForCausalLM",
                     WIDE, seed=3)


def triton_engine(path, **kw):
    from attnkit.backends.triton.backend import TritonBackend

    return Engine.from_pretrained(path, backend=TritonBackend(), page_size=4, **kw)


def rehearsal(path, backend, page_size=4, max_num_seqs=4):
    return Engine.from_pretrained(path, backend=backend, page_size=page_size, cuda_graph=True,
                                  graph_capture=False, max_num_seqs=max_num_seqs)


def test_buckets():
    assert buckets_of(1) == [1] and buckets_of(6) == [1, 2, 4, 6]
    assert buckets_of(64) == [1, 2, 4, 8, 16, 32, 64] and buckets_of(100)[-2:] == [64, 100]


def test_graph_path_tokens_equal_eager_and_transformers(llama64):
    path, hf = llama64
    from attnkit.backends.triton.backend import TritonBackend

    graphs = rehearsal(path, TritonBackend())
    runner = graphs.graphs
    assert runner.buckets == [1, 2, 4] and len(graphs.allocator.scratch_pages) == 1
    assert graphs.cache.num_pages == graphs.allocator.num_pages + 1     # scratch set apart
    want = [hf_greedy(hf, p, 6) for p in PROMPTS]
    assert graphs.generate(PROMPTS, max_new_tokens=6) == want
    assert runner.stats["eager_decodes"] == 5 and runner.stats["replays"] == 0
    assert triton_engine(path).generate(PROMPTS, max_new_tokens=6) == want
    assert graphs.allocator.num_free == graphs.allocator.num_pages


def test_padding_refill_and_fallbacks(llama64, monkeypatch):
    """3 requests replay bucket 4 (one padded row), 1 replays bucket 1; a step past the largest
    bucket, or with a KV past the static tables, runs eagerly; logits equal eager's."""
    from attnkit.backends.triton.backend import TritonBackend

    path, _ = llama64
    graphs, eager = rehearsal(path, TritonBackend(), max_num_seqs=2), triton_engine(path)
    used = []
    original = graphs.graphs.decode
    monkeypatch.setattr(graphs.graphs, "decode",
                        lambda reqs, tokens, want: used.append(len(reqs)) or original(reqs, tokens, want=want))
    for engine in (graphs, eager):
        engine.prefill(PROMPTS)
    a, b = graphs.decode([2, 3, 4]), eager.decode([2, 3, 4])          # 3 > 2: eager
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    a, b = graphs.decode([5, 6], ids=[0, 2]), eager.decode([5, 6], ids=[0, 2])
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    a, b = graphs.decode([7], ids=[1]), eager.decode([7], ids=[1])
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    static = graphs.graphs.static
    assert used == [2, 1] and list(static.meta(1).seq_lens_cpu) == [4]       # 2 prompt + 2 decoded
    # bucket 2's row 1 still holds sequence 2 (6 + 2 tokens) from the fill before
    assert list(static.meta(2).seq_lens_cpu) == static.meta(2).seq_lens.tolist() == [4, 8]
    assert graphs.graphs.serves([]) is False


def test_scheduler_over_graphs_with_chunks_and_preemption(llama64):
    """Continuous batching (chunked prefill, preemption) over the graph path gives the same
    greedy tokens; greedy steps ask the engine for device-chosen token ids."""
    from attnkit.backends.triton.backend import TritonBackend

    path, hf = llama64
    engine = Engine.from_pretrained(path, backend=TritonBackend(), page_size=4, max_tokens=20,
                                    cuda_graph=True, graph_capture=False, max_num_seqs=4)
    sched = Scheduler(engine, max_num_batched_tokens=4, max_num_seqs=3)
    reqs = [sched.add(p, SamplingParams(max_new_tokens=6)) for p in PROMPTS]
    asked, step = [], engine.step
    engine.step = lambda batch, **kw: asked.append(kw["logits"]) or step(batch, **kw)
    list(sched.run())
    assert set(asked) == {"argmax"}                   # no logits come back for greedy steps
    assert [r.output for r in reqs] == [hf_greedy(hf, p, 6) for p in PROMPTS]
    assert sched.stats.preemptions > 0 and engine.graphs.stats["eager_decodes"] > 0
    assert engine.allocator.num_free == engine.allocator.num_pages


def test_deepseek_mla_and_experts_over_the_graph_path(tiny_model):
    """triton_mla's static step and the sync-free expert dispatch (bucket 1 gathers its two
    experts' weights, bucket 4 runs all four experts densely) give transformers' tokens."""
    from attnkit.registry import load_backend

    path, hf = tiny_model("deepseek_v2_triton")
    engine = rehearsal(path, load_backend("triton_mla"), page_size=16)
    assert engine.generate(PROMPTS, max_new_tokens=4) == [hf_greedy(hf, p, 4) for p in PROMPTS]
    assert engine.graphs.stats["eager_decodes"] == 3


def test_dual_chunk_over_the_graph_path(tiny_model):
    """dual_chunk's static step (parts recomputed on the device) and the device-side length
    scale; prompts past one chunk (cl = 12)."""
    from attnkit.backends.dual_chunk.backend import DualChunkBackend

    path, _ = tiny_model("qwen2_dca")
    long = [list(range(3, 20)), [5, 6, 7]]
    graphs = rehearsal(path, DualChunkBackend(impl="triton"), page_size=4)
    eager = Engine.from_pretrained(path, backend=DualChunkBackend(), page_size=4)
    assert graphs.generate(long, max_new_tokens=5) == eager.generate(long, max_new_tokens=5)
    assert graphs.graphs.stats["eager_decodes"] == 4


@pytest.mark.parametrize("family", ["gpt_oss", "deepseek_v3"])
@pytest.mark.parametrize("tokens", [1, 9], ids=["gather", "dense"])
def test_static_expert_dispatch_equals_the_loop(tiny_model, family, tokens):
    """Both sync-free formulations compute the loop's sum (same experts, same order)."""
    path, _ = tiny_model(family)
    engine = Engine.from_pretrained(path, backend="torch_native", page_size=16)
    moe = next(b.mlp for b in engine.model.blocks if hasattr(b.mlp, "moe"))
    x = torch.randn(tokens, engine.model.arch.hidden_size, generator=torch.Generator().manual_seed(4))
    static = StepContext(None, None, None, None, static=True)
    torch.testing.assert_close(moe(x, static), moe(x), rtol=1e-5, atol=1e-6)
    assert not torch.equal(moe(x, static), torch.zeros_like(x))


def test_graphs_refused_where_they_cannot_run(llama64):
    path, _ = llama64
    with pytest.raises(AttnkitError) as err:                     # CPU: nothing to capture
        Engine.from_pretrained(path, backend="torch_native", page_size=4, cuda_graph=True)
    assert err.value.code == "AK489"
    with pytest.raises(AttnkitError) as err:                     # torch_native: host loops
        Engine.from_pretrained(path, backend="torch_native", page_size=4, cuda_graph=True,
                               graph_capture=False)
    assert err.value.code in ("AK121", "AK489")
    from attnkit.registry import load_backend

    with pytest.raises(AttnkitError) as err:
        rehearsal(path, load_backend("sdpa"))
    assert err.value.code == "AK489"
    for bad in ({"graph_capture": None}, {"max_num_seqs": 0}):
        with pytest.raises(AttnkitError) as err:
            Engine.from_pretrained(path, backend="torch_native", page_size=4, **bad)
        assert err.value.code == "AK483"
    for bad, code in (("on", "AK489"), ("sometimes", "AK306")):   # the planner's parse: "on" is True
        with pytest.raises(AttnkitError) as err:
            Engine.from_pretrained(path, backend="torch_native", page_size=4, cuda_graph=bad)
        assert err.value.code == code
    auto = Engine.from_pretrained(path, page_size=4)             # auto on the CPU: eager
    assert auto.graphs is None and auto.plan.settings["cuda_graph"] is False


def test_decode_ahead_equals_single_steps_and_stops_where_they_would(llama64, monkeypatch):
    """Greedy decode steps run several at a time on the device (Scheduler.decode_ahead) give
    the tokens of one step at a time; a stop token part-way ends its request there, the
    others go on; every page comes back."""
    from attnkit.backends.triton.backend import TritonBackend

    path, hf = llama64
    engine = rehearsal(path, TritonBackend(), max_num_seqs=4)
    calls = []
    original = engine.decode_ahead
    monkeypatch.setattr(engine, "decode_ahead",
                        lambda seqs, steps, **kw: calls.append((len(seqs), steps)) or original(seqs, steps, **kw))

    def run(ahead, stop=()):
        sched = Scheduler(engine, max_num_batched_tokens=None, max_num_seqs=4, decode_ahead=ahead)
        reqs = [sched.add(p, SamplingParams(max_new_tokens=9, stop_token_ids=stop)) for p in PROMPTS]
        list(sched.run())
        assert engine.allocator.num_free == engine.allocator.num_pages
        # decode tokens counted are those kept (the first of each came from its prefill)
        assert sched.stats.decode_tokens == sum(len(r.output) - 1 for r in reqs)
        return [(r.output, r.finish_reason) for r in reqs]

    single = run(1)
    assert calls == [] and [o for o, _ in single] == [hf_greedy(hf, p, 9) for p in PROMPTS]
    assert run(4) == single and calls == [(3, 4), (3, 4)]        # 1 from prefill + 4 + 4
    calls.clear()
    stop = single[1][0][3]                        # request 1's 4th token, mid-way through a call
    stopped = run(16, stop=(stop,))
    assert calls and all(steps == 8 for _, steps in calls)
    for (out, reason), (want, _) in zip(stopped, single):
        cut = want.index(stop) + 1 if stop in want else len(want)
        assert out == want[:cut] and reason == ("stop" if stop in want else "length")
    # calls of 2, each queued before the one before it is read: request 0's 4th token (its
    # first) stops it in the second call, after the third was queued with all three requests
    stop = single[0][0][3]
    calls.clear()
    cut = [want[:want.index(stop) + 1] if stop in want else want for want, _ in single]
    assert [out for out, _ in run(2, stop=(stop,))] == cut and cut[0] == single[0][0][:4]
    assert calls[:3] == [(3, 2)] * 3 and calls[3:] and all(n == 2 for n, _ in calls[3:])


def test_decode_ahead_without_waiting_and_after_a_call_not_read(llama64):
    """decode_ahead(wait=False) returns a call at once; after= continues it on the device
    before it is read: two calls of 3 give the tokens of one of 6 (and transformers'). Until
    read and appended, the records are refused by step and by a decode_ahead without after=;
    after= takes only the last call, over its records in its order (AK483, nothing moved)."""
    from attnkit.backends.triton.backend import TritonBackend

    path, hf = llama64
    engine, twin = (rehearsal(path, TritonBackend(), max_num_seqs=4) for _ in range(2))
    seqs, twins = _decoding(engine, PROMPTS), _decoding(twin, PROMPTS)
    first = engine.decode_ahead(seqs, 3, wait=False)
    state = engine_state(engine)
    refused = [lambda: engine.step({seqs[0].seq_id: [1]}, logits="argmax"),
               lambda: engine.decode_ahead(seqs, 3),
               lambda: engine.decode_ahead(seqs[::-1], 3, after=first, wait=False),
               lambda: engine.decode_ahead(seqs[:2], 3, after=first, wait=False),
               lambda: engine.decode_ahead(seqs, 3, after="call", wait=False),
               lambda: engine.decode_ahead(seqs, 3, wait="no")]
    for call in refused:
        with pytest.raises(AttnkitError) as err:
            call()
        assert err.value.code == "AK483" and engine_state(engine) == state
    second = engine.decode_ahead(seqs, 3, wait=False, after=first)
    with pytest.raises(AttnkitError) as err:          # first is no longer the last call
        engine.decode_ahead(seqs, 2, wait=False, after=first)
    assert err.value.code == "AK483"
    got, want = [a + b for a, b in zip(first.rows(), second.rows())], twin.decode_ahead(twins, 6)
    assert got == want == [hf_greedy(hf, p, 7)[1:] for p in PROMPTS]
    for seq, tokens, other, more in zip(seqs, got, twins, want):
        seq.output.extend(tokens)
        other.output.extend(more)
    # the same records; the pages are as many (handed out in another order: two reserves)
    view = lambda e: [(s.tokens, s.computed, len(s.pages)) for s in map(e.sequence, e.ids)]  # noqa: E731
    assert view(engine) == view(twin) and engine.allocator.num_free == twin.allocator.num_free
    assert engine.decode_ahead(seqs, 2) == twin.decode_ahead(twins, 2)     # decoding again


def test_scheduler_whose_queued_call_fails_keeps_the_tokens_before_it(llama64):
    """Scheduler.step reads a call back only after queueing the next one; when queueing it
    fails (its first step's attention raises), the tokens of the call that ran are kept, the
    failed one gives its pages back, and stepping on gives transformers' tokens."""
    from attnkit.backends.triton.backend import TritonBackend

    path, hf = llama64
    engine = rehearsal(path, TritonBackend(), max_num_seqs=4)
    sched = Scheduler(engine, max_num_batched_tokens=None, max_num_seqs=4, decode_ahead=2)
    reqs = [sched.add(p, SamplingParams(max_new_tokens=9)) for p in PROMPTS]
    sched.step()                                       # the prompts, a first token each
    fail = FailOnce(engine.backend, nth=5)             # the queued call's step 1, layer 0
    with pytest.raises(RuntimeError):
        sched.step()
    assert fail.calls == 5 and [len(r.output) for r in reqs] == [3, 3, 3]
    assert all(r.computed == r.num_tokens - 1 for r in reqs)
    assert [len(r.pages) for r in reqs] == [engine.allocator.pages_for(r.computed) for r in reqs]
    assert engine.allocator.num_free == engine.allocator.num_pages - sum(len(r.pages) for r in reqs)
    fail.disarm()
    while sched.has_unfinished():
        sched.step()
    assert [r.output for r in reqs] == [hf_greedy(hf, p, 9) for p in PROMPTS]
    assert engine.allocator.num_free == engine.allocator.num_pages


def test_decode_ahead_refuses_what_it_cannot_run(llama64):
    from attnkit.backends.triton.backend import TritonBackend

    path, _ = llama64
    engine = rehearsal(path, TritonBackend(), max_num_seqs=2)
    engine.prefill(PROMPTS[:1])
    seq = engine.sequence(engine.ids[0])
    before = (seq.computed, list(seq.pages), engine.allocator.num_free)
    with pytest.raises(AttnkitError) as err:                      # not decoding: nothing pending
        engine.decode_ahead([seq], 4)
    assert err.value.code == "AK483"
    assert (seq.computed, list(seq.pages), engine.allocator.num_free) == before
    with pytest.raises(AttnkitError) as err:
        Scheduler(engine, decode_ahead=0)
    assert err.value.code == "AK486"


def test_decode_ahead_checks_its_arguments_before_it_reserves_pages(llama64):
    """Junk steps, junk or repeated records: AK483 with every record and the ledger as they
    were (not a raw TypeError, not a page taken before the refusal); one step ahead is each
    sequence's list of one token, transformers' next one."""
    from attnkit.backends.triton.backend import TritonBackend

    path, hf = llama64
    engine = rehearsal(path, TritonBackend(), max_num_seqs=2)
    logits = engine.prefill(PROMPTS[:2])
    seqs = [engine.sequence(i) for i in engine.ids]
    for seq, rows in zip(seqs, logits):
        seq.output.append(int(rows[-1].argmax()))
    state = lambda: ([(s.computed, list(s.pages)) for s in seqs], engine.allocator.num_free)
    before = state()
    for args in ((seqs, "4"), (seqs, 2.0), (seqs, True), ([seqs[0], seqs[0]], 4), ([1], 2),
                 (None, 2), (seqs,)):
        with pytest.raises(AttnkitError) as err:
            engine.decode_ahead(*args)
        assert err.value.code == "AK483", args
        assert state() == before, args
    assert engine.decode_ahead(seqs, 1) == [hf_greedy(hf, p, 2)[1:] for p in PROMPTS[:2]]


def test_decode_ahead_takes_fewer_steps_where_pages_or_tables_end(llama64, monkeypatch):
    """Near the end of the cache (or of the static tables) a call runs the steps that fit, not
    one step at a time; the tokens stay those of single steps."""
    from attnkit.backends.triton.backend import TritonBackend

    path, hf = llama64
    # 3 prompts of 2-6 tokens + 12 new each, pages of 4: 32 tokens of room leaves no page for
    # 16 steps ahead of every request, but enough for fewer
    engine = Engine.from_pretrained(path, backend=TritonBackend(), page_size=4, max_tokens=44,
                                    cuda_graph=True, graph_capture=False, max_num_seqs=4)
    calls = []
    original = engine.decode_ahead
    monkeypatch.setattr(engine, "decode_ahead",
                        lambda seqs, steps, **kw: calls.append(steps) or original(seqs, steps, **kw))
    sched = Scheduler(engine, max_num_batched_tokens=None, max_num_seqs=3)
    reqs = [sched.add(p, SamplingParams(max_new_tokens=12)) for p in PROMPTS]
    list(sched.run())
    assert [r.output for r in reqs] == [hf_greedy(hf, p, 12) for p in PROMPTS]
    assert calls and max(calls) < 11 and all(k >= 2 for k in calls)
    assert engine.allocator.num_free == engine.allocator.num_pages


def _decoding(engine, prompts):
    """Prefill ``prompts`` and append each one's greedy next token: every record decoding."""
    logits = engine.prefill(prompts)
    seqs = [engine.sequence(i) for i in engine.ids]
    for seq, rows in zip(seqs, logits):
        seq.output.append(int(rows[-1].argmax()))
    return seqs


@pytest.mark.parametrize("step,layer", [(0, 0), (2, 1), (5, 0)])
@pytest.mark.parametrize("error", [RuntimeError("kernel"), AttnkitError("AK458", "kernel")],
                         ids=["raw", "coded"])
def test_failed_decode_ahead_gives_back_every_page(llama64, step, layer, error):
    """Attention that raises in step ``step`` of a 6-step call (after earlier steps wrote KV
    into the pages reserved for all six): the backend's own error, and the ledger (its free
    list in order) and every record as before the call; the same call then gives what an
    engine that never failed gives (its tokens and pages; transformers' tokens)."""
    from attnkit.backends.triton.backend import TritonBackend

    path, hf = llama64
    engine, twin = (rehearsal(path, TritonBackend(), max_num_seqs=4) for _ in range(2))
    seqs, twins = _decoding(engine, PROMPTS), _decoding(twin, PROMPTS)
    before = engine_state(engine)
    fail = FailOnce(engine.backend, nth=2 * step + layer + 1, error=error)   # 2 layers a step
    with pytest.raises(type(error)) as raised:
        engine.decode_ahead(seqs, 6)
    assert raised.value is error and fail.calls == 2 * step + layer + 1
    assert engine_state(engine) == before
    fail.disarm()
    assert engine.decode_ahead(seqs, 6) == twin.decode_ahead(twins, 6) \
        == [hf_greedy(hf, p, 7)[1:] for p in PROMPTS]
    assert engine_state(engine) == engine_state(twin)


def test_scheduler_step_that_fails_decoding_ahead_changes_nothing(llama64):
    """Scheduler.step over a failing decode-ahead call: the queues, every request (tokens,
    pages, stats) and the run statistics as before; stepping on finishes every request with
    transformers' tokens and every page back."""
    from attnkit.backends.triton.backend import TritonBackend

    path, hf = llama64
    engine = rehearsal(path, TritonBackend(), max_num_seqs=4)
    sched = Scheduler(engine, max_num_batched_tokens=None, max_num_seqs=4, decode_ahead=8)
    reqs = [sched.add(p, SamplingParams(max_new_tokens=9)) for p in PROMPTS]
    sched.step()                                       # the prompts, a first token each
    state = lambda: (engine_state(engine), [r.seq_id for r in sched.running], sched.waiting,
                     [(r.output, r.stats.num_computed_tokens, r.stats.num_output_tokens)
                      for r in reqs], sched.stats.decode_tokens, sched.stats.steps)
    before = state()
    fail = FailOnce(engine.backend, nth=5)             # step 2 of 8, layer 0
    with pytest.raises(RuntimeError):
        sched.step()
    assert fail.calls == 5 and state() == before
    fail.disarm()
    while sched.has_unfinished():
        sched.step()
    assert [r.output for r in reqs] == [hf_greedy(hf, p, 9) for p in PROMPTS]
    assert engine.allocator.num_free == engine.allocator.num_pages


def _switching_table():
    """A decode table whose first variant is split_write up to 64 keys and split beyond (rows
    at contexts 16 and 256: the nearest by |log2| switches between 64 and 128)."""
    from attnkit.registry.kernels import KernelRate, KernelRow, KernelTable

    row = lambda ctx, name: KernelRow(1, 1, ctx, (KernelRate(name, 1.0, "GB/s"),))  # noqa: E731
    return KernelTable("decode", rows=(row(16, "split_write"), row(256, "split")))


def test_a_table_that_switches_by_context_gets_a_graph_per_context_tier(llama64, monkeypatch):
    """Issue 24 (bench_runner B=1 at 0.93x the previous default, H200, 2026-12-02): the graphs
    ran the variant the plan picks for the longest KV they hold (stream at ~12k keys) at every
    context. Each bucket now has a static step per tier of its table; a step replays the
    smallest that holds its KV, and runs that tier's variant; tokens stay transformers'."""
    from attnkit.backends.triton.backend import TritonBackend

    path, hf = llama64
    engine = rehearsal(path, TritonBackend(kernels={"decode": _switching_table()}), max_num_seqs=2)
    runner = engine.graphs
    top = runner.static.max_seq_len
    assert top > 128 and runner.reaches == {1: (64, top), 2: (64, top)}
    used = []
    original = runner._run
    monkeypatch.setattr(runner, "_run", lambda b: used.append((b.size, b.reach)) or original(b))
    prompts = [[5, 9, 3], list(range(3, 100))]
    want = [hf_greedy(hf, p, 4) for p in prompts]
    assert [engine.generate([p], max_new_tokens=4)[0] for p in prompts] == want
    assert used == [(1, 64)] * 3 + [(1, top)] * 3
    ran = {reach: set(runner._bucket[(1, reach)].step.prepared.ran.values()) for reach in (64, top)}
    assert ran == {64: {"split_write"}, top: {"split"}}


def test_a_backend_with_malformed_reaches_is_refused_coded(llama64, monkeypatch):
    from attnkit.backends.triton.backend import TritonBackend

    path, _ = llama64
    for bad in ((), (64,), (64, 32, "top")):
        backend = TritonBackend()
        monkeypatch.setattr(backend, "static_reaches", lambda batch, top, bad=bad: bad)
        with pytest.raises(AttnkitError) as err:
            rehearsal(path, backend)
        assert err.value.code == "AK489" and "static_reaches" in err.value.message


def test_no_tier_is_shorter_than_the_padded_rows_of_its_bucket(llama64):
    """A padded row j decodes position j % page_size of a scratch page: a bucket of 32 rows at
    32-key pages holds KVs up to 32 keys, so a tier sized for fewer merges into the next
    (review of 2026-12-02: a table switching at ~22 keys refused every graph, AK489)."""
    from attnkit.backends.triton.backend import TritonBackend
    from attnkit.registry.kernels import KernelRate, KernelRow, KernelTable

    row = lambda ctx, name: KernelRow(1, 1, ctx, (KernelRate(name, 1.0, "GB/s"),))  # noqa: E731
    table = KernelTable("decode", rows=(row(8, "split_write"), row(64, "split")))
    path, hf = llama64
    engine = rehearsal(path, TritonBackend(kernels={"decode": table}), page_size=32, max_num_seqs=32)
    reaches = engine.graphs.reaches
    assert reaches[1][0] < 32 and reaches[32][0] == 32 and len(reaches[32]) == 2
    assert all(r[0] >= min(b, 32) for b, r in reaches.items())
    assert engine.generate([PROMPTS[0]], max_new_tokens=3) == [hf_greedy(hf, PROMPTS[0], 3)]


def test_a_request_that_arrives_or_an_abort_while_a_call_is_queued(llama64):
    """A request added while a decode-ahead call is queued (not read) waits for that call
    only: the next step reads it, queues nothing behind it and admits the newcomer; every
    request gets transformers' tokens. abort() with a call queued frees every page, and the
    scheduler runs new requests after it."""
    from attnkit.backends.triton.backend import TritonBackend

    path, hf = llama64
    engine = rehearsal(path, TritonBackend(), max_num_seqs=4)
    sched = Scheduler(engine, max_num_batched_tokens=None, max_num_seqs=4, decode_ahead=2)
    first = [sched.add(p, SamplingParams(max_new_tokens=9)) for p in PROMPTS[:2]]
    sched.step()                                       # the prompts
    sched.step()                                       # a call read, the next one queued
    assert sched._flight is not None
    late = sched.add(PROMPTS[2], SamplingParams(max_new_tokens=9))
    sched.step()                                       # reads the queued call, queues nothing
    assert sched._flight is None and late in sched.waiting
    while sched.has_unfinished():
        sched.step()
    assert [r.output for r in first + [late]] == [hf_greedy(hf, p, 9) for p in PROMPTS]
    again = [sched.add(p, SamplingParams(max_new_tokens=9)) for p in PROMPTS[:2]]
    sched.step()
    sched.step()
    assert sched._flight is not None
    sched.abort()
    assert engine.allocator.num_free == engine.allocator.num_pages and not engine.ids
    assert all(r.finish_reason is None for r in again)
    after = sched.add(PROMPTS[0], SamplingParams(max_new_tokens=9))
    list(sched.run())
    assert after.output == hf_greedy(hf, PROMPTS[0], 9)
    assert engine.allocator.num_free == engine.allocator.num_pages
