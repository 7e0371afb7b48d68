"""Continuous batching over an ``Engine``: which tokens of which requests run in each step.

    sched = Scheduler(engine, max_num_batched_tokens=512, max_num_seqs=64)
    rid = sched.add([1, 5, 9], SamplingParams(max_new_tokens=8))
    for done in sched.run():          # or: while sched.has_unfinished(): sched.step()
        print(done.request_id, done.output, done.finish_reason)

Every step spends at most ``max_num_batched_tokens`` tokens, in this order:
1. running requests that are decoding, oldest first, one token each;
2. running requests part-way through their prompt, the next chunk of it;
3. waiting requests, oldest first, while fewer than ``max_num_seqs`` run: their first chunk.
One ``Engine.step`` runs the lot (EXTEND, DECODE or MIXED). A request whose whole known
sequence is cached after the step samples its next token from the step's last logits.

Pages are checked here, before the step, through the engine's page allocator (the one place
page arithmetic happens), so the engine never runs out (AK400). A decode that cannot get a
page preempts the youngest running request (its pages are freed; it waits again and later
recomputes prompt + generated tokens as a prefill); a prompt chunk shrinks to the room left.
Requests run in arrival order, so the oldest always progresses and every request that fits
the cache alone (checked on ``add``, AK485) finishes. After memory pressure (a preemption or
a shrunk chunk) no new request is admitted in that step. A request is one ``Sequence``
record (sequence.py), the same object the engine runs; a step whose ready requests are all
greedy asks the engine for token ids chosen on the device (no logits come back).

Decode ahead: when every running request is decoding greedily, none is waiting and the
engine has decode graphs that serve them, one call runs up to ``decode_ahead`` steps on the
device (``Engine.decode_ahead``: the pages of every step reserved first, each step's tokens
fed to the next, one read-back), as many as the request closest to its ``max_new_tokens``
still needs; a call that fails in any step gives those pages back and changes no request. A request that meets a stop token part-way finishes there and the tokens after
it are dropped (they were computed for nothing: at most ``decode_ahead - 1`` per request).
The tokens are the ones single steps would give until a request stops part-way: it keeps
its row until the call ends, so the others stay in the call's bucket where single steps
would move to a smaller one, with its own split-KV partition: logits equal up to rounding.
While the same requests go on decoding, the call that continues them is queued on the device
before the last one is read back (``_follow``; the next ``step`` reads it), so the GPU does
not idle while the host reads, emits and launches; a request that stops in a call loses the
steps queued behind it for it (computed for nothing).
"""
from __future__ import annotations

import bisect
import math
import time
import warnings
import weakref
from typing import Callable, Hashable, Iterator, Sequence as Seq

import torch

from attnkit.backends.batch import Request
from attnkit.errors import fail
from attnkit.runner.engine.checks import check_count, check_id, coded_args
from attnkit.runner.engine.sampling import SamplingParams, fresh_seed, sample
from attnkit.runner.engine.sequence import Sequence
from attnkit.runner.engine.stats import RequestStats, RunStats

DECODE_AHEAD = 16      # steps per call when decoding ahead (see the module docstring)
ENGINE_SURFACE = ("step", "admit", "free", "new_ids", "decode_ahead")


