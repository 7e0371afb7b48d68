"""``Engine``: a model, a paged KV cache, a page allocator and one attention backend.

    engine = Engine.from_pretrained("/models/tiny-llama", backend="torch_native", page_size=16)
    logits = engine.prefill([[1, 5, 9], [1, 7]])         # [3, V] and [2, V]; sequences 0 and 1
    step = engine.decode([11, 12])                       # [2, V]: one token for each sequence
    new_tokens = engine.generate([[1, 5, 9]], max_new_tokens=8)   # greedy

A *sequence* is a request whose KV lives in the cache under an id. ``step`` is the general
form: ``{id: new tokens}``; an unknown id starts a sequence, a known one extends it (chunked
prefill over a cached prefix, or decode). Each step builds its metadata once
(``build_batch``), prepares the backend once, and runs every layer.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Hashable, Mapping, Sequence

import torch

from attnkit.backends.base import AttentionBackend
from attnkit.backends.batch import Request, build_batch
from attnkit.errors import fail
from attnkit.kvcache.allocator import PageAllocator
from attnkit.kvcache.paged import TORCH_KV_DTYPES, PagedKVCache
from attnkit.runner.arch import architecture_of
from attnkit.runner.model import DecoderModel
from attnkit.runner.setup import (COMPUTE_DTYPES, backend_of, check_cache_room, check_count,
                                  check_id, coded_args, device_of, dtype_name, model_layers,
                                  plan_for, preview)
from attnkit.runner.tokens import stop_ids, token_id, token_ids
from attnkit.runner.weights import Weights, read_checkpoint


class Engine:
    """Serve one model with one attention backend. Not thread-safe; one step at a time."""

    def __init__(self, model: DecoderModel, backend: AttentionBackend, cache: PagedKVCache,
                 allocator: PageAllocator):
        self.model = model
        self.backend = backend
        self.cache = cache
        self.allocator = allocator
        self.page_size = cache.page_size
        self.device = cache.device
        self.plan = None                                  # the Plan that chose the backend
        self._tokens: dict[Hashable, list[int]] = {}     # id -> tokens whose KV is cached
        self._next_id = 0

    @classmethod
    @coded_args("AK483")
    def from_pretrained(cls, source: Any, *, backend: str | AttentionBackend | None = "auto",
                        page_size: int | None = None, dtype: torch.dtype | str = torch.float32,
                        device: torch.device | str = "cpu", max_tokens: int = 4096,
                        kv_cache_dtype: torch.dtype | str | None = None,
                        dual_chunk: bool | None = None,
                        prefill_backend: str | None = None, decode_backend: str | None = None,
                        backend_options: Mapping[str, Any] | None = None) -> "Engine":
        """source: a local model directory (config.json + *.safetensors) or an in-memory
        transformers model.
        backend: a registered name or alias, checked by attnkit's planner against the model,
        device, dtypes and page size (every reason, the planner's codes); "auto" or None lets
        the planner choose (a hybrid if prefill and decode differ); an AttentionBackend object
        is used as is, unchecked.
        prefill_backend / decode_backend: a name for one phase only (the planner checks that
        both phases share one cache layout and page size; a hybrid runs them).
        page_size: None lets the planner choose one every chosen backend accepts.
        max_tokens: KV-cache room, in tokens, over all live sequences.
        dual_chunk: None follows the config's dual_chunk_attention_config; False runs plain
        RoPE attention as transformers does (exact while a sequence fits one chunk_size)."""
        check_count("max_tokens", max_tokens, minimum=1)
        check_count("page_size", page_size, minimum=1, allow_none=True)
        dev = device_of(device)
        cfg, tensors = read_checkpoint(source)
        arch = architecture_of(cfg)
        compute = dtype_name(dtype, field="dtype", table=COMPUTE_DTYPES)
        kv = compute if kv_cache_dtype is None else dtype_name(
            kv_cache_dtype, field="kv_cache_dtype", table=TORCH_KV_DTYPES)
        plan = None
        if isinstance(backend, AttentionBackend):
            attn = backend
            if page_size is None:
                fail("AK483", "page_size must be given with a backend object (no plan picks it)",
                     field="page_size", expected="an int >= 1", actual=None)
        else:
            plan = plan_for(arch, backend=None if backend == "auto" else backend, device=dev,
                            page_size=page_size, dtype=compute, kv_cache_dtype=kv,
                            dual_chunk=dual_chunk, prefill_backend=prefill_backend,
                            decode_backend=decode_backend)
            attn = backend_of(plan, backend_options)
            dual_chunk = plan.settings.get("dual_chunk") != "off"
            page_size = plan.settings["page_size"]
        layers = model_layers(arch, dual_chunk=dual_chunk)
        weights = Weights(tensors, dtype=COMPUTE_DTYPES[compute], device=dev)
        num_pages = -(-max_tokens // page_size)
        check_cache_room(layers, num_pages=num_pages, page_size=page_size,
                         kv_dtype=TORCH_KV_DTYPES[kv], device=dev)
        cache = PagedKVCache(layers, num_pages=num_pages, page_size=page_size,
                             dtype=TORCH_KV_DTYPES[kv], device=dev)
        engine = cls(DecoderModel(arch, weights, layers=layers), attn, cache,
                     PageAllocator(num_pages, page_size=page_size))
        engine.plan = plan
        return engine

    # -- sequences ----------------------------------------------------------------------
    @property
    def ids(self) -> list[Hashable]:
        """Live sequences, oldest first."""
        return list(self._tokens)

    @coded_args("AK483")
    def tokens(self, seq_id: Hashable) -> list[int]:
        """The tokens of ``seq_id`` whose KV is cached."""
        return list(self._known(seq_id))

    @coded_args("AK483")
    def release(self, ids: Sequence[Hashable] | None = None) -> None:
        """Free the pages of ``ids`` (default: every sequence). All or nothing: an unknown or
        repeated id is AK483 before any sequence is freed."""
        _check_list("ids", ids, allow_none=True)
        ids = list(self._tokens) if ids is None else list(ids)
        for seq_id in ids:
            self._known(seq_id)
        if len(set(ids)) != len(ids):
            fail("AK483", f"release names a sequence more than once: {preview(ids)}",
                 field="ids", expected="distinct ids", actual=preview(ids))
        for seq_id in ids:
            self.allocator.free(seq_id)
            del self._tokens[seq_id]

    @coded_args("AK483")
    def new_ids(self, count: int) -> list[int]:
        """``count`` fresh integer sequence ids."""
        check_count("count", count, minimum=0)
        out = []
        while len(out) < count:
            if self._next_id not in self._tokens:
                out.append(self._next_id)
            self._next_id += 1
        return out

    # -- steps --------------------------------------------------------------------------
    @coded_args("AK483")
    def prefill(self, prompts: Sequence[Sequence[int]], *, ids: Sequence[Hashable] | None = None,
                prompt_lens: Sequence[int] | None = None) -> list[torch.Tensor]:
        """Run ``prompts[i]`` as new tokens of sequence ``ids[i]`` (default: new sequences).
        A known id continues its sequence: prefill in pieces equals prefill in one go.
        prompt_lens: dual chunk models only, each sequence's whole prompt length when the
        prompt comes in pieces, so every piece uses the length scale of the whole prompt
        (only matters past original_max_position_embeddings; see runner/rotary.py).
        Returns logits [len(prompts[i]), vocab] float32 per prompt."""
        _check_list("prompts", prompts)
        _check_list("ids", ids, allow_none=True)
        _check_list("prompt_lens", prompt_lens, allow_none=True)
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
    def decode(self, tokens: Sequence[int], *, ids: Sequence[Hashable] | None = None) -> torch.Tensor:
        """One new token per sequence (default: every live sequence, oldest first).
        Returns logits [len(tokens), vocab] float32."""
        _check_list("tokens", tokens)
        _check_list("ids", ids, allow_none=True)
        ids = self.ids if ids is None else list(ids)
        if len(ids) != len(tokens):
            fail("AK483", f"decode got {len(tokens)} token(s) for {len(ids)} sequence(s)",
                 field="tokens", expected=len(ids), actual=len(tokens))
        for i in ids:
            self._known(i)
        out = self.step({i: [t] for i, t in zip(ids, tokens)}, logits="last", _order=ids)
        return torch.cat([out[i] for i in ids]) if ids else torch.empty(0, self.model.arch.vocab_size)

    @coded_args("AK483")
    def step(self, batch: Mapping[Hashable, Sequence[int]], *, logits: str = "all",
             prompt_lens: Mapping[Hashable, int] | None = None,
             _order: Sequence[Hashable] | None = None) -> dict[Hashable, torch.Tensor]:
        """One forward step over ``{id: new tokens}`` (a MIXED batch is fine).
        logits: "all" -> [n_i, vocab] per id; "last" -> [1, vocab] per id (float32).
        prompt_lens: {id: whole prompt length} for the dual chunk length scale (see prefill);
        ids left out use their KV length after the step."""
        if logits not in ("all", "last"):
            fail("AK483", f"logits must be 'all' or 'last', got {logits!r}", field="logits",
                 expected=["all", "last"], actual=logits)
        if not isinstance(batch, Mapping):
            fail("AK483", f"a step takes {{id: new tokens}}, not {type(batch).__name__}",
                 field="batch", expected="Mapping[id, list[int]]", actual=type(batch).__name__)
        if prompt_lens is not None and not isinstance(prompt_lens, Mapping):
            fail("AK483", f"prompt_lens must be {{id: whole prompt length}}, not "
                          f"{type(prompt_lens).__name__}", field="prompt_lens",
                 expected="Mapping[id, int] | None", actual=type(prompt_lens).__name__)
        order = list(batch) if _order is None else list(_order)
        if len(set(order)) != len(order):
            fail("AK483", "a step names a sequence more than once", field="ids",
                 expected="distinct ids", actual=order)
        if not order:
            return {}
        new = {i: self._check_tokens(i, batch[i]) for i in order}
        lengths = self._dca_lengths(order, new, prompt_lens or {})
        started = [i for i in order if i not in self._tokens]
        self._reserve(new)
        try:
            return self._run(order, new, logits, lengths)
        except BaseException:
            self.release(started)       # a failed step leaves no half-started sequence
            raise

    def _run(self, order: list[Hashable], new: dict[Hashable, list[int]], logits: str,
             dca_lengths: list[int] | None) -> dict[Hashable, torch.Tensor]:
        reqs = []
        for i in order:
            prefix = len(self._tokens[i])
            # Grow to the step's end, counted from the allocator's own total: after a step that
            # failed past this point it is already ahead, and must not drift further.
            end = prefix + len(new[i])
            row = self.allocator.grow(i, max(0, end - self.allocator.num_tokens(i)))
            reqs.append(Request(prefix_len=prefix, num_new=len(new[i]), block_table=row))
        meta = build_batch(reqs, page_size=self.page_size, device=self.device)
        step = self.backend.prepare(meta, self.cache)
        flat = torch.tensor([t for i in order for t in new[i]], dtype=torch.int64, device=self.device)
        ends = meta.query_start_loc[1:].to(torch.int64) - 1
        out = self.model.forward(flat, self.backend, self.cache, step,
                                 rows=ends if logits == "last" else None, dca_lengths=dca_lengths)
        for i in order:
            self._tokens[i].extend(new[i])
        if logits == "last":
            return {i: out[j:j + 1] for j, i in enumerate(order)}
        bounds = meta.query_start_loc.tolist()
        return {i: out[bounds[j]:bounds[j + 1]] for j, i in enumerate(order)}

    @torch.no_grad()
    @coded_args("AK483")
    def generate(self, prompts: Sequence[int] | Sequence[Sequence[int]], max_new_tokens: int, *,
                 eos_token_id: int | Sequence[int] | None = None) -> list[int] | list[list[int]]:
        """Greedy decoding of every prompt (through the ``Scheduler``, no token budget);
        returns the new tokens only (a list for one prompt given as a list of ints, else one
        list per prompt). A sequence stops at ``eos_token_id`` (kept in its output) or after
        ``max_new_tokens``. Sampling, budgets and stats: ``attnkit.runner.LLM``."""
        from attnkit.runner.sampling import SamplingParams
        from attnkit.runner.scheduler import Scheduler

        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Iterable):
            fail("AK483", f"prompts must be token ids or a list of token-id lists, got "
                          f"{preview(prompts)}", field="prompts",
                 expected="list[int] | list[list[int]]", actual=preview(prompts))
        items = list(prompts)
        single = bool(items) and token_id(items[0]) is not None
        batch = [items] if single else items          # each prompt is checked by sched.add
        check_count("max_new_tokens", max_new_tokens, minimum=0)
        params = SamplingParams(max_new_tokens=max_new_tokens,
                                stop_token_ids=stop_ids(eos_token_id, field="eos_token_id"))
        sched = Scheduler(self, max_num_batched_tokens=None, max_num_seqs=max(len(batch), 1))
        reqs = [sched.add(p, params) for p in batch]      # checked before anything runs
        for _ in sched.run():
            pass
        outputs = [r.output for r in reqs]
        return outputs[0] if single else outputs

    # -- checks -------------------------------------------------------------------------
    def _known(self, seq_id: Hashable) -> list[int]:
        check_id(seq_id, field="ids")
        if seq_id not in self._tokens:
            fail("AK483", f"no live sequence has id {seq_id!r} (live: {self.ids[:8]})",
                 field="ids", expected="a live sequence id", actual=seq_id)
        return self._tokens[seq_id]

    def _check_tokens(self, seq_id: Hashable, tokens: Sequence[int]) -> list[int]:
        vocab = self.model.arch.vocab_size
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
            after = len(self._tokens.get(i, ())) + len(new[i])
            length = prompt_lens.get(i, after)
            if not isinstance(length, int) or length < after:
                fail("AK483", f"sequence {i!r}: prompt length {length!r} is shorter than the "
                              f"{after} tokens it holds after this step", field="prompt_lens",
                     expected=f">= {after}", actual=length)
            out.append(length)
        return out

    def _reserve(self, new: dict[Hashable, list[int]]) -> None:
        """Give every sequence room for its new tokens, all or nothing."""
        need = 0
        for i, toks in new.items():
            held = len(self.allocator.row(i)) if i in self._tokens else 0
            total = len(self._tokens.get(i, ())) + len(toks)
            need += max(0, -(-total // self.page_size) - held)
        if need > self.allocator.num_free:
            fail("AK400", f"this step needs {need} more KV page(s) but only "
                          f"{self.allocator.num_free} of {self.allocator.num_pages} are free; "
                          "release finished sequences or build the engine with a larger max_tokens",
                 field="max_tokens", expected=f">= {need} free pages", actual=self.allocator.num_free)
        for i, toks in new.items():
            if i not in self._tokens:
                self.allocator.allocate(i, len(toks))
                self._tokens[i] = []


def _check_list(name: str, value: object, *, allow_none: bool = False) -> None:
    """AK483 unless ``value`` is a sized, non-text collection (list, tuple, tensor ...)."""
    if value is None and allow_none:
        return
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__") \
            or (torch.is_tensor(value) and value.dim() == 0):
        fail("AK483", f"{name} must be a list, got {preview(value)}", field=name,
             expected="a list" + (" or None" if allow_none else ""), actual=preview(value))
