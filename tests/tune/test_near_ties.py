"""Near-ties (tune/run.settle): the (backend, variant) pairs of a bucket within NEAR of its
fastest are timed again in interleaved rounds, each one's time the median of its rounds and its
first timing; the others keep theirs. On the CPU (wall clock) with the real backends."""
import json

import pytest

from attnkit.errors import AttnkitError
from attnkit.planning.profile import Entry
from attnkit.tune import grid
from attnkit.tune import run as tune_run
from attnkit.tune.case import make_case
from attnkit.tune.run import NEAR, ROUNDS, near_ties, settle, tune
from attnkit.tune.timing import interleaved


def _entry(backend, ms, *, graph=None, status="ok", variant=None):
    b = grid.buckets(grid.CPU_QUICK)[0]
    return Entry(backend=backend, bucket=b, status=status, work=1e9, graph_ms=graph, eager_ms=ms,
                 note="wall clock", variant=variant)


def test_interleaved_times_every_call_once_a_round_starting_one_place_further_each_round():
    order = []
    calls = [lambda i=i: order.append(i) for i in range(3)]
    rounds = interleaved(calls, "cpu", rounds=4)
    assert [len(r) for r in rounds] == [4, 4, 4]
    assert order == [0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2]


def test_near_ties_are_those_within_near_of_the_fastest_by_the_rankings_method():
    fast, tie, far = _entry("a", 1.0), _entry("b", 1.0 / (1 - NEAR) * 0.999), _entry("c", 1.0 / (1 - NEAR) * 1.01)
    wrong = _entry("d", None, status="wrong")
    assert near_ties([fast, tie, far, wrong]) == {"eager": [fast, tie]}
    # graph replays where every timed entry has one; eager where any lacks it (planning/measured.rank)
    g1, g2 = _entry("a", 5.0, graph=1.0), _entry("b", 1.0, graph=2.0)
    assert near_ties([g1, g2]) == {}
    assert list(near_ties([g1, _entry("b", 5.2)])) == ["eager"]


def test_a_backends_variants_tie_among_themselves_though_far_behind_another_backend():
    """Its kernel table orders a backend's variants: two 1 % apart are settled even when both
    are 30 % behind another backend (review of 2026-12-02)."""
    best = _entry("sdpa", 1.0, graph=1.0)
    v1 = _entry("triton", 9.0, graph=1.3, variant="split")
    v2 = _entry("triton", 9.0, graph=1.31, variant="stream")
    assert near_ties([best, v1, v2]) == {"graph": [v1, v2]}


def test_settle_times_the_near_ties_again_and_keeps_the_others():
    b = next(x for x in grid.buckets(grid.CPU_QUICK) if x.shape.kind == "mha" and x.phase == "decode")
    case = make_case(b, "cpu")
    tie_a, tie_b = _entry("sdpa", 1e6), _entry("torch_native", 1e6)        # a tie no real call reaches
    tie_a, tie_b = (Entry(**{**e.__dict__, "bucket": b}) for e in (tie_a, tie_b))
    far = Entry(**{**_entry("triton", 1e9).__dict__, "bucket": b})          # far behind: untouched
    out = settle(case, [tie_a, far, tie_b], "cpu")
    assert [e.backend for e in out] == ["sdpa", "triton", "torch_native"] and out[1] == far
    for e in (out[0], out[2]):
        # the median of the first timing (1e6 ms) and ROUNDS real ones (far below it): a real one
        assert e.eager_ms < 1e3
        assert f"near-tie of 2: median of {ROUNDS + 1} eager timings over {ROUNDS} interleaved rounds" in e.note


def test_settle_leaves_a_bucket_without_a_tie_alone():
    one, slow = _entry("sdpa", 1.0), _entry("torch_native", 3.0)
    case = make_case(one.bucket, "cpu")
    assert settle(case, [one, slow], "cpu") == [one, slow]


