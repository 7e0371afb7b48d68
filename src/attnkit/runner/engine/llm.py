"""``LLM``: load a checkpoint once, generate for many prompts (continuous batching).

    llm = LLM("/models/tiny-llama", device="cuda", attention_backend="triton", max_tokens=65536)
    outs = llm.generate([[1, 5, 9], [1, 7]], max_new_tokens=32, temperature=0.8, top_p=0.95,
                        seed=0)
    outs[0].token_ids, outs[0].finish_reason, outs[0].stats.ttft_s, llm.last_stats.decode_tok_s

Planning keywords are ``attnkit plan``'s settings (attention_backend, page_size,
kv_cache_dtype, cuda_graph, ...), checked by the planner exactly as for ``attnkit plan``;
``llm.plan`` is the Plan the engine runs. ``LLM.generate`` is the generation API (one loop:
generation.py); decode steps replay CUDA graphs where the plan turns them on
(``cuda_graph``: "auto" by default, "on", "off"), captured when the LLM is built.

``tp_size=N`` runs the model over N tensor-parallel ranks (engine/launch.py, ranks.py):
this process is rank 0 and starts the others, or, launched by torchrun, every rank builds the
LLM and calls ``generate`` with the same arguments: rank 0 schedules and samples, the others
follow its steps, and every rank returns rank 0's outputs.
"""
from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Hashable, Sequence, TextIO

import torch

from attnkit.backends.base import AttentionBackend
from attnkit.errors import AttnkitError, fail
from attnkit.planning.request import PlanRequest
from attnkit.runner.engine.checks import check_count, coded_args, device_of
from attnkit.runner.engine.engine import Engine
from attnkit.runner.engine.generation import generate
from attnkit.runner.engine.setup import SPELLINGS, runner_request
from attnkit.runner.engine.progress import ProgressBar
from attnkit.runner.engine.sampling import SEED_MAX, SamplingParams
from attnkit.runner.engine.stats import RequestStats, RunStats
from attnkit.runner.engine.tokens import stop_ids
from attnkit.runner.models.weights import read_json

# attnkit plan's settings, by the request's own field names (dtype is LLM's own keyword)
PLAN_FLAGS = tuple(f.name for f in fields(PlanRequest) if f.name not in ("sources", "dtype"))
ENGINE_FLAGS = ("backend_options", "tp_timeout")       # Engine.from_pretrained options


@dataclass(slots=True)
class Output:
    """One prompt's result: the new tokens only; finish_reason "stop" or "length"."""
    request_id: Hashable
    prompt_token_ids: list[int]
    token_ids: list[int]
    finish_reason: str
    stats: RequestStats

    def to_dict(self) -> dict:
        return {"request_id": self.request_id, "prompt_token_ids": self.prompt_token_ids,
                "token_ids": self.token_ids, "finish_reason": self.finish_reason,
                "stats": self.stats.to_dict()}


