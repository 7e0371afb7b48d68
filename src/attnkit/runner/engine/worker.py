"""A tensor-parallel rank > 0: follow rank 0's messages until it says stop.

    python -m attnkit.runner.engine.worker     # started by launch.py, never by hand

Messages (ranks.py ``send``): ("load", key, recipe) builds this rank's shard of an engine
(build.build_shard; every rank reports how its load went, RankGroup.load); ("step", key,
payload) runs one step of that engine (Engine.follow_step: rank 0's batch, with the same
collectives); ("stop", ...) ends the process. Each message also names engines rank 0
dropped. Under torchrun the ranks > 0 run ``serve`` inside ``LLM.generate`` until rank 0's
("end", ...). A failure is left in the store (rank 0 raises AK482 quoting it) and ends the
process; so does rank 0 going away.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

import torch

from attnkit.errors import fail


def serve(group, engines: dict[int, Any], *, until: tuple[str, ...] = ("stop",)):
    """Run rank 0's messages over ``engines`` (key -> this rank's Engine) until one whose
    kind is in ``until``; returns it as (kind, key, payload)."""
    from attnkit.runner.engine.build import build_shard
    from attnkit.runner.engine.engine import Engine

    while True:
        kind, key, payload, drops = group.receive()
        for k in drops:
            engines.pop(k, None)
        if kind == "load":
            engine, _ = group.load(lambda: build_shard(Engine, payload, group))
            if engine is not None:          # a failed load was reported to rank 0, which raises
                engines[key] = engine
        elif kind == "step":
            if key not in engines:
                fail("AK482", f"tensor-parallel rank {group.rank} holds no engine {key!r} for "
                              "rank 0's step", field="tp_size", actual=group.size)
            engines[key].follow_step(payload)
        elif kind in until:
            return kind, key, payload
        else:
            fail("AK482", f"tensor-parallel rank {group.rank} got a {kind!r} message it cannot "
                          "serve here (the ranks run different programs)", field="tp_size",
                 actual=group.size)


def _watch_parent(parent: int) -> None:
    """Exit when the process that started this rank is gone (no orphaned ranks)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main() -> None:
    from attnkit.runner.engine.launch import CHILD, connect_worker

    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C is rank 0's to handle
    threading.Thread(target=_watch_parent, args=(int(os.environ[CHILD]),), daemon=True).start()
    group = connect_worker()
    try:
        with torch.no_grad():
            serve(group, {})
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, then the rank ends
        group.report(exc)
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
    import torch.distributed as dist

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