def test_a_tie_that_cannot_be_built_again_keeps_its_timing_and_says_so(monkeypatch):
    """One tie failing leaves the others settled (it used to drop every tie, silently)."""
    b = next(x for x in grid.buckets(grid.CPU_QUICK) if x.shape.kind == "mha" and x.phase == "decode")
    case = make_case(b, "cpu")
    ties = [Entry(**{**_entry(n, 1e6).__dict__, "bucket": b}) for n in ("sdpa", "torch_native", "triton")]
    real = tune_run.backend_for

    def build(bucket, name, variant):
        if name == "triton":
            raise RuntimeError("no kernel here")
        return real(bucket, name, variant)
    monkeypatch.setattr(tune_run, "backend_for", build)
    out = settle(case, ties, "cpu")
    assert all("near-tie of 2" in e.note and e.eager_ms < 1e3 for e in out[:2])
    assert out[2].eager_ms == 1e6 and "near-tie not settled (RuntimeError: no kernel here)" in out[2].note


def test_the_tune_settles_its_near_ties_and_records_how(tmp_path, monkeypatch):
    """Every bucket's near-ties are settled in the profile (faked: every call times alike)."""
    monkeypatch.setattr(tune_run, "measure", lambda *a, **k: {"graph_ms": None, "eager_ms": 1.0, "note": "stub"})
    path, prof = tune(device="cpu", quick=True, out=tmp_path / "p.json")
    assert prof.method["near_ties"]["within"] == NEAR and prof.method["near_ties"]["rounds"] == ROUNDS
    per_bucket = {}
    for e in prof.entries:
        per_bucket.setdefault(e.bucket, []).append(e)
    assert any(len(es) > 1 for es in per_bucket.values())
    for es in per_bucket.values():      # a bucket's one backend (DSA: torch_native) ties no one
        assert all(("near-tie of" in e.note) == (len(es) > 1) for e in es)
    assert len({e.key() for e in prof.entries}) == len(prof.entries)        # replaced, not added


def test_resuming_a_profile_timed_without_settled_near_ties_is_ak232(tmp_path, monkeypatch):
    monkeypatch.setattr(tune_run, "measure", lambda *a, **k: {"graph_ms": None, "eager_ms": 1.0, "note": "stub"})
    path, _ = tune(device="cpu", quick=True, out=tmp_path / "p.json")
    data = json.loads(path.read_text())
    del data["method"]["near_ties"]
    path.write_text(json.dumps(data))
    with pytest.raises(AttnkitError) as err:
        tune(device="cpu", quick=True, out=path)
    assert err.value.code == "AK232" and err.value.field == "method.near_ties"


def test_a_graph_replay_holds_what_its_graph_reads():
    """A replay kept for interleaved rounds must keep its call (and the step tensors the graph
    reads) alive: probe_spread replayed graphs whose steps had been freed (device-side assert)."""
    import gc
    import weakref

    from attnkit.tune.timing import _Replay

    class Graph:
        replays = 0

        def replay(self):
            Graph.replays += 1

    def step_call():
        return None
    alive = weakref.ref(step_call)
    run = _Replay(Graph(), step_call)
    del step_call
    gc.collect()
    assert alive() is not None
    run()
    assert Graph.replays == 1


def test_a_resumed_tune_settles_new_entries_with_the_ones_the_file_holds(tmp_path, monkeypatch):
    """An interrupted tune resumed: a bucket's first half (in the file) and second half (this
    run) are settled together (review of 2026-12-02: they were not)."""
    calls = []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {"graph_ms": None, "eager_ms": 1.0, "note": "stub"}
    monkeypatch.setattr(tune_run, "measure", interrupted)
    out = tmp_path / "p.json"
    with pytest.raises(KeyboardInterrupt):
        tune(device="cpu", quick=True, out=out)
    monkeypatch.setattr(tune_run, "measure", lambda *a, **k: {"graph_ms": None, "eager_ms": 1.0, "note": "stub"})
    _, prof = tune(device="cpu", quick=True, out=out)
    first = [e for e in prof.entries if e.bucket == prof.entries[0].bucket]
    notes = [e.note for e in first]
    assert len(first) == 2 and all("near-tie of 2" in n for n in notes), notes
    assert all(e.note.count("near-tie") <= 1 for e in prof.entries)      # settled anew, not twice
