"""The scheduler's requests: each finished one is returned, ids never collide, and the
sequences it runs are its own (issue 30's scheduler findings)."""
import gc

import pytest

from attnkit.errors import AttnkitError
from attnkit.runner import SamplingParams, Scheduler
from test_scheduler import PROMPTS, engine, greedy, mid_run


def test_run_yields_a_request_with_no_new_tokens(tiny_model):
    eng = engine(tiny_model)
    sched = Scheduler(eng)
    empty = sched.add(PROMPTS[0], SamplingParams(max_new_tokens=0), request_id="none")
    more = sched.add(PROMPTS[1], greedy(3), request_id="three")
    done = list(sched.run())
    assert sorted(r.request_id for r in done) == ["none", "three"]
    assert empty.output == [] and empty.finish_reason == "length" and len(more.output) == 3
    only = Scheduler(eng)
    alone = only.add(PROMPTS[0], SamplingParams(max_new_tokens=0))
    assert list(only.run()) == [alone]                       # yielded though nothing ran
    assert eng.allocator.num_free == eng.allocator.num_pages


def test_auto_ids_skip_the_callers_ids(tiny_model):
    sched = Scheduler(engine(tiny_model))
    sched.add(PROMPTS[0], greedy(2), request_id=1)           # a caller's id first
    auto = [sched.add(p, greedy(2)) for p in PROMPTS[1:3]]   # arrival numbers 1, 2: 1 is taken
    ids = [r.request_id for r in auto]
    assert 1 not in ids and len(set(ids)) == 2
    assert sorted(r.request_id for r in sched.run()) == sorted([1, *ids])


def test_a_dropped_scheduler_gives_its_pages_back(tiny_model):
    eng, sched = mid_run(tiny_model)
    assert eng.ids and eng.allocator.num_free < eng.allocator.num_pages
    del sched
    gc.collect()
    assert eng.ids == [] and eng.allocator.num_free == eng.allocator.num_pages
    eng.prefill([[1, 2, 3]])                                  # the engine serves on


def test_releasing_a_running_request_behind_the_schedulers_back_is_refused(tiny_model):
    eng = engine(tiny_model)
    sched = Scheduler(eng)
    req = sched.add(PROMPTS[0], greedy(4))
    alone = Scheduler(engine(tiny_model))
    expected = alone.add(PROMPTS[0], greedy(4))
    list(alone.run())
    sched.step()                                              # prefill: req runs now
    for call in (lambda: eng.release([req.seq_id]), lambda: eng.release()):
        with pytest.raises(AttnkitError) as err:
            call()
        assert err.value.code == "AK483" and "Scheduler" in err.value.message
    list(sched.run())
    assert req.output == expected.output                      # untouched by the refused calls
    eng.prefill([[5, 6]], ids=["mine"])
    eng.release(["mine"])                                     # the caller's own: released
    assert eng.allocator.num_free == eng.allocator.num_pages


def test_one_sequence_registry_the_engines(tiny_model):
    """The scheduler keeps no table of its own: its requests' ids are held by the engine's
    registry (sequence.SequenceRegistry) beside the live sequences, one namespace per scheduler,
    freed as requests finish, and forgotten with a scheduler dropped mid-run."""
    eng = engine(tiny_model)
    a, b = Scheduler(eng), Scheduler(eng)
    assert not any(isinstance(v, dict) for v in vars(a).values())
    ra, rb = a.add(PROMPTS[0], greedy(2), request_id="x"), b.add(PROMPTS[1], greedy(2), request_id="x")
    assert eng.sequences.request_ids(a._token) == ["x"] == eng.sequences.request_ids(b._token)
    with pytest.raises(AttnkitError) as err:
        a.add(PROMPTS[2], greedy(2), request_id="x")
    assert err.value.code == "AK486"
    a.step()
    assert eng.sequences.live[ra.seq_id] is ra and rb.seq_id not in eng.sequences.live
    assert [r.request_id for r in a.run()] == ["x"] and eng.sequences.request_ids(a._token) == []
    token = b._token
    del b
    gc.collect()
    assert eng.sequences.request_ids(token) == []
