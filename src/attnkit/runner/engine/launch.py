"""How the ranks of a tensor-parallel group come to exist: started here, joined from torchrun.

    group = acquire(2, torch.device("cuda"), timeout=300.0)    # start, join or reuse

Started from a plain process, this process is rank 0 and starts ranks 1..N-1 itself, each a
fresh ``python -m attnkit.runner.engine.worker`` (a re-exec: no fork of a CUDA process, no
re-import of the caller's ``__main__``), given torchrun's environment (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT) over a TCPStore this process hosts on 127.0.0.1; each
says it is up through the store before the groups form, so a rank that dies starting is
AK482, not a wait. Launched by torchrun (RANK and WORLD_SIZE set), every process joins
torchrun's group instead. Rank r runs on cuda:(base + r) (torchrun: cuda:LOCAL_RANK) or the
CPU. Every process gets NCCL_NVLS_ENABLE=0 (no NVLink multicast). One group lives per
process, as torch.distributed's default group does; a later engine of the same size, device
and timeout reuses it, one of another size stops it first.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch

from attnkit.errors import AttnkitError, fail
from attnkit.runner.engine.ranks import RankGroup

CONTROL_TIMEOUT = timedelta(days=30)      # idle ranks wait for rank 0's next message this long
START_TIMEOUT = 120.0                     # seconds a started rank may take to come up (at least)
BACKSTOP = 10.0                           # collectives time out this long after the watchdog's limit
READY = "attnkit/ready/"                  # store key prefix: a started rank is up
CHILD = "ATTNKIT_TP_CHILD"                # set in the ranks this module starts (rank 0's pid)

_CURRENT: RankGroup | None = None          # this process's group


def launched_by_torchrun() -> bool:
    """RANK and WORLD_SIZE in the environment, and not a rank this module started."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and CHILD not in os.environ


def acquire(size: int, device: torch.device, *, timeout: float) -> RankGroup:
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
            _CURRENT = _join(size, device, timeout)
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
    _CURRENT = _start(size, device, timeout)
    return _CURRENT


def _start(size: int, device: torch.device, timeout: float) -> RankGroup:
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
    group = RankGroup(rank=0, size=size, device=_rank_device(device.type, base, 0), ctrl=None,
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
                group.check()
                if time.monotonic() > deadline:
                    fail("AK482", f"tensor-parallel rank {r} did not start within {wait:g} s",
                         field="tp_size", expected="every rank up", actual=size)
                time.sleep(0.01)
        dist.init_process_group(group.backend, store=dist.PrefixStore("pg", store), rank=0,
                                world_size=size, timeout=timedelta(seconds=timeout + BACKSTOP))
        group.ctrl = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
    except BaseException as exc:
        group.mark_failed(f"starting the ranks failed ({type(exc).__name__}: {exc})")
        group.close()
        if isinstance(exc, AttnkitError):
            raise
        fail("AK482", group.failure, field="tp_size", actual=size)
    group.arm()
    return group


def _join(size: int, device: torch.device, timeout: float) -> RankGroup:
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
    group = RankGroup(rank=rank, size=size, device=device, store=store, timeout=timeout,
                launched=True, ctrl=dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT))
    group.owned = owned
    group.arm()
    return group


def connect_worker() -> RankGroup:
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
    group = RankGroup(rank=rank, size=size, device=device, ctrl=None, store=store,
                timeout=timeout, launched=False)
    dist.init_process_group(group.backend, store=dist.PrefixStore("pg", store), rank=rank,
                            world_size=size, timeout=timedelta(seconds=timeout + BACKSTOP))
    group.ctrl = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
    return group


def _rank_device(kind: str, base: int, rank: int) -> torch.device:
    return torch.device("cuda", base + rank) if kind == "cuda" else torch.device("cpu")