class LLM:
    """model: a local model directory or an in-memory transformers model.
    device: "auto" is CUDA when torch sees a GPU (the current one), else the CPU; "cuda:N" plans
    for GPU N. dtype: "auto" (the default) is the planner's (the config's dtype; fp16 where the
    GPU has no bf16), as ``attnkit plan`` says it; or a name / torch dtype.
    max_tokens: KV-cache room over all running requests (a request that cannot fit alone is
    refused, AK485; others wait or are preempted).
    request: ``attnkit plan``'s settings as a PlanRequest or dict (the keywords are set over it).
    max_num_batched_tokens / max_num_seqs: the scheduler's per-step limits (defaults for
    ``generate``; max_num_seqs also sizes the largest decode graph). progress: True (stderr)
    or a stream for the line about captured decode graphs. plan_flags: ``attnkit plan``'s
    settings (``tp_size`` among them; ``backend``, ``prefill_backend``, ``decode_backend`` spell
    the backend ones), plus ``backend_options`` and ``tp_timeout``; ``attention_backend`` may
    also be an AttentionBackend object (used unchecked). They are parsed once into the plan
    request the engine hands the planner."""

    @coded_args("AK487")
    def __init__(self, model: Any, *, request: PlanRequest | dict | None = None,
                 device: str | torch.device = "auto",
                 dtype: str | torch.dtype = "auto", max_tokens: int = 4096,
                 max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                 progress: bool | TextIO = False, **plan_flags: Any):
        check_count("max_num_batched_tokens", max_num_batched_tokens, minimum=1, code="AK486")
        check_count("max_num_seqs", max_num_seqs, minimum=1, code="AK486")
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dev = device_of(device)
        request, options = plan_request(plan_flags, dtype, request)
        _check_progress(progress)
        stream = None if progress is False else (sys.stderr if progress is True else progress)
        self.engine = Engine.from_pretrained(model, request=request, device=dev,
                                             max_tokens=max_tokens, max_num_seqs=max_num_seqs,
                                             progress=stream, **options)
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.eos_token_ids = default_eos(model)
        self.last_stats: RunStats | None = None

    @property
    def plan(self):
        """The Plan that chose the engine's backends (None with a backend object)."""
        return self.engine.plan

    @property
    def rank(self) -> int:
        """This process's tensor-parallel rank (0 without tensor parallelism)."""
        return 0 if self.engine.ranks is None else self.engine.ranks.rank

    @torch.no_grad()
    @coded_args("AK487")
    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int = 16,
                 temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                 seed: int | Sequence[int] | None = None,
                 eos_token_id: int | Sequence[int] | None = None, ignore_eos: bool = False,
                 max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
                 progress: bool | TextIO = False) -> list[Output]:
        """One Output per prompt, in order. temperature 0 is greedy; otherwise request i
        samples with seed ``seed + i`` (or ``seed[i]``; None: a fresh seed, in its stats), so
        its tokens do not depend on the other prompts. eos_token_id: None uses the
        checkpoint's (generation_config.json, else config.json); ignore_eos runs every
        request to max_new_tokens. progress: True (stderr) or a stream for a progress bar.
        Run totals (prefill / decode tokens per second) land in ``self.last_stats``.
        An unknown keyword is AK487 (did you mean ...), as for ``LLM()``. Under torchrun
        every rank calls this with the same arguments and returns rank 0's outputs."""
        ranks = self.engine.ranks
        run = lambda: self._generate(prompts, max_new_tokens=max_new_tokens,  # noqa: E731
                                     temperature=temperature, top_p=top_p, top_k=top_k,
                                     seed=seed, eos_token_id=eos_token_id, ignore_eos=ignore_eos,
                                     max_num_batched_tokens=max_num_batched_tokens,
                                     max_num_seqs=max_num_seqs, progress=progress)
        if ranks is not None and ranks.launched:
            return self._launched(ranks, run)
        return run()

    def _launched(self, ranks, run) -> list[Output]:
        """One generate call of every torchrun rank: rank 0 runs it and ends it with its
        outputs (or its error), which every other rank, following its steps, returns."""
        key = self.engine.rank_key
        if ranks.rank:
            from attnkit.runner.engine.worker import serve

            _, _, (outputs, stats, error) = serve(ranks, {key: self.engine}, until=("end",))
            if error is not None:
                raise AttnkitError(*error)
            self.last_stats = stats
            return outputs
        try:
            outputs = run()
        except AttnkitError as err:
            if not ranks.failure:
                with ranks.guard("ending a generate call"):
                    ranks.send("end", key, (None, None, (err.code, err.message)))
            raise
        with ranks.guard("ending a generate call"):
            ranks.send("end", key, (outputs, self.last_stats, None))
        return outputs

    def _generate(self, prompts, *, max_new_tokens, temperature, top_p, top_k, seed,
                  eos_token_id, ignore_eos, max_num_batched_tokens, max_num_seqs,
                  progress) -> list[Output]:
        prompts = _prompt_lists(prompts)
        if not isinstance(ignore_eos, bool):
            fail("AK486", f"ignore_eos must be True or False, got {ignore_eos!r}",
                 field="ignore_eos", expected="bool", actual=repr(ignore_eos))
        _check_progress(progress)
        seeds = _seeds(seed, len(prompts))
        stop = () if ignore_eos else stop_ids(
            self.eos_token_ids if eos_token_id is None else eos_token_id, field="eos_token_id")
        params = [SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=s,
                                 max_new_tokens=max_new_tokens, stop_token_ids=stop) for s in seeds]
        bar = None if progress is False else ProgressBar(
            len(prompts), stream=None if progress is True else progress)

        def on_step(records: list) -> None:
            if bar is not None:
                bar.update(sum(r.finish_reason is not None for r in records),
                           sum(len(r.output) for r in records))

        try:
            records, stats = generate(
                self.engine, prompts, params, on_step=on_step,
                max_num_batched_tokens=self.max_num_batched_tokens
                if max_num_batched_tokens is None else max_num_batched_tokens,
                max_num_seqs=self.max_num_seqs if max_num_seqs is None else max_num_seqs)
        finally:
            if bar is not None:
                bar.close()
        self.last_stats = stats
        return [Output(r.request_id, list(r.prompt), list(r.output), r.finish_reason, r.stats)
                for r in records]


