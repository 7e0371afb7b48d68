"""A tensor-parallel group at work: rank 0's messages, every rank's load, and failures.

    group = launch.acquire(2, torch.device("cuda"), timeout=300.0)   # launch.py: the ranks
    with group.guard("a step"):             # rank 0: a failing rank -> AK482, never a hang
        group.send("step", key, payload)    # every other rank receives it (worker.py)
        ...                                 # the step's forward, with its collectives

Two groups: the model's collectives (NCCL or gloo; the layers' ``tp``) and a gloo control
group for rank 0's messages (pickled; a long timeout, since idle ranks wait in it between
requests). Each engine is a key on the other ranks; a dropped engine's key goes with the next
message.

Failures: a rank that fails reports its error in the store and exits; rank 0 then raises
AK482 naming it (gloo's collectives fail when a peer's connection closes; a watchdog thread
notices a dead rank or a step past ``timeout`` and aborts an NCCL group, whose kernels would
otherwise wait forever). After a failure the group is unusable (AK482 again) and the ranks
it started are stopped; a new engine starts a new group.
"""
from __future__ import annotations

import atexit
import itertools
import subprocess
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable

import torch

from attnkit.errors import AttnkitError, fail
from attnkit.runner.layers.parallel import TensorParallel

ERROR = "attnkit/error/"                  # store key prefix: a rank's last error


