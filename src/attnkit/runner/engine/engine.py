"""``Engine``: a model, a paged KV cache, its page allocator and one attention backend.

    engine = Engine.from_pretrained("/models/tiny-llama", backend="torch_native", page_size=16)
    logits = engine.prefill([[1, 5, 9], [1, 7]])         # [3, V] and [2, V]; sequences 0 and 1
    step = engine.decode([11, 12])                       # [2, V]: one token for each sequence
    new_tokens = engine.generate([[1, 5, 9]], max_new_tokens=8)   # greedy (generation.py)

A *sequence* is a request whose KV lives in the cache under an id: one ``Sequence`` record
(sequence.py) holds its tokens, how many are cached and its pages. ``step`` is the general
form: ``{id: new tokens}``; an unknown id starts a sequence, a known one extends it (chunked
prefill over a cached prefix, or decode), or runs tokens its record already holds (the
scheduler's). Each step builds its metadata once (``build_batch``), prepares the backend
once, builds the per-step context once, and runs every layer; a decode step the graph runner
serves (graphs.py) is one CUDA-graph replay instead. Under tensor parallelism (``ranks``,
ranks.py) this engine is rank 0: it keeps every sequence and page, checks and builds each
step, sends it to the other ranks (token ids, positions' requests with their block-table
rows, the logits wanted) and runs its own shard with them; the others run the same step
(``follow_step``) on their shards and caches, so every rank's KV stays in step with rank 0's
page decisions, preemptions included. Sampling happens here, once.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Hashable, Mapping, Sequence as Seq

import torch

from attnkit.backends.base import AttentionBackend
from attnkit.backends.batch import Request, build_batch
from attnkit.errors import fail
from attnkit.kvcache.allocator import PageAllocator
from attnkit.runner.engine.checks import check_count, check_id, check_list, coded_args, preview
from attnkit.runner.engine.sequence import Sequence, SequenceRegistry
from attnkit.runner.engine.tokens import token_ids
from attnkit.runner.layers.linear import row_by_row
from attnkit.runner.models.base import DecoderModel

LOGITS = ("all", "last", "argmax")


class AheadCall:
    """Greedy decode steps ``Engine.decode_ahead(wait=False)`` queued on the device: its
    ``seqs`` (their ``computed`` already moved ``steps`` on) and ``rows()``, each record's
    ``steps`` tokens (read back once; the caller appends them)."""

    def __init__(self, engine: "Engine", seqs: list[Sequence], steps: int, launched):
        self.engine, self.seqs, self.steps, self.launched = engine, seqs, steps, launched

    def rows(self) -> list[list[int]]:
        out = self.launched.rows()
        if self.engine._flight is self:
            self.engine._flight = None
        return out


class Engine:
    """Serve one model with one attention backend. Not thread-safe; one step at a time.
    ``allocator`` is the page allocator (kvcache/allocator.py); ``graphs`` the decode graph
    runner (None: eager)."""

    def __init__(self, model: DecoderModel, backend: AttentionBackend, cache,
                 allocator: PageAllocator):
        self.model = model
        self.backend = backend
        self.cache = cache
        self.allocator = allocator
        self.page_size = cache.page_size
        self.device = cache.device
        self.plan = None                                  # the Plan that chose the backend
        self.graphs = None                                # engine/graphs.py GraphRunner
        self.ranks = None                                 # engine/ranks.py RankGroup (tp > 1)
        self.rank_key = None                              # this engine's key on the other ranks
        self.sequences = SequenceRegistry()              # the one table of sequences (sequence.py)
        self._flight = None                               # the unread decode_ahead(wait=False)

    @classmethod
    def from_pretrained(cls, *args, **kwargs) -> "Engine":
        """Load a checkpoint, plan its backends, allocate the KV cache (and capture decode
        graphs where they run): see ``build.from_pretrained`` for every option."""
        from attnkit.runner.engine.build import from_pretrained

        return from_pretrained(cls, *args, **kwargs)

    # -- sequences ----------------------------------------------------------------------
    @property
    def ids(self) -> list[Hashable]:
        """Live sequences, oldest first."""
        return list(self.sequences.live)

    @coded_args("AK483")
    def sequence(self, seq_id: Hashable) -> Sequence:
        """The record of live sequence ``seq_id``."""
        check_id(seq_id, field="ids")
        if seq_id not in self.sequences.live:
            fail("AK483", f"no live sequence has id {seq_id!r} (live: {self.ids[:8]})",
                 field="ids", expected="a live sequence id", actual=seq_id)
        return self.sequences.live[seq_id]

    @coded_args("AK483")
    def tokens(self, seq_id: Hashable) -> list[int]:
        """The tokens of ``seq_id`` whose KV is cached."""
        seq = self.sequence(seq_id)
        return seq.tokens[:seq.computed]

    def admit(self, seq: Sequence) -> None:
        """Make ``seq`` (a record made elsewhere, e.g. by the scheduler) live: its pending
        tokens run in later steps. Its id must be free."""
        check_id(seq.seq_id, field="seq_id")
        if seq.seq_id in self.sequences.live:
            fail("AK483", f"sequence id {seq.seq_id!r} is already live", field="seq_id",
                 expected="an id not in use", actual=repr(seq.seq_id))
        self.sequences.live[seq.seq_id] = seq

    @coded_args("AK483")
    def release(self, ids: Seq[Hashable] | None = None) -> None:
        """Free the pages of ``ids`` (default: every sequence) and forget them (their records
        keep their tokens, with nothing cached). All or nothing: an unknown or repeated id,
        or a sequence a Scheduler is running (its ``abort()`` frees those), is AK483 before
        any sequence is freed."""
        check_list("ids", ids, allow_none=True)
        ids = list(self.sequences.live) if ids is None else list(ids)
        seqs = [self.sequence(i) for i in ids]
        if len(set(ids)) != len(ids):
            fail("AK483", f"release names a sequence more than once: {preview(ids)}",
                 field="ids", expected="distinct ids", actual=preview(ids))
        owned = [s.seq_id for s in seqs if s.owner is not None]
        if owned:
            fail("AK483", f"sequence(s) {preview(owned)} are running in a Scheduler: releasing them "
                          "here would silently change their output; Scheduler.abort() frees them",
                 field="ids", expected="sequences no Scheduler runs", actual=preview(owned))
        self.free(seqs)

    def free(self, seqs: Seq[Sequence]) -> None:
        """Release live records ``seqs`` (checked by the caller: the scheduler that owns them,
        or ``release``): their pages go back, nothing of them is cached, they are forgotten."""
        for seq in seqs:
            self.allocator.release(seq)
            seq.computed = 0
            del self.sequences.live[seq.seq_id]

    @coded_args("AK483")
    def new_ids(self, count: int) -> list[int]:
        """``count`` fresh integer sequence ids."""
        check_count("count", count, minimum=0)
        return self.sequences.new_ids(count)

    # -- steps --------------------------------------------------------------------------
    @coded_args("AK483")
    def prefill(self, prompts: Seq[Seq[int]], *, ids: Seq[Hashable] | None = None,
                prompt_lens: Seq[int] | None = None) -> list[torch.Tensor]:
        """Run ``prompts[i]`` as new tokens of sequence ``ids[i]`` (default: new sequences).
        A known id continues its sequence: prefill in pieces equals prefill in one go.
        prompt_lens: dual chunk models only, each sequence's whole prompt length when the
        prompt comes in pieces, so every piece uses the length scale of the whole prompt
        (only matters past original_max_position_embeddings; see layers/rotary.py).
        Returns logits [len(prompts[i]), vocab] float32 per prompt."""
        check_list("prompts", prompts)
        check_list("ids", ids, allow_none=True)
        check_list("prompt_lens", prompt_lens, allow_none=True)
        ids = self.new_ids(len(prompts)) if ids is None else list(ids)
        for i in ids:
            check_id(i, field="ids")
        if len(ids) != len(prompts):
            fail("AK483", f"{len(prompts)} prompt(s) but {len(ids)} id(s)", field="ids",
                 expected=len(prompts), actual=len(ids))
        if prompt_lens is not None and len(prompt_lens) != len(prompts):
            # zip would silently drop the prompts without a length
            fail("AK483", f"{len(prompts)} prompt(s) but {len(prompt_lens)} prompt length(s)",
                 field="prompt_lens", expected=len(prompts), actual=len(prompt_lens))
        lens = None if prompt_lens is None else dict(zip(ids, prompt_lens))
        out = self.step(dict(zip(ids, prompts)), prompt_lens=lens, _order=ids)
        return [out[i] for i in ids]

    @coded_args("AK483")
    def decode(self, tokens: Seq[int], *, ids: Seq[Hashable] | None = None) -> torch.Tensor:
        """One new token per sequence (default: every live sequence, oldest first).
        Returns logits [len(tokens), vocab] float32."""
        check_list("tokens", tokens)
        check_list("ids", ids, allow_none=True)
        ids = self.ids if ids is None else list(ids)
        if len(ids) != len(tokens):
            fail("AK483", f"decode got {len(tokens)} token(s) for {len(ids)} sequence(s)",
                 field="tokens", expected=len(ids), actual=len(tokens))
        for i in ids:
            self.sequence(i)
        out = self.step({i: [t] for i, t in zip(ids, tokens)}, logits="last", _order=ids)
        return torch.cat([out[i] for i in ids]) if ids else torch.empty(0, self.model.arch.vocab_size)

    @coded_args("AK483")
    def step(self, batch: Mapping[Hashable, Seq[int]], *, logits: str = "all",
             prompt_lens: Mapping[Hashable, int] | None = None,
             _order: Seq[Hashable] | None = None) -> dict[Hashable, Any]:
        """One forward step over ``{id: new tokens}`` (a MIXED batch is fine).
        logits: "all" -> [n_i, vocab] per id; "last" -> [1, vocab] per id (float32);
        "argmax" -> the greedy next token (an int) per id, chosen on the device.
        prompt_lens: {id: whole prompt length} for the dual chunk length scale (see prefill);
        ids left out use their KV length after the step. A failed step leaves every sequence
        and the page allocator as they were (new ones are not started, pages taken for the step
        go back) and raises its own error."""
        if logits not in LOGITS:
            fail("AK483", f"logits must be one of {', '.join(LOGITS)}, got {logits!r}",
                 field="logits", expected=list(LOGITS), actual=logits)
        if not isinstance(batch, Mapping):
            fail("AK483", f"a step takes {{id: new tokens}}, not {type(batch).__name__}",
                 field="batch", expected="Mapping[id, list[int]]", actual=type(batch).__name__)
        if prompt_lens is not None and not isinstance(prompt_lens, Mapping):
            fail("AK483", f"prompt_lens must be {{id: whole prompt length}}, not "
                          f"{type(prompt_lens).__name__}", field="prompt_lens",
                 expected="Mapping[id, int] | None", actual=type(prompt_lens).__name__)
        order = list(batch) if _order is None else list(_order)
        for i in order:
            check_id(i, field="ids")
        if len(set(order)) != len(order):
            fail("AK483", "a step names a sequence more than once", field="ids",
                 expected="distinct ids", actual=order)
        if not order:
            return {}
        held = [i for i in order if i in self.sequences.live
                and self.sequences.live[i].computed > self.sequences.live[i].num_tokens]
        if held:
            fail("AK483", f"sequence(s) {preview(held)} ran decode steps whose tokens are not "
                          "appended yet (decode_ahead(wait=False): read rows() and append "
                          "them first)", field="ids", expected="sequences with their tokens",
                 actual=preview(held))
        new = {i: self._check_tokens(i, batch[i]) for i in order}
        lengths = self._dca_lengths(order, new, prompt_lens or {})
        seqs, appended, started = self._records(order, new)
        with self._undone_on_failure(seqs, appended, started):
            self._reserve(seqs, new)
            return self._run(seqs, [len(new[i]) for i in order], logits, lengths)

    @contextmanager
    def _undone_on_failure(self, seqs: list[Sequence], appended: list[int] | None = None,
                           started: Seq[Sequence] = ()):
        """Run a step's body; if it raises (anything: a kernel's error, an interrupt), put
        every record and the allocator back as they were when the step began, then let the
        error go on as it was: each record's pages past those it held (the step's reserve)
        go back to the allocator in reverse order, so its free list is as before; ``computed``
        is restored, the ``appended`` tokens (a count per record) are dropped and the
        records the step ``started`` are forgotten. The KV a failed step wrote lies past
        every record's ``computed`` (or in pages given back): nothing reads it before a
        later step writes it again."""
        held = [(len(s.pages), s.computed) for s in seqs]
        try:
            yield
        except BaseException:
            for seq, (pages, computed) in reversed(list(zip(seqs, held))):
                self.allocator.shrink(seq, pages)
                seq.computed = computed
            for seq, n in zip(seqs, appended or ()):     # the step's tokens were not run
                del seq.prompt[len(seq.prompt) - n:]
            self.free(started)
            raise

    def _records(self, order: list[Hashable], new: dict[Hashable, list[int]]):
        """Each id's record with the step's tokens as its next pending ones: a record that
        has pending tokens (the scheduler's) must be running exactly those; otherwise the
        tokens are appended, and an unknown id gets a new record (started by this step).
        Everything is checked before anything changes.
        -> (records, tokens appended to each, records started)."""
        for i in order:
            seq = self.sequences.live.get(i)
            if seq is not None and seq.computed < seq.num_tokens \
                    and seq.pending(len(new[i])) != new[i]:
                fail("AK483", f"sequence {i!r} has pending tokens {preview(seq.pending(len(new[i])))}; "
                              f"a step runs them, not {preview(new[i])}", field="tokens",
                     expected=seq.pending(len(new[i])), actual=new[i])
        seqs, appended, started = [], [], []
        for i in order:
            seq = self.sequences.live.get(i)
            if seq is None:
                seq = self.sequences.live[i] = Sequence(i, [])
                started.append(seq)
            added = 0 if seq.computed < seq.num_tokens else len(new[i])
            seq.prompt.extend(new[i][:added])
            seqs.append(seq)
            appended.append(added)
        return seqs, appended, started

    def _reserve(self, seqs: list[Sequence], new: dict[Hashable, list[int]]) -> None:
        """Give every sequence room for its new tokens, all or nothing."""
        alloc = self.allocator
        need = sum(alloc.shortfall(s, s.computed + len(new[s.seq_id])) for s in seqs)
        if need > alloc.num_free:
            fail("AK400", f"this step needs {need} more KV page(s) but only {alloc.num_free} of "
                          f"{alloc.num_pages} are free; release finished sequences or build "
                          "the engine with a larger max_tokens",
                 field="max_tokens", expected=f">= {need} free pages", actual=alloc.num_free)
        for seq in seqs:
            alloc.grow_to(seq, seq.computed + len(new[seq.seq_id]))

    def _run(self, seqs: list[Sequence], counts: list[int], logits: str,
             dca_lengths: list[int] | None) -> dict[Hashable, Any]:
        reqs = [Request(prefix_len=s.computed, num_new=n, block_table=s.pages)
                for s, n in zip(seqs, counts)]
        tokens = [t for s, n in zip(seqs, counts) for t in s.pending(n)]
        graphs = self.graphs
        if logits != "all" and dca_lengths is None and graphs is not None and graphs.serves(reqs):
            out = graphs.decode(reqs, tokens, want=logits)
        else:
            out = self._eager(reqs, tokens, logits, dca_lengths)
        for seq, n in zip(seqs, counts):
            seq.computed += n
        ids = [s.seq_id for s in seqs]
        if logits == "argmax":
            return dict(zip(ids, out))
        if logits == "last":
            return {i: out[j:j + 1] for j, i in enumerate(ids)}
        bounds = [0]
        for n in counts:
            bounds.append(bounds[-1] + n)
        return {i: out[bounds[j]:bounds[j + 1]] for j, i in enumerate(ids)}

    @coded_args("AK483")
    def decode_ahead(self, seqs: list[Sequence], steps: int, *, wait: bool = True,
                     after: "AheadCall | None" = None):
        """``steps`` greedy decode steps of ``seqs`` (distinct records of this engine, each
        decoding: one pending token; anything else is AK483 before a page moves) in one go
        on the decode graphs: each step's tokens are the next one's input, so the host
        neither waits nor works between steps. The pages of all the steps are reserved first
        (all or nothing, AK400); every record's ``computed`` moves ``steps`` on. A call that
        fails part-way (a kernel raising in any step) leaves every record and the allocator as
        they were before it, as a failed ``step`` does, and raises that error. -> each
        sequence's ``steps`` new tokens; the caller appends them (a stop token part-way only
        means the tokens after it are discarded).

        wait=False: return an ``AheadCall`` as soon as the steps are queued (its ``rows()``
        reads them back). Until its tokens are appended its records are in flight: ``step``
        refuses a record that ran more steps than it holds tokens, and ``decode_ahead``
        takes them only with ``after=`` that call, which continues it
        on the device (its last tokens are the first inputs) while the host has not read it
        yet: the same records in the same order, the call this engine launched last."""
        check_count("steps", steps, minimum=1)
        check_list("seqs", seqs)
        if wait not in (True, False):
            fail("AK483", f"wait must be True or False, got {preview(wait)}", field="wait",
                 expected="bool", actual=preview(wait))
        steps, seqs, graphs = int(steps), list(seqs), self.graphs
        if after is not None and not (isinstance(after, AheadCall) and self._flight is after
                                      and len(seqs) == len(after.seqs)
                                      and all(a is b for a, b in zip(seqs, after.seqs))):
            fail("AK483", "after= must be this engine's last decode_ahead(wait=False) call, not "
                          "read yet, over the same records in the same order", field="after",
                 expected="the unread AheadCall of these records", actual=type(after).__name__)
        lag = after.steps if after is not None else 0
        ours = all(isinstance(s, Sequence) and self.sequences.live.get(s.seq_id) is s
                   and s.computed - lag >= len(s.prompt) and s.computed - lag == s.num_tokens - 1
                   for s in seqs) and len({s.seq_id for s in seqs}) == len(seqs)
        reqs = [Request(prefix_len=s.computed, num_new=1, block_table=s.pages)
                for s in seqs] if ours else []
        if not ours or graphs is None or self.ranks is not None or not graphs.serves(reqs, steps=steps):
            fail("AK483", f"decode_ahead runs decoding sequences of this engine on its decode "
                          f"graphs, {steps} step(s) within their reach", field="seqs",
                 expected="decoding records, graphs that serve them", actual=len(seqs))
        with self._undone_on_failure(seqs):
            self._reserve(seqs, {s.seq_id: [0] * steps for s in seqs})
            reqs = [Request(prefix_len=s.computed, num_new=1, block_table=s.pages) for s in seqs]
            first = after.launched.last if after is not None else [s.pending(1)[0] for s in seqs]
            call = AheadCall(self, seqs, steps, graphs.launch(reqs, first, steps=steps))
            for seq in seqs:
                seq.computed += steps
        if wait:
            return call.rows()
        self._flight = call
        return call

    def _eager(self, reqs: list[Request], tokens: list[int], logits: str,
               dca_lengths: list[int] | None):
        meta = build_batch(reqs, page_size=self.page_size, device=self.device)
        step = self.backend.prepare(meta, self.cache)     # checked here before any rank runs
        if self.ranks is None:
            return self._forward(meta, step, tokens, logits, dca_lengths)
        payload = ([(r.prefix_len, r.num_new, list(r.block_table)) for r in reqs], tokens,
                   logits, dca_lengths)
        with self.ranks.guard("a tensor-parallel step"):     # a failing rank: AK482
            self.ranks.send("step", self.rank_key, payload)
            return self._forward(meta, step, tokens, logits, dca_lengths)

    def follow_step(self, payload) -> None:
        """A rank > 0: run rank 0's step (``_eager``'s payload) on this rank's shard."""
        rows, tokens, logits, dca_lengths = payload
        reqs = [Request(prefix_len=p, num_new=n, block_table=pages) for p, n, pages in rows]
        meta = build_batch(reqs, page_size=self.page_size, device=self.device)
        want = "last" if logits == "argmax" else logits          # rank 0 picks the tokens
        self._forward(meta, self.backend.prepare(meta, self.cache), tokens, want, dca_lengths)

    def _forward(self, meta, step, tokens: list[int], logits: str,
                 dca_lengths: list[int] | None) -> torch.Tensor:
        """The model over one prepared step: logits [T or B, vocab] float32 ("all" / "last"),
        or each request's greedy token (a list of int) for "argmax"."""
        ctx = self.model.context(self.backend, self.cache, step, dca_lengths=dca_lengths)
        flat = torch.tensor(tokens, dtype=torch.int64, device=self.device)
        rows = meta.query_start_loc[1:].to(torch.int64) - 1 if logits != "all" else None
        run = getattr(self.plan, "run", None)
        with row_by_row("batch_invariant" in getattr(run, "numerics", ())):   # --require
            out = self.model.forward(flat, ctx, rows=rows)
        if logits != "argmax":
            return out
        from attnkit.runner.layers.fused import greedy

        return greedy(out).tolist()

    @torch.no_grad()
    @coded_args("AK483")
    def generate(self, prompts: Seq[int] | Seq[Seq[int]], max_new_tokens: int, *,
                 eos_token_id: int | Seq[int] | None = None) -> list[int] | list[list[int]]:
        """Greedy decoding of every prompt: the one generation loop (generation.py) with no
        token budget; returns the new tokens only (a list for one prompt given as a list of
        ints, else one list per prompt). A sequence stops at ``eos_token_id`` (kept in its
        output) or after ``max_new_tokens``. Sampling, budgets and stats: ``LLM.generate``."""
        from attnkit.runner.engine.generation import greedy

        return greedy(self, prompts, max_new_tokens, eos_token_id=eos_token_id)

    # -- checks -------------------------------------------------------------------------
    def _check_tokens(self, seq_id: Hashable, tokens: Seq[int]) -> list[int]:
        vocab = self.model.arch.vocab_size
        if type(tokens) is list and tokens and all(type(t) is int and 0 <= t < vocab for t in tokens):
            return tokens                       # the common case (the scheduler's), checked fast
        toks = token_ids(tokens)
        if toks is None:
            fail("AK483", f"sequence {seq_id!r}: tokens must be a list of int token ids (text "
                          f"must be tokenized first), got {preview(tokens)}", field="tokens",
                 expected="list[int] | 1-D integer tensor", actual=preview(tokens))
        if not toks:
            fail("AK483", f"sequence {seq_id!r}: a step needs at least one new token",
                 field="tokens", expected=">= 1 token", actual=[])
        bad = [t for t in toks if not 0 <= t < vocab]
        if bad:
            fail("AK483", f"sequence {seq_id!r}: token ids {bad[:5]} are outside the vocabulary "
                          f"[0, {vocab})", field="tokens", expected=f"0 <= id < {vocab}", actual=bad[:5])
        return toks

    def _dca_lengths(self, order: list[Hashable], new: dict[Hashable, list[int]],
                     prompt_lens: Mapping[Hashable, int]) -> list[int] | None:
        if not prompt_lens:
            return None
        out = []
        for i in order:
            seq = self.sequences.live.get(i)
            after = (seq.computed if seq else 0) + len(new[i])
            length = prompt_lens.get(i, after)
            if not isinstance(length, int) or length < after:
                fail("AK483", f"sequence {i!r}: prompt length {length!r} is shorter than the "
                              f"{after} tokens it holds after this step", field="prompt_lens",
                     expected=f">= {after}", actual=length)
            out.append(length)
        return out