def plan_request(flags: dict[str, Any], dtype: Any, request: Any = None
                 ) -> tuple[PlanRequest, dict[str, Any]]:
    """``LLM``'s ``request`` and keywords as (the plan request, parsed once; the other
    ``Engine.from_pretrained`` keywords). AK306 on junk values, AK487 on settings the runner
    cannot honour or names it does not know."""
    known = PLAN_FLAGS + tuple(SPELLINGS) + ENGINE_FLAGS
    unknown = sorted(set(flags) - set(known))
    if unknown:
        hints = [m for u in unknown for m in difflib.get_close_matches(u, known, n=1)]
        fail("AK487", f"unknown keyword(s) {', '.join(unknown)}"
                      + (f"; did you mean {', '.join(hints)}?" if hints else ""),
             field="plan_flags", expected=list(known), actual=unknown)
    plan_flags = {k: v for k, v in flags.items() if k not in ENGINE_FLAGS}
    obj = next((plan_flags.pop(k) for k in ("attention_backend", "backend")
                if isinstance(plan_flags.get(k), AttentionBackend)), None)
    req = runner_request(request, dtype=None if isinstance(dtype, str) and dtype == "auto" else dtype,
                         **plan_flags)
    for name, off in (("speculative_tokens", 0), ("deny", ())):
        value = getattr(req, name)
        if value not in (None, off):
            fail("AK487", f"the runner does not support {name}={value!r} (no speculative "
                          "decoding, no deny list)", field=name, expected=off, actual=value)
    engine = {k: flags[k] for k in ENGINE_FLAGS if k in flags}
    return req, {**engine, "backend": obj}


def default_eos(source: Any) -> tuple[int, ...]:
    """The checkpoint's end-of-sequence ids: generation_config's, else config's (or none)."""
    if isinstance(source, (str, Path)):
        for name in ("generation_config.json", "config.json"):
            f = Path(source).expanduser() / name
            found = read_json(f).get("eos_token_id") if f.is_file() else None
            if found is not None:
                return stop_ids(found, field=f"{name}: eos_token_id")
        return ()
    gen = getattr(source, "generation_config", None)
    found = getattr(gen, "eos_token_id", None)
    return stop_ids(found if found is not None else getattr(getattr(source, "config", None),
                                                           "eos_token_id", None),
                    field="eos_token_id")


def _check_progress(progress: Any) -> None:
    if not (isinstance(progress, bool) or callable(getattr(progress, "write", None))):
        fail("AK486", f"progress must be True, False or a stream, got {progress!r}",
             field="progress", expected="bool | TextIO", actual=repr(progress))


def _prompt_lists(prompts: Any) -> list:
    """``prompts`` as a list of prompts, each a non-text collection of token ids (AK486);
    the ids themselves are checked when each request is added (AK483)."""
    ok = not isinstance(prompts, (str, bytes)) and isinstance(prompts, Iterable)
    items = list(prompts) if ok else []
    for p in items:
        if isinstance(p, (str, bytes)) or not isinstance(p, Iterable) or (
                torch.is_tensor(p) and p.dim() != 1):
            ok = False
    if not ok:
        fail("AK486", "prompts must be a list of token-id lists (tokenize text first; wrap one "
                      "prompt: [prompt])", field="prompts", expected="list[list[int]]",
             actual=repr(prompts)[:60])
    return items


def _seeds(seed: int | Sequence[int] | None, n: int) -> list[int | None]:
    if seed is None:
        return [None] * n
    if isinstance(seed, Sequence) and not isinstance(seed, str):
        if len(seed) != n:
            fail("AK486", f"{len(seed)} seed(s) for {n} prompt(s)", field="seed",
                 expected=f"one seed or {n} seeds", actual=len(seed))
        return list(seed)                       # each is checked by SamplingParams
    check_count("seed", seed, minimum=0, maximum=SEED_MAX, code="AK486")
    return [int(seed) + i for i in range(n)]
