"""The one generation loop: requests in, continuous batching (scheduler.py) until every one
finishes, records out. ``LLM.generate`` (sampling, budgets, progress, stats) and the greedy
shortcut ``Engine.generate`` both run it.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Callable, Sequence as Seq

from attnkit.errors import fail
from attnkit.runner.engine.checks import check_count, preview
from attnkit.runner.engine.sampling import SamplingParams
from attnkit.runner.engine.scheduler import Scheduler
from attnkit.runner.engine.sequence import Sequence
from attnkit.runner.engine.stats import RunStats
from attnkit.runner.engine.tokens import stop_ids, token_id


def generate(engine, prompts: Seq[Seq[int]], params: Seq[SamplingParams], *,
             max_num_batched_tokens: int | None, max_num_seqs: int,
             on_step: Callable[[list[Sequence]], None] | None = None
             ) -> tuple[list[Sequence], RunStats]:
    """Run every prompt to its end with its params; (the requests' records, in order, and the
    run's stats). ``on_step(records)`` after every step. Every request is checked before
    anything runs; on an error every sequence of the run is released before it propagates."""
    sched = Scheduler(engine, max_num_batched_tokens=max_num_batched_tokens,
                      max_num_seqs=max_num_seqs)
    reqs = [sched.add(p, sp) for p, sp in zip(prompts, params)]
    for _ in sched.run(None if on_step is None else lambda done: on_step(reqs)):
        pass
    return reqs, sched.stats


def greedy(engine, prompts, max_new_tokens: int, *, eos_token_id=None):
    """``Engine.generate``: greedy new tokens of one prompt (a list of ints) or of each prompt."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Iterable):
        fail("AK483", f"prompts must be token ids or a list of token-id lists, got "
                      f"{preview(prompts)}", field="prompts",
             expected="list[int] | list[list[int]]", actual=preview(prompts))
    items = list(prompts)
    single = bool(items) and token_id(items[0]) is not None
    batch = [items] if single else items          # each prompt is checked by Scheduler.add
    check_count("max_new_tokens", max_new_tokens, minimum=0)
    params = SamplingParams(max_new_tokens=max_new_tokens,
                            stop_token_ids=stop_ids(eos_token_id, field="eos_token_id"))
    reqs, _ = generate(engine, batch, [params] * len(batch), max_num_batched_tokens=None,
                       max_num_seqs=max(len(batch), 1))
    outputs = [r.output for r in reqs]
    return outputs[0] if single else outputs
