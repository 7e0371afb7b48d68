"""Decode steps as CUDA graphs: one captured graph per batch-size bucket and context tier.

    runner = GraphRunner(engine, max_batch=64)      # captures buckets 1, 2, 4, ..., 64 now
    runner.serves(requests)                         # a DECODE step it can replay?
    tokens = runner.decode(requests, token_ids, want="argmax")   # pad, refill, replay
    rows = runner.decode(requests, token_ids, want="argmax", steps=8)   # 8 steps, one read

Each bucket b owns a static step: the StaticDecode metadata of b rows (backends/static.py;
one set of buffers shared by every bucket, padded rows on scratch pages the page allocator keeps
apart), the backend's static plan (``prepare_static``), the input token buffer, and the
captured body: refill the backend's derived state, build the per-step context over the
static buffers, run the model, greedy argmax on the device. A bucket whose backend picks its
kernel by context (``static_reaches``: the plan's kernel table changes its first variant at
some KV length) has one static step and graph per context tier, each sized for its reach; a
step replays the tier of the smallest reach that holds its longest KV (a B=1 step over 200
keys runs the short-context kernel, not the one the plan picks for the longest context the
graphs hold). A step of n requests replays the
smallest bucket >= n after one refill of the buffers (host-to-device copies, no sync); the
host reads back n token ids (greedy) or n rows of logits (sampling). Greedy steps can also
run several at a time (``steps``): the pages of every step are written by the one fill, and
between replays the device moves the rows one token on (StaticDecode.advance) and feeds each
step's argmax to the next, so k steps cost one fill and one read-back, and the GPU never
waits for the host in between. All graphs share one memory pool, captured largest first. ``capture=False`` runs the same body eagerly at every
step: the bookkeeping (buckets, padding, refills) on any device, for tests.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence, TextIO

import torch

from attnkit.backends.batch import Request
from attnkit.backends.static import StaticDecode
from attnkit.errors import AttnkitError, fail
from attnkit.runner.layers.fused import greedy

GRAPH_SLACK_BYTES = 256 * 2**20


def buckets_of(max_batch: int) -> list[int]:
    """1, 2, 4, ... below ``max_batch``, then ``max_batch`` itself."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return out + [max_batch]


def reserve_bytes(arch, max_batch: int, dtype: torch.dtype) -> int:
    """Device memory to keep free for the graphs' pool (an estimate the KV budget takes off;
    the measured size is in ``GraphRunner.stats``): a decode step's live activations at the
    largest bucket -- hidden states, the widest MLP or expert intermediate, float32 logits
    and their argmax -- twice, plus slack for split-KV partials and allocator rounding."""
    elem = torch.empty((), dtype=dtype).element_size()
    moe = arch.moe
    experts = getattr(moe, "num_experts", 1) if moe is not None else 1
    inter = getattr(moe, "inter", arch.intermediate_size) if moe is not None else arch.intermediate_size
    per_token = (8 * arch.hidden_size + 3 * max(arch.intermediate_size, experts * inter)) * elem \
        + 3 * arch.vocab_size * 4
    return 2 * max_batch * per_token + GRAPH_SLACK_BYTES


class Launched:
    """Greedy decode steps queued on the device (``GraphRunner.launch``): ``last`` is the
    last step's tokens (a device tensor, the input of a launch that follows), ``rows()``
    reads every step back, once. On CUDA the copy to pinned host memory is queued with the
    steps, so ``rows()`` waits for these steps only, not for a launch queued after them."""

    def __init__(self, history: torch.Tensor, n: int):
        self.n, self.last, self._rows, self._ready = n, history[-1, :n], None, None
        self._host = history
        if history.is_cuda:
            self._host = torch.empty(history.shape, dtype=history.dtype, pin_memory=True)
            self._host.copy_(history, non_blocking=True)
            self._ready = torch.cuda.Event()
            self._ready.record()

    def rows(self) -> list[list[int]]:
        """Each request's tokens, step by step."""
        if self._rows is None:
            if self._ready is not None:
                self._ready.synchronize()
            self._rows = self._host[:, :self.n].t().tolist()
        return self._rows


@dataclass(slots=True)
class _Bucket:
    size: int
    reach: int                      # the longest KV its static step is sized for
    step: Any                       # the backend's static StepState
    graph: Any = None               # torch.cuda.CUDAGraph (None: capture=False)
    logits: torch.Tensor | None = None   # [size, vocab] float32, the graph's output
    argmax: torch.Tensor | None = None   # [size] int64


