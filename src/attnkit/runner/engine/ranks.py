"""Tensor-parallel ranks on torch.distributed: one process per GPU (NCCL) or CPU process (gloo).

    group = RankGroup.acquire(2, torch.device("cuda"), timeout=300.0)   # start, join or reuse
    with group.guard("a step"):             # rank 0: a failing rank -> AK482, never a hang
        group.send("step", key, payload)    # every other rank receives it (worker.py)
        ...                                 # the step's forward, with its collectives

Started from a plain process, this process is rank 0 and starts ranks 1..N-1 itself, each a
fresh ``python -m attnkit.runner.engine.worker`` (a re-exec: no fork of a CUDA process, no
re-import of the caller's ``__main__``), given torchrun's environment (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT) over a TCPStore this process hosts on 127.0.0.1.
Launched by torchrun (RANK and WORLD_SIZE set), every process joins torchrun's group
instead. Rank r runs on cuda:(base + r) (torchrun: cuda:LOCAL_RANK) or the CPU. Every
process gets NCCL_NVLS_ENABLE=0 (no NVLink multicast).

Two groups: the model's collectives (NCCL or gloo, ``timeout``) and a gloo control group for
rank 0's messages (pickled; a long timeout, since idle ranks wait in it between requests).
One group lives per process, as torch.distributed's default group does; a later engine of
the same size and device reuses it (each engine is a key on the other ranks).

Failures: a rank that fails reports its error in the store and exits; rank 0 then raises
AK482 naming it (gloo's collectives fail when a peer's connection closes; a watchdog thread
notices a dead rank or a step past ``timeout`` and aborts an NCCL group, whose kernels would
otherwise wait forever). After a failure the group is unusable (AK482 again) and the other
ranks are stopped; a new engine starts a new group.
"""
from __future__ import annotations

import atexit
import itertools
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch

from attnkit.errors import AttnkitError, fail
from attnkit.runner.layers.parallel import TensorParallel

CONTROL_TIMEOUT = timedelta(days=30)      # idle ranks wait for rank 0's next message this long
START_TIMEOUT = 120.0                     # seconds a started rank may take to come up (at least)
BACKSTOP = 10.0                           # collectives time out this long after the watchdog's limit
READY = "attnkit/ready/"
ERROR = "attnkit/error/"
CHILD = "ATTNKIT_TP_CHILD"                # set in the ranks this module starts
_CURRENT: "RankGroup | None" = None