class Scheduler:
    """Builds each step's batch over ``engine`` and samples the results. Not thread-safe.

    max_num_batched_tokens: tokens per step (None: no limit); prompts longer than the room
    left are prefilled in chunks over several steps. max_num_seqs: requests running at once.
    decode_ahead: greedy decode steps one call may run on the device (1: every step alone)."""

    @coded_args("AK486")
    def __init__(self, engine, *, max_num_batched_tokens: int | None = 8192,
                 max_num_seqs: int = 256, decode_ahead: int = DECODE_AHEAD):
        # what the scheduler drives, checked by its surface: engine.py (below) is not imported,
        # since Engine.generate runs this loop
        if not all(callable(getattr(engine, name, None)) for name in ENGINE_SURFACE):
            fail("AK486", f"a Scheduler runs over an Engine, not {type(engine).__name__}",
                 field="engine", expected="attnkit.runner.Engine", actual=type(engine).__name__)
        check_count("max_num_batched_tokens", max_num_batched_tokens, minimum=1, allow_none=True,
                    code="AK486")
        check_count("max_num_seqs", max_num_seqs, minimum=1, code="AK486")
        check_count("decode_ahead", decode_ahead, minimum=1, code="AK486")
        self.engine = engine
        self.decode_ahead = decode_ahead
        self._flight = None             # (decode-ahead call queued, not read; when queued)
        self._read_s = 0.0              # when the last such call was read back
        self.allocator = engine.allocator
        self.budget = max_num_batched_tokens or math.inf
        self.max_num_seqs = max_num_seqs
        self.page_size = engine.page_size
        self.waiting: list[Sequence] = []      # both lists sorted by arrival (order)
        self.running: list[Sequence] = []
        self.stats = RunStats()
        self._done: list[Sequence] = []              # finished on add (max_new_tokens 0), not yet returned
        self._arrivals = 0
        self._token = object()                       # marks the records this scheduler runs
        # dropped mid-run without abort(): its running sequences' pages go back to the engine
        weakref.finalize(self, _free_owned, engine, self._token).atexit = False
        self._reserved = 0                       # pages promised to this step's plan
        self._dual_chunk = any(s.dual_chunk is not None for s in engine.cache.specs.values())

    # -- requests -----------------------------------------------------------------------
    @coded_args("AK486")
    def add(self, prompt: Seq[int], params: SamplingParams | None = None, *,
            request_id: Hashable | None = None) -> Sequence:
        """Queue a request (checked now: tokens, and that it fits the cache alone)."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            fail("AK486", f"params must be a SamplingParams, not {type(params).__name__}",
                 field="params", expected="SamplingParams | None", actual=type(params).__name__)
        rid = self._auto_id() if request_id is None else request_id
        check_id(rid, field="request_id", code="AK486")
        if self.engine.sequences.has_request(self._token, rid):
            fail("AK486", f"request id {rid!r} is already queued or running", field="request_id",
                 expected="an id not in use", actual=repr(rid))
        tokens = self.engine._check_tokens(rid, prompt)
        kv = len(tokens) + max(params.max_new_tokens - 1, 0)   # the last token's KV is never needed
        room = self.allocator.num_pages * self.page_size
        if kv > room:
            fail("AK485", f"request {rid!r} needs room for {kv} tokens of KV ({len(tokens)} prompt "
                          f"+ {params.max_new_tokens} new - 1) but the whole cache holds {room}",
                 field="max_tokens", expected=f">= {kv}", actual=room)
        limit = self.engine.model.arch.max_position_embeddings
        if limit is not None and kv > limit:
            warnings.warn(f"request {rid!r} needs {kv} positions (prompt {len(tokens)} + "
                          f"{params.max_new_tokens} new - 1), more than the model's "
                          f"max_position_embeddings {limit}; its later tokens may degrade",
                          UserWarning, stacklevel=3)      # add, coded_args
        seed = None if params.greedy else (fresh_seed() if params.seed is None else params.seed)
        # the engine issues sequence ids (never the same twice), so the records it runs and the
        # ones still waiting here never share one
        (seq_id,) = self.engine.new_ids(1)
        req = Sequence(seq_id, tokens, params, request_id=rid, order=self._arrivals, owner=self._token,
                       stats=RequestStats(seed=seed, num_prompt_tokens=len(tokens),
                                          arrival_s=time.perf_counter()),
                       generator=params.generator(seed))
        self._arrivals += 1
        self.engine.sequences.add_request(req)
        if params.max_new_tokens == 0:
            self._done.append(self._finish(req, "length"))      # the next step returns it
        else:
            self.waiting.append(req)
        return req

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def _auto_id(self) -> int:
        """The first arrival number from this request's on that no unfinished request uses as
        its id (a caller's own ids included)."""
        rid = self._arrivals
        while self.engine.sequences.has_request(self._token, rid):
            rid += 1
        return rid

    def run(self, on_step: Callable[[list[Sequence]], None] | None = None) -> Iterator[Sequence]:
        """Step until every request finishes; yields each as it finishes. On an error every
        sequence of this scheduler is released before the error propagates."""
        try:
            while self.has_unfinished() or self._done:
                done = self.step()
                if on_step is not None:
                    on_step(done)
                yield from done
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop every unfinished request and free its pages."""
        live = set(self.engine.ids)
        self.engine.free([r for r in self.running if r.seq_id in live])
        for r in self.running + self.waiting:
            self.engine.sequences.drop_request(r, self._token)
        self.running, self.waiting = [], []
        self._flight = None             # its requests are freed: its tokens are nobody's

    # -- one step -----------------------------------------------------------------------
    def step(self) -> list[Sequence]:
        """Schedule, run one engine step, sample. Returns the requests that finished (those
        that finished when added first)."""
        early, self._done = self._done, []
        if self._flight is not None:        # the steps the last step queued behind its own
            call, self._flight = self._flight, None
            return early + self._collect(*call)
        plan = self.schedule()
        if not plan:
            if self.has_unfinished():
                fail("AK400", f"no request can run: {self.allocator.num_free} of "
                              f"{self.allocator.num_pages} KV pages are free and sequences "
                              "outside this scheduler hold the rest", field="max_tokens",
                     expected="pages for the oldest request", actual=self.allocator.num_free)
            return early
        start = time.perf_counter()
        ahead = self._steps_ahead(plan)
        if ahead > 1:
            call = self.engine.decode_ahead(list(plan), ahead, wait=False)
            return early + self._collect(call, start)
        batch = {r.seq_id: r.pending(n) for r, n in plan.items()}
        lens = None
        if self._dual_chunk:            # chunks of a prompt use the whole prompt's length scale
            lens = {r.seq_id: len(r.prompt) for r, n in plan.items() if r.computed + n <= len(r.prompt)}
        decode = sum(1 for r in plan if r.decoding)
        prefill = sum(n for r, n in plan.items() if not r.decoding)
        ready = [r for r, n in plan.items() if r.computed + n == r.num_tokens]
        greedy = all(r.params.greedy for r in ready)
        # greedy: token ids chosen on the device, read back (a host sync: the step time is
        # real); else logits, and sampling ends in a host sync
        out = self.engine.step(batch, logits="argmax" if greedy else "last", prompt_lens=lens)
        for r, n in plan.items():       # the engine advanced each record's computed count
            r.stats.num_computed_tokens += n
        if greedy:
            tokens = [out[r.seq_id] for r in ready]
        else:
            tokens = sample(torch.cat([out[r.seq_id] for r in ready]),
                            [r.params for r in ready], [r.generator for r in ready])
        now = time.perf_counter()
        self.stats.add_step(prefill=prefill, decode=decode, seconds=now - start)
        return early + [r for r, t in zip(ready, tokens) if self._emit(r, t, now)]

    def _emit(self, r: Sequence, token: int, now: float) -> bool:
        """Append a sampled token to ``r``; True when that finished it."""
        r.output.append(token)
        r.stats.num_output_tokens += 1
        if r.stats.first_token_s is None:
            r.stats.first_token_s = now
        if token in r.params.stop_token_ids:
            self._finish(r, "stop")
        elif len(r.output) >= r.params.max_new_tokens:
            self._finish(r, "length")
        else:
            return False
        return True

    def _steps_ahead(self, plan: dict[Sequence, int]) -> int:
        """How many greedy decode steps this step's plan may run in one go (1: just one)."""
        graphs, engine = self.engine.graphs, self.engine
        if self.decode_ahead < 2 or graphs is None or self.waiting or engine.ranks is not None:
            return 1
        if len(plan) != len(self.running) or not all(
                n == 1 and r.decoding and r.params.greedy for r, n in plan.items()):
            return 1                    # a request this step leaves out must not wait k steps
        return self._most_steps(list(plan), 0)

    def _most_steps(self, seqs: list[Sequence], lag: int) -> int:
        """The most decode steps (a power-of-two cut of ``decode_ahead``, or 1) that ``seqs``
        may run after ``lag`` steps whose tokens are not appended yet: what the request
        closest to its ``max_new_tokens`` still needs, the free pages, the graphs' reach."""
        k = min([self.decode_ahead] + [r.params.max_new_tokens - len(r.output) - lag for r in seqs])
        reqs = [Request(prefix_len=r.computed, num_new=1, block_table=r.pages) for r in seqs]
        while k >= 2:
            if sum(self.allocator.shortfall(r, r.computed + k) for r in seqs) <= self.allocator.num_free \
                    and self.engine.graphs.serves(reqs, steps=k):
                return k
            k //= 2
        return 1

    def _collect(self, call, start: float) -> list[Sequence]:
        """Read a decode-ahead call back and emit its tokens. Before it is read, the call
        that continues it (the same requests, their next steps) is queued behind it on the
        device where it may be (``_follow``), so the GPU runs on while the host reads and
        emits. -> the requests that finished."""
        try:
            nxt = self._follow(call)
        except BaseException:
            self._take(call, start)     # the tokens that ran are kept, then the error goes on
            raise
        if nxt is not None:
            self._flight = (nxt, time.perf_counter())
        return self._take(call, start)

    def _follow(self, call):
        """The call that continues ``call`` (all of its requests, none waiting, none left
        out), queued on the device now, or None. Speculative: a request that meets a stop
        token in ``call`` loses the steps queued for it (computed for nothing, as the tokens
        after a stop inside one call are)."""
        seqs = call.seqs
        if self.waiting or len(seqs) != len(self.running) \
                or not all(a is b for a, b in zip(seqs, self.running)):
            return None
        k = self._most_steps(seqs, call.steps)
        if k < 2:
            return None
        return self.engine.decode_ahead(seqs, k, wait=False, after=call)

    def _take(self, call, start: float) -> list[Sequence]:
        """``call``'s tokens for its requests still running (one that finished in the call
        before keeps nothing of this one), each up to its first stop token."""
        rows = call.rows()
        now = time.perf_counter()
        began = max(start, self._read_s)        # the device ran it after the call before
        self._read_s = now
        running = {id(r) for r in self.running}
        done, kept = [], []
        for r, tokens in zip(call.seqs, rows):
            n = 0
            if id(r) in running:
                r.stats.num_computed_tokens += call.steps
                for n, t in enumerate(tokens, start=1):
                    if self._emit(r, t, now):
                        done.append(r)
                        break
            kept.append(n)
        for j in range(call.steps):     # a step's decode tokens: those some request kept
            self.stats.add_step(prefill=0, decode=sum(n > j for n in kept),
                                seconds=(now - began) / call.steps)
        still = {id(r) for r in self.running}
        if self._flight is not None and not any(id(r) in still for r in self._flight[0].seqs):
            self._flight = None         # every request it ran has finished: nothing to read
        return done

    def schedule(self) -> dict[Sequence, int]:
        """This step's plan {request: number of its pending tokens to run}, in batch order.
        May preempt running requests (their pages are freed at once)."""
        plan: dict[Sequence, int] = {}
        budget, shrunk, self._reserved = self.budget, False, 0
        preempted = self.stats.preemptions
        for r in [r for r in self.running if r.decoding]:          # 1. decodes
            if budget < 1:
                break
            if r not in self.running:                               # preempted just now
                continue
            if self._fit(r, 1, plan) == 0:
                self._preempt(r)                                    # r is the youngest left
                continue
            plan[r], budget = 1, budget - 1
        for r in list(self.running):                                # 2. prompt chunks
            if budget < 1 or r in plan or r not in self.running:
                continue
            want = min(r.num_tokens - r.computed, budget)
            n = self._fit(r, want, plan)
            shrunk |= n < want
            if n:
                plan[r], budget = n, budget - n
        pressure = shrunk or self.stats.preemptions > preempted    # then admit nothing
        while self.waiting and not pressure and budget >= 1 and len(self.running) < self.max_num_seqs:
            r = self.waiting[0]                                     # 3. admissions
            n = min(r.num_tokens, budget, self._free_pages() * self.page_size)
            if n == 0:
                break
            self.waiting.pop(0)
            self.engine.admit(r)
            bisect.insort(self.running, r, key=lambda x: x.order)
            self._reserved += self.allocator.pages_for(n)
            plan[r], budget = n, budget - n
        self.stats.max_running = max(self.stats.max_running, len(self.running))
        return plan

    # -- pages --------------------------------------------------------------------------
    def _held(self, r: Sequence) -> int:
        return len(r.pages)

    def _free_pages(self) -> int:
        return self.allocator.num_free - self._reserved

    def _fit(self, r: Sequence, want: int, plan: dict[Sequence, int]) -> int:
        """How many of ``want`` tokens of running ``r`` fit this step (reserving their pages);
        with no room at all, first preempt running requests younger than ``r`` that this
        step has not scheduled, youngest first."""
        held = self._held(r)
        room = lambda: held * self.page_size - r.computed + self._free_pages() * self.page_size
        while room() < 1:
            victims = [v for v in self.running if v.order > r.order and v not in plan]
            if not victims:
                return 0
            self._preempt(victims[-1])
        n = min(want, room())
        self._reserved += self.allocator.shortfall(r, r.computed + n)
        return n

    def _preempt(self, r: Sequence) -> None:
        """Free ``r``'s pages and queue it again; it recomputes its tokens when readmitted."""
        if r.seq_id in self.engine.ids:
            self.engine.free([r])
        r.computed = 0
        r.stats.num_preemptions += 1
        self.stats.preemptions += 1
        self.running.remove(r)
        bisect.insort(self.waiting, r, key=lambda x: x.order)

    def _finish(self, r: Sequence, reason: str) -> Sequence:
        if r in self.running:
            self.running.remove(r)
        if r.seq_id in self.engine.ids:
            self.engine.free([r])
        r.owner = None
        r.finish_reason = reason
        r.stats.finish_s = time.perf_counter()
        self.engine.sequences.drop_request(r, self._token)
        return r



def _free_owned(engine, token: object) -> None:
    """A scheduler's finalizer: free the engine's sequences it was running."""
    engine.free([s for s in list(engine.sequences.live.values()) if s.owner is token])
    engine.sequences.drop_owner(token)