class GraphRunner:
    def __init__(self, engine, *, max_batch: int, capture: bool = True, explicit: bool = False,
                 progress: TextIO | None = None):
        """explicit: graphs were asked for (cuda_graph=True): a backend that cannot be
        captured is AK489 (else the plan said it could)."""
        self.engine, self.capture = engine, capture
        self.buckets = buckets_of(max_batch)
        alloc, dev = engine.allocator, engine.device
        max_pages = alloc.num_pages
        limit = engine.model.arch.max_position_embeddings
        if limit:
            max_pages = min(max_pages, alloc.pages_for(limit))
        self.static = StaticDecode(max_batch=self.buckets[-1], max_pages=max(1, max_pages),
                                   page_size=engine.page_size, scratch_pages=alloc.scratch_pages,
                                   device=dev)
        self.tokens = torch.zeros(self.buckets[-1], dtype=torch.int64, device=dev)
        self._host_tokens = torch.zeros(self.buckets[-1], dtype=torch.int64,
                                        pin_memory=dev.type == "cuda")
        self._bucket: dict[tuple[int, int], _Bucket] = {}
        self._pool = torch.cuda.graph_pool_handle() if capture else None
        self.reaches: dict[int, tuple[int, ...]] = {}        # bucket -> its context tiers
        self.stats = {"buckets": list(self.buckets), "reaches": self.reaches, "captured": capture,
                      "capture_s": 0.0, "memory_bytes": 0, "replays": 0, "eager_decodes": 0}
        self._copied = None                              # CUDA event after the token copy
        try:
            self.reaches.update({size: self._reaches_of(size) for size in self.buckets})
            for size, reach in self._tiers():          # every static plan, checked now
                self._prepare(size, reach)
            if capture:
                self._capture_all(progress)
        except AttnkitError as err:
            if err.code == "AK457" or explicit:
                fail("AK489", f"decode steps cannot be captured: {err}", field="cuda_graph",
                     expected="a decode backend that declares cuda_graph", actual=True)
            raise
        except Exception as exc:  # noqa: BLE001 - a capture that fails is refused, coded
            self._bucket.clear()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
                torch.cuda.empty_cache()
            fail("AK489", f"capturing the decode graphs failed ({type(exc).__name__}: {exc})",
                 field="cuda_graph", expected="a capturable decode step", actual=True)

    @staticmethod
    def scratch_pages_for(max_batch: int, page_size: int) -> int:
        return StaticDecode.scratch_need(max_batch, page_size)

    # -- one decode step ---------------------------------------------------------------
    def serves(self, reqs: Sequence[Request], *, steps: int = 1) -> bool:
        """``steps`` DECODE steps (one new token after a cached prefix each, then one more per
        step) that fit a bucket."""
        if not reqs or len(reqs) > self.buckets[-1]:
            return False
        limit = self.static.max_seq_len - (steps - 1)
        return all(r.num_new == 1 and 0 < r.prefix_len < limit for r in reqs)

    def bucket_for(self, n: int) -> int:
        return next(b for b in self.buckets if b >= n)

    def decode(self, reqs: Sequence[Request], tokens: Sequence[int], *, want: str,
               steps: int = 1):
        """Run one decode step of ``reqs`` (their pending tokens ``tokens``). want "argmax":
        the greedy next token of each request (list of int); "last": logits [n, vocab].
        steps k > 1 (argmax only): k greedy steps, each step's tokens the next one's input,
        each request's block table holding the pages of all k; -> each request's k tokens
        (a list of n lists)."""
        if steps != 1 and (want != "argmax" or isinstance(steps, bool) or not isinstance(steps, int)
                           or steps < 1):
            fail("AK483", f"steps must be an int >= 1 (more than 1 only with want='argmax'), "
                          f"got {steps!r} with want={want!r}", field="steps",
                 expected="1, or k >= 1 with argmax", actual=repr(steps))
        if steps > 1:
            return self.launch(reqs, tokens, steps=steps).rows()
        n = len(reqs)
        bucket = self._filled(reqs, 1)
        self._feed(tokens)
        logits, argmax = self._run(bucket)
        return argmax[:n].tolist() if want == "argmax" else logits[:n].clone()

    def launch(self, reqs: Sequence[Request], tokens, *, steps: int) -> "Launched":
        """Queue ``steps`` greedy decode steps of ``reqs`` on the device and return at once
        (no host synchronisation): ``tokens`` are the first step's inputs, a list of int or
        an int64 device tensor of len(reqs) (another launch's ``last``: the steps then follow
        it on the device, with no host work between). Everything is stream-ordered: a launch
        made while an earlier one still runs refills the shared buffers after it."""
        bucket = self._filled(reqs, steps)
        self._feed(tokens)
        history = torch.empty(steps, bucket.size, dtype=torch.int64, device=self.tokens.device)
        for j in range(steps):
            if j:                              # the next step of the same rows, on the device
                self.static.advance(bucket.size)
                self.tokens[:bucket.size].copy_(argmax)
            _, argmax = self._run(bucket)
            history[j].copy_(argmax)
        return Launched(history, len(reqs))

    def _filled(self, reqs: Sequence[Request], steps: int) -> _Bucket:
        """The bucket and context tier of ``steps`` steps of ``reqs``, its buffers filled."""
        size = self.bucket_for(len(reqs))
        longest = max(r.prefix_len for r in reqs) + steps          # the KV of the last step
        tiers = self.reaches[size]          # serves() holds longest <= the last one
        bucket = self._prepare(size, next((x for x in tiers if x >= longest), tiers[-1]))
        self.static.fill(bucket.size, reqs, ahead=steps - 1)
        return bucket

    def _feed(self, tokens) -> None:
        """The first step's input tokens: from the host (pinned staging) or the device."""
        if isinstance(tokens, torch.Tensor):
            self.tokens[:len(tokens)].copy_(tokens)
            return
        n, host = len(tokens), self._host_tokens
        if self._copied is not None:
            self._copied.synchronize()                  # the last copy out of ``host`` is done
        host[:n] = torch.tensor(tokens, dtype=torch.int64)
        self.tokens[:n].copy_(host[:n], non_blocking=host.is_pinned())
        if host.is_pinned():
            self._copied = torch.cuda.Event()
            self._copied.record()

    def _run(self, bucket: _Bucket):
        """One step of the bucket as its buffers stand: (logits, argmax) of the replay (the
        graph's own output buffers) or of the body run eagerly."""
        if bucket.graph is not None:
            bucket.graph.replay()
            self.stats["replays"] += 1
            return bucket.logits, bucket.argmax
        self.stats["eager_decodes"] += 1
        return self._body(bucket)

    # -- buckets -----------------------------------------------------------------------
    def _reaches_of(self, size: int) -> tuple[int, ...]:
        """The bucket's context tiers (the backend's static_reaches), checked: ascending ints
        ending at the longest KV the static buffers hold; none below the KV of the bucket's
        padded rows (row j decodes position j % page_size of a scratch page: up to
        min(size, page_size) keys, at every step), so a tier shorter than that merges into the
        next."""
        top = self.static.max_seq_len
        got = tuple(self.engine.backend.static_reaches(size, top))
        if not got or got[-1] != top or any(not 0 < a < b for a, b in zip(got, got[1:])) \
                or any(isinstance(x, bool) or not isinstance(x, int) for x in got):
            fail("AK457", f"{self.engine.backend.name}: static_reaches({size}, {top}) must be ascending "
                          f"ints ending at {top}, got {got!r}", field="static_reaches",
                 expected=f"ascending ints ending at {top}", actual=repr(got))
        floor = min(size, self.static.page_size, top)
        return tuple(dict.fromkeys(max(r, floor) for r in got))

    def _tiers(self) -> list[tuple[int, int]]:
        """Every (bucket, reach), largest first (the first capture sizes the shared pool)."""
        return [(size, reach) for size in reversed(self.buckets) for reach in reversed(self.reaches[size])]

    def _prepare(self, size: int, reach: int) -> _Bucket:
        """The static step of bucket ``size`` sized for ``reach`` keys (built once)."""
        if (size, reach) not in self._bucket:
            eng = self.engine
            meta = self.static.meta(size)
            step = eng.backend.prepare_static(meta, eng.cache, max_seq_len=reach)
            self._bucket[(size, reach)] = _Bucket(size, reach, step)
        return self._bucket[(size, reach)]

    def _body(self, bucket: _Bucket):
        """What a replay runs: (logits [size, vocab] float32, argmax [size] int64)."""
        eng = self.engine
        eng.backend.refill_static(bucket.step)
        ctx = eng.model.context(eng.backend, eng.cache, bucket.step, static=True)
        logits = eng.model.forward(self.tokens[:bucket.size], ctx)
        return logits, greedy(logits)

    @torch.no_grad()
    def _capture_all(self, progress: TextIO | None) -> None:
        """Warm up and capture every bucket, largest first (it sizes the shared pool)."""
        dev = self.engine.device
        torch.cuda.synchronize(dev)
        free_before = torch.cuda.mem_get_info(dev)[0]
        start = time.perf_counter()
        for size, reach in self._tiers():
            bucket = self._prepare(size, reach)
            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):          # compile kernels, build lazy plan state
                self._body(bucket)
            torch.cuda.current_stream(dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                bucket.logits, bucket.argmax = self._body(bucket)
            bucket.graph = graph
        torch.cuda.synchronize(dev)
        self.stats["capture_s"] = time.perf_counter() - start
        self.stats["memory_bytes"] = max(0, free_before - torch.cuda.mem_get_info(dev)[0])
        if progress is not None:
            tiers = "; ".join(f"{size}" + (f" at KV <= {', '.join(map(str, self.reaches[size]))}"
                                            if len(self.reaches[size]) > 1 else "") for size in self.buckets)
            progress.write(f"captured {len(self._tiers())} decode graphs (batch {tiers}) in {self.stats['capture_s']:.1f} s, "
                           f"{self.stats['memory_bytes'] / 2**30:.2f} GiB\n")
            progress.flush()
