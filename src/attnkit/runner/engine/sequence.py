"""The one record of a sequence: its tokens, how many have KV in the cache, its pages, and
(for generation) how it samples and when it stops. The engine, the page allocator and the
scheduler all read and write this record; nothing else holds a sequence's state.

``prompt + output`` are its tokens; ``tokens[:computed]`` have KV in the cache, held in
``pages`` (its block-table row: token p sits in page ``pages[p // page_size]``). The tokens
past ``computed`` are pending: the next step runs (some of) them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

import torch

from attnkit.runner.engine.sampling import SamplingParams
from attnkit.runner.engine.stats import RequestStats


@dataclass(eq=False, slots=True)
class Sequence:
    seq_id: Hashable                   # the engine's id
    prompt: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    request_id: Hashable = None        # the caller's id (generation; default seq_id)
    order: int = 0                     # arrival rank: smaller is older
    stats: RequestStats | None = None
    generator: torch.Generator | None = None
    output: list[int] = field(default_factory=list)
    computed: int = 0                  # tokens with KV in the cache
    pages: list[int] = field(default_factory=list)
    finish_reason: str | None = None   # "stop" (a stop token) | "length" (max_new_tokens)
    owner: object | None = None        # the token of the Scheduler running it (None: the caller)

    def __post_init__(self):
        if self.request_id is None:
            self.request_id = self.seq_id

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def decoding(self) -> bool:
        """Past its prompt with exactly one token (the last sampled) still to run."""
        return self.computed >= len(self.prompt) and self.computed == self.num_tokens - 1

    def pending(self, n: int) -> list[int]:
        """The next ``n`` tokens to run."""
        c, p = self.computed, len(self.prompt)
        head = self.prompt[c:c + n] if c < p else []
        return head + self.output[max(0, c - p):max(0, c + n - p)]


class SequenceRegistry:
    """Every sequence an engine knows, in one table (its owner: the engine; the scheduler and
    the page allocator read and write the records, never a table of their own):

    - ``live``: engine id -> record, oldest first: the sequences with state in the cache
      (``Engine.ids``, ``admit``, ``free``);
    - the requests a Scheduler holds for its callers (queued, running, or finished and not yet
      returned), by (that scheduler's token, the caller's request id): a request id names one
      unfinished request per scheduler, and is free again once that request finishes.

    The engine's ids come from here (``new_ids``), never reissued while a record holds one.
    """

    def __init__(self):
        self.live: dict[Hashable, Sequence] = {}
        self._requests: dict[tuple[object, Hashable], Sequence] = {}
        self._next_id = 0

    def new_ids(self, count: int) -> list[int]:
        out = []
        while len(out) < count:
            if self._next_id not in self.live:
                out.append(self._next_id)
            self._next_id += 1
        return out

    # -- a scheduler's requests -------------------------------------------------------------
    def add_request(self, seq: Sequence) -> None:
        self._requests[(seq.owner, seq.request_id)] = seq

    def has_request(self, owner: object, request_id: Hashable) -> bool:
        return (owner, request_id) in self._requests

    def drop_request(self, seq: Sequence, owner: object) -> None:
        """Forget a request of ``owner`` (it finished or was aborted); no-op if not held."""
        self._requests.pop((owner, seq.request_id), None)

    def request_ids(self, owner: object) -> list[Hashable]:
        """The request ids ``owner`` holds unfinished."""
        return [rid for (o, rid) in self._requests if o is owner]

    def drop_owner(self, owner: object) -> None:
        """Forget every request of ``owner`` (a scheduler dropped without finishing them)."""
        for key in [k for k in self._requests if k[0] is owner]:
            del self._requests[key]