def launched_by_torchrun() -> bool:
    """RANK and WORLD_SIZE in the environment, and not a rank this module started."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and CHILD not in os.environ


class RankGroup:
    """This process's place in a tensor-parallel group: ``rank`` of ``size`` on ``device``;
    ``tp`` the layers' view (rank, size, model group); ``launched``: torchrun's group."""

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

    # -- starting, joining, reusing ----------------------------------------------------
    @classmethod
    def acquire(cls, size: int, device: torch.device, *, timeout: float) -> "RankGroup":
        """The group for ``size`` ranks on ``device``'s kind: the live one of this process,
        torchrun's, or N - 1 new ranks (AK483 for a device or size that cannot be served)."""
        global _CURRENT
        if device.type not in ("cuda", "cpu"):
            fail("AK483", f"tensor parallelism runs on CUDA (NCCL) or the CPU (gloo), not "
                          f"{device.type}", field="device", expected="cuda | cpu", actual=str(device))
        if launched_by_torchrun():
            world = int(os.environ["WORLD_SIZE"])
            if world != size:
                fail("AK483", f"launched by torchrun with WORLD_SIZE={world}: tp_size must equal "
                              f"it, got {size} (tensor parallelism over part of the world is not "
                              "run)", field="tp_size", expected=world, actual=size)
            if _CURRENT is None or _CURRENT.failure:
                _CURRENT = cls._join(size, device, timeout)
            return _CURRENT
        base = device.index or 0
        if device.type == "cuda" and base + size > torch.cuda.device_count():
            fail("AK483", f"tp_size {size} from {device} needs GPUs {base}..{base + size - 1}; "
                          f"torch sees {torch.cuda.device_count()}", field="tp_size",
                 expected=f"<= {torch.cuda.device_count() - base}", actual=size)
        here = _CURRENT
        if here is not None and not here.failure and here.size == size and here.timeout == timeout \
                and here.device == _rank_device(device.type, base, 0):
            return here
        if here is not None:
            here.close()
        _CURRENT = cls._start(size, device, timeout)
        return _CURRENT

    @classmethod
    def _start(cls, size: int, device: torch.device, timeout: float) -> "RankGroup":
        import torch.distributed as dist

        if dist.is_initialized():
            fail("AK483", "torch.distributed is already initialised in this process, and not by "
                          "torchrun (RANK / WORLD_SIZE unset): attnkit cannot start its ranks "
                          "beside that group; launch with torchrun, or leave the group first",
                 field="tp_size", expected="no process group, or torchrun's", actual=size)
        os.environ["NCCL_NVLS_ENABLE"] = "0"
        store = dist.TCPStore("127.0.0.1", 0, size, True, wait_for_workers=False,
                              timeout=timedelta(seconds=max(timeout, START_TIMEOUT)))
        base = device.index or 0
        env = {**os.environ, CHILD: str(os.getpid()), "WORLD_SIZE": str(size),
               "LOCAL_WORLD_SIZE": str(size), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(store.port), "NCCL_NVLS_ENABLE": "0",
               "ATTNKIT_TP_DEVICE": f"{device.type}:{base}", "ATTNKIT_TP_TIMEOUT": str(timeout),
               "ATTNKIT_TP_THREADS": str(torch.get_num_threads()),
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3])]
                                             + [p for p in [os.environ.get("PYTHONPATH")] if p])}
        group = cls(rank=0, size=size, device=_rank_device(device.type, base, 0), ctrl=None,
                    store=store, timeout=timeout, launched=False)
        try:
            for r in range(1, size):
                group.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "attnkit.runner.engine.worker"],
                    env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}))
            if group.device.type == "cuda":
                torch.cuda.set_device(group.device)
            wait = max(timeout, START_TIMEOUT)        # python + torch imports on a busy host
            deadline = time.monotonic() + wait
            for r in range(1, size):                  # each rank says it is up, or dies
                while not store.check([f"{READY}{r}"]):
                    group._check_procs()
                    if time.monotonic() > deadline:
                        fail("AK482", f"tensor-parallel rank {r} did not start within {wait:g} s",
                             field="tp_size", expected="every rank up", actual=size)
                    time.sleep(0.01)
            dist.init_process_group(group.backend, store=dist.PrefixStore("pg", store), rank=0,
                                    world_size=size, timeout=timedelta(seconds=timeout + BACKSTOP))
            group.ctrl = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
        except BaseException as exc:
            group._fail(f"starting the ranks failed ({type(exc).__name__}: {exc})")
            group.close()
            if isinstance(exc, AttnkitError):
                raise
            fail("AK482", group.failure, field="tp_size", actual=size)
        atexit.register(group.close)
        threading.Thread(target=group._watch, name="attnkit-tp-watchdog", daemon=True).start()
        return group

    @classmethod
    def _join(cls, size: int, device: torch.device, timeout: float) -> "RankGroup":
        """torchrun's group (or one the caller initialised): this process is RANK."""
        import torch.distributed as dist

        os.environ["NCCL_NVLS_ENABLE"] = "0"
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
        device = _rank_device(device.type, local, 0)
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        owned = not dist.is_initialized()
        if owned:
            dist.init_process_group(backend, init_method="env://", rank=rank, world_size=size,
                                    timeout=timedelta(seconds=timeout + BACKSTOP))
        elif dist.get_backend() != backend:
            fail("AK483", f"torch.distributed is initialised with {dist.get_backend()}; "
                          f"tensor parallelism on {device.type} needs {backend}",
                 field="device", expected=backend, actual=dist.get_backend())
        try:
            store = dist.distributed_c10d._get_default_store()
        except (AttributeError, RuntimeError, ValueError):
            store = None                              # errors then name the rank, not its cause
        group = cls(rank=rank, size=size, device=device, store=store, timeout=timeout,
                    launched=True, ctrl=dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT))
        group.owned = owned
        atexit.register(group.close)
        if rank == 0:
            threading.Thread(target=group._watch, name="attnkit-tp-watchdog", daemon=True).start()
        return group

    @classmethod
    def connect_worker(cls) -> "RankGroup":
        """In a rank started by ``_start`` (worker.py): join rank 0's store and groups."""
        import torch.distributed as dist

        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        timeout = float(os.environ["ATTNKIT_TP_TIMEOUT"])
        kind, base = os.environ["ATTNKIT_TP_DEVICE"].split(":")
        torch.set_num_threads(int(os.environ["ATTNKIT_TP_THREADS"]))
        device = _rank_device(kind, int(base), rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), size,
                              False, timeout=timedelta(seconds=max(timeout, START_TIMEOUT)))
        store.set(f"{READY}{rank}", "1")
        group = cls(rank=rank, size=size, device=device, ctrl=None, store=store,
                    timeout=timeout, launched=False)
        dist.init_process_group(group.backend, store=dist.PrefixStore("pg", store), rank=rank,
                                world_size=size, timeout=timedelta(seconds=timeout + BACKSTOP))
        group.ctrl = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
        return group

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
            self._fail(f"{what} failed ({type(exc).__name__}: {_short(exc)})")
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
                self._fail(f"tensor-parallel rank {r} of {self.size} exited (code {code})")
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

    def _fail(self, reason: str) -> None:
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

    def _watch(self) -> None:
        """Rank 0's watchdog: a rank that exits, or a guarded step past the timeout, fails
        the group (and aborts NCCL, so a host waiting on the device returns)."""
        while self.failure is None and (self.procs or self.launched):
            busy = self.busy_since
            if busy is not None and time.monotonic() - busy > self.timeout:
                self._fail(f"a step took more than {self.timeout:g} s (tp_timeout)")
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
        global _CURRENT
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
        if _CURRENT is self:
            _CURRENT = None
        atexit.unregister(self.close)


def _short(exc: BaseException, limit: int = 160) -> str:
    """An exception's first line, cut (gloo's run long)."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return text if len(text) <= limit else text[:limit] + "..."


def _rank_device(kind: str, base: int, rank: int) -> torch.device:
    return torch.device("cuda", base + rank) if kind == "cuda" else torch.device("cpu")