class RankGroup:
    """This process's place in a tensor-parallel group (made by launch.py): ``rank`` of
    ``size`` on ``device``; ``tp`` the layers' view (rank, size, model group); ``ctrl`` the
    control group; ``store`` the rendezvous store (errors); ``launched``: torchrun's group;
    ``procs``: the ranks this process started."""

    def __init__(self, *, rank: int, size: int, device: torch.device, ctrl, store,
                 timeout: float, launched: bool):
        self.rank, self.size, self.device = rank, size, device
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        self.tp = TensorParallel(rank, size)
        self.ctrl, self.store, self.timeout, self.launched = ctrl, store, timeout, launched
        self.procs: list[subprocess.Popen] = []   # the ranks this process started (1..N-1)
        self.failure: str | None = None           # why the group cannot be used any more
        self.busy_since: float | None = None      # rank 0 inside guard(): since when
        self.drops: list[int] = []                # keys of engines gone, told with the next message
        self.owned = not launched                 # torch.distributed's groups are ours to end
        self._keys = itertools.count()

    def new_key(self) -> int:
        """A fresh engine key (rank 0; the other ranks take it from the load message)."""
        return next(self._keys)

    def forget(self, key: int) -> None:
        """An engine on rank 0 is gone: its shards on the other ranks go with the next message
        (a finalizer may run in the middle of another message, so nothing is sent here)."""
        self.drops.append(key)

    # -- messages ------------------------------------------------------------------------
    def send(self, kind: str, key: int | None = None, payload: Any = None) -> None:
        """Rank 0: ``(kind, key, payload)`` to every other rank (inside ``guard``)."""
        import torch.distributed as dist

        drops, self.drops = self.drops, []
        dist.broadcast_object_list([(kind, key, payload, drops)], src=0, group=self.ctrl)

    def receive(self) -> tuple[str, Any, Any, list[int]]:
        """Ranks > 0: rank 0's next ``(kind, key, payload, drops)``."""
        import torch.distributed as dist

        box = [None]
        dist.broadcast_object_list(box, src=0, group=self.ctrl)
        return box[0]

    def gather(self, value: Any) -> list:
        """Every rank's ``value``, in rank order, on every rank (control group)."""
        import torch.distributed as dist

        out = [None] * self.size
        dist.all_gather_object(out, value, group=self.ctrl)
        return out

    def load(self, build: Callable[[], Any]) -> tuple[Any, AttnkitError | None]:
        """Every rank builds its shard (``build()``) at once and learns whether all did:
        (the shard, None), or (None, the error to raise: this rank's own, else the first
        failing rank's, with its code). A load that fails on every rank alike leaves the
        group usable."""
        try:
            result, status = build(), None
        except AttnkitError as err:
            result, status = None, (err.code, err.message, err.field)
        except Exception as exc:  # noqa: BLE001 - any failure of a rank's load is reported
            result, status = None, ("AK482", f"{type(exc).__name__}: {exc}", None)
        statuses = self.gather(status)
        bad = [(r, s) for r, s in enumerate(statuses) if s is not None]
        if not bad:
            return result, None
        r, (code, message, field) = next(((r, s) for r, s in bad if r == self.rank), bad[0])
        where = "" if r == self.rank else f"tensor-parallel rank {r}: "
        return None, AttnkitError(code, f"{where}{message}", field=field)

    # -- failures ------------------------------------------------------------------------
    @contextmanager
    def guard(self, what: str):
        """Rank 0: run ``what`` (messages and collectives) so that any failure on any rank
        ends it with AK482 and leaves the group marked unusable, never waiting forever."""
        self.check()
        self.busy_since = time.monotonic()
        try:
            yield
            self._settle()
        except BaseException as exc:
            ours = isinstance(exc, (AttnkitError, KeyboardInterrupt)) and not self.failure
            if not ours:
                self._await_exit()          # name the rank that died, if one did
            self.mark_failed(f"{what} failed ({type(exc).__name__}: {_short(exc)})")
            if ours:
                raise                       # rank 0's own coded error or Ctrl-C, as it is
            fail("AK482", self.failure, field="tp_size", actual=self.size)
        finally:
            self.busy_since = None

    def check(self) -> None:
        """AK482 if the group failed or a rank this process started has exited."""
        if not self.failure:
            self._check_procs(raise_=False)
        if self.failure:
            fail("AK482", f"the tensor-parallel group cannot run: {self.failure}; build a new "
                          "engine (LLM) to start new ranks", field="tp_size", actual=self.size)

    def report(self, exc: BaseException) -> None:
        """A rank > 0 failing: leave its error for rank 0 (best effort)."""
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, AttnkitError):
            text = str(exc)
        try:
            if self.store is not None:
                self.store.set(f"{ERROR}{self.rank}", text[:2000])
        except Exception:  # noqa: BLE001 - the store may be gone with rank 0
            pass

    def _reported(self, rank: int) -> str | None:
        try:
            if self.store is not None and self.store.check([f"{ERROR}{rank}"]):
                return self.store.get(f"{ERROR}{rank}").decode(errors="replace")
        except Exception:  # noqa: BLE001 - a store that cannot answer knows nothing
            pass
        return None

    def _check_procs(self, raise_: bool = True) -> None:
        for r, proc in enumerate(self.procs, start=1):
            code = proc.poll()
            if code is not None:
                self.mark_failed(f"tensor-parallel rank {r} of {self.size} exited (code {code})")
                if raise_:
                    fail("AK482", self.failure, field="tp_size", actual=self.size)
                return

    def _await_exit(self, seconds: float = 2.0) -> None:
        """After a failed collective: give a dying rank a moment to exit, so the error can
        name it (a closed connection is seen before the process is reaped)."""
        deadline = time.monotonic() + seconds
        while self.procs and time.monotonic() < deadline and self.failure is None:
            if any(p.poll() is not None for p in self.procs):
                self._check_procs(raise_=False)
                return
            time.sleep(0.01)

    def mark_failed(self, reason: str) -> None:
        """Mark the group unusable (the first reason stays; what a rank reported comes
        first) and stop the ranks it started."""
        if self.failure is None:
            said = next(((r, t) for r in range(self.size) if r != self.rank
                         for t in [self._reported(r)] if t), None)
            self.failure = reason if said is None else \
                f"tensor-parallel rank {said[0]} of {self.size} failed: {said[1]} ({reason})"
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        if self.backend == "nccl":                    # kernels waiting on a dead peer
            try:
                import torch.distributed as dist

                dist.distributed_c10d._abort_process_group()
            except Exception:  # noqa: BLE001 - nothing more can be done for a broken group
                pass

    def arm(self) -> None:
        """Stop at exit; on rank 0, run the watchdog."""
        atexit.register(self.close)
        if self.rank == 0:
            threading.Thread(target=self._watch, name="attnkit-tp-watchdog", daemon=True).start()

    def _watch(self) -> None:
        """Rank 0's watchdog: a rank that exits, or a guarded step past the timeout, fails
        the group (and aborts NCCL, so a host waiting on the device returns)."""
        while self.failure is None and (self.procs or self.launched):
            busy = self.busy_since
            if busy is not None and time.monotonic() - busy > self.timeout:
                self.mark_failed(f"a step took more than {self.timeout:g} s (tp_timeout)")
            elif busy is not None:
                self._check_procs(raise_=False)
            time.sleep(0.1)

    def _settle(self) -> None:
        """CUDA: wait for the step's kernels (its collectives) while watching the ranks."""
        if self.device.type != "cuda":
            return
        done = torch.cuda.Event()
        done.record()
        while not done.query():
            if self.failure:
                fail("AK482", self.failure, field="tp_size", actual=self.size)
            time.sleep(0.0001)

    def close(self) -> None:
        """Stop the ranks this process started and leave torch.distributed's groups."""
        import torch.distributed as dist

        if self.rank == 0 and self.procs and not self.failure and self.ctrl is not None:
            try:
                self.send("stop")
            except Exception:  # noqa: BLE001 - ranks already gone are stopped below
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.failure = self.failure or "the group was closed"
        if dist.is_initialized():
            try:                 # all groups if this module made them, else just its own
                dist.destroy_process_group(None if self.owned else self.ctrl)
            except Exception:  # noqa: BLE001 - a broken group may not tear down cleanly
                pass
        atexit.unregister(self.close)


def _short(exc: BaseException, limit: int = 160) -> str:
    """An exception's first line, cut (gloo's run long)."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return text if len(text) <= limit else text[:limit] + "..."
