"""Tensor parallelism, bad input and failing ranks: a tp_size the plan rejects fails before any
process starts; a rank that dies, raises or hangs ends the run with AK482 on rank 0, not a
hang; the engine refuses further steps; a new LLM starts new ranks."""
import os
import signal
import threading
import time

import pytest

from attnkit.backends.torch_native.backend import TorchNativeBackend
from attnkit.errors import AttnkitError
from attnkit.runner import LLM, Engine, Scheduler, SamplingParams
from attnkit.runner.engine import launch


def code_of(call):
    with pytest.raises(AttnkitError) as e:
        call()
    return e.value


@pytest.fixture
def no_new_ranks(monkeypatch):
    """Starting a rank process now fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a rank process was started")

    monkeypatch.setattr(launch.subprocess, "Popen", refuse)


def test_refused_before_any_process_starts(tiny_model, no_new_ranks, monkeypatch):
    path, hf = tiny_model("llama")                        # 4 query heads, 2 KV heads
    ds, _ = tiny_model("deepseek_v2")
    cases = [(lambda: LLM(path, device="cpu", tp_size=3), "AK305"),       # the planner's code
             (lambda: Engine.from_pretrained(ds, tp_size=3), "AK305"),
             (lambda: Engine.from_pretrained(path, tp_size=0), "AK306"),    # one parse, one code
             (lambda: LLM(path, device="cpu", tp_size=0), "AK306"),
             (lambda: Engine.from_pretrained(hf, tp_size=2), "AK483"),   # in memory: no shards
             (lambda: Engine.from_pretrained(path, tp_size=2, page_size=4,
                                             backend=TorchNativeBackend()), "AK483"),
             (lambda: LLM(path, device="cpu", tp_size=2, cuda_graph=True), "AK489"),
             (lambda: Engine.from_pretrained(path, tp_size=2, tp_timeout=0), "AK483")]
    for call, code in cases:
        assert code_of(call).code == code
    err = code_of(lambda: LLM(path, device="cpu", tp_size=3))
    assert "valid tensor-parallel sizes: 1, 2, 4" in err.message
    monkeypatch.setenv("RANK", "0")                       # as torchrun with 4 processes
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert "WORLD_SIZE=4" in code_of(lambda: LLM(path, device="cpu", tp_size=2)).message


def _long_run(llm):
    """A scheduler over ``llm``'s engine with four long requests, one step already run."""
    sched = Scheduler(llm.engine, max_num_seqs=4)
    for i in range(4):
        sched.add([1 + i, 2, 3], SamplingParams(max_new_tokens=200, stop_token_ids=()))
    sched.step()
    return sched


def _fails_fast(sched, *, within: float) -> AttnkitError:
    start = time.monotonic()
    err = code_of(lambda: [sched.step() for _ in range(10**6)])
    assert time.monotonic() - start < within
    return err


def test_a_rank_killed_mid_run_ends_it_with_ak482(tiny_model):
    path, _ = tiny_model("llama")
    llm = LLM(path, device="cpu", tp_size=2, max_tokens=1024)
    group = llm.engine.ranks
    sched = _long_run(llm)
    threading.Timer(0.05, os.kill, (group.procs[0].pid, signal.SIGKILL)).start()
    err = _fails_fast(sched, within=10)
    assert err.code == "AK482" and "rank 1 of 2 exited (code -9)" in err.message
    again = code_of(lambda: llm.generate([[1, 2]], max_new_tokens=2))
    assert again.code == "AK482" and "build a new engine" in again.message
    fresh = LLM(path, device="cpu", tp_size=2)            # new ranks, the same tokens
    assert fresh.engine.ranks is not group
    want = LLM(path, device="cpu").generate([[1, 2, 3]], max_new_tokens=4)[0].token_ids
    assert fresh.generate([[1, 2, 3]], max_new_tokens=4)[0].token_ids == want


def test_a_rank_that_raises_is_named(tiny_model):
    path, _ = tiny_model("llama")
    llm = LLM(path, device="cpu", tp_size=2)
    group = llm.engine.ranks
    with group.guard("a test message"):
        group.send("step", "no-such-engine", None)        # rank 1 fails on it and reports
    err = code_of(lambda: llm.generate([[1, 2, 3]], max_new_tokens=3))
    assert err.code == "AK482" and "rank 1 of 2 failed" in err.message
    assert "holds no engine 'no-such-engine'" in err.message


def test_a_hung_rank_times_out(tiny_model):
    """A stopped (alive, silent) rank: the step ends after tp_timeout, and the rank is stopped."""
    path, _ = tiny_model("llama")
    llm = LLM(path, device="cpu", tp_size=2, max_tokens=1024, tp_timeout=1.5)
    proc = llm.engine.ranks.procs[0]
    sched = _long_run(llm)
    os.kill(proc.pid, signal.SIGSTOP)
    err = _fails_fast(sched, within=15)
    assert err.code == "AK482" and "took more than 1.5 s (tp_timeout)" in err.message
    assert proc.wait(timeout=10) == -signal.SIGKILL
