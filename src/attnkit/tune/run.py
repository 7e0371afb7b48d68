"""``attnkit tune``: time every usable backend on every bucket of a grid, write a device profile.

Per bucket one step is built (tune/case.py); per backend that serves it (the planner's own
check of its declaration): ``prepare`` and ``forward`` once, the output checked against the
float64 reference (a backend that fails is recorded as ``wrong`` and never timed), then
timed by the one method of tune/timing.py. The (backend, variant) pairs of a bucket whose rates lie
within NEAR of its fastest are then timed again in ROUNDS interleaved rounds (``settle``), and
each one's time is the median of its rounds and its first timing: a ranking between near-ties
is then not decided by one timing's luck. The profile is rewritten after every entry, so an
interrupted run keeps what it measured, and a re-run skips the (backend, bucket) pairs the
file already holds. The schema is planning/profile.py's (docs/profile.md).
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence, TextIO

import torch

from attnkit.errors import AttnkitError
from attnkit.model.spec import ModelAttention
from attnkit.planning.profile import Bucket, Entry, Profile, load_profile
from attnkit.planning.profile_search import cache_dir
from attnkit.planning.reasons import check_backend, model_needs
from attnkit.registry.kernels import KernelTable, takes_step, variant_misfits
from attnkit.tune import grid as grids
from attnkit.tune import case as paged_case
from attnkit.tune import varlen_case
from attnkit.tune.case import TOLERANCE
from attnkit.tune.environment import device_info, platform_for, slug, software
from attnkit.tune.timing import graphed, interleaved, measure

WARMUP, REPS, BUDGET_S = 3, 20, 0.5
SLOW_S = 2.0     # a call slower than this (after the first) is not timed: it is no contender
NEAR, ROUNDS = 0.10, 5      # within 10 % of a bucket's fastest: timed again in 5 interleaved rounds
RESUME_KEYS = {"device": ("kind", "name", "capability"), "software": ("attnkit", "torch", "triton"),
               "method": ("timer", "warmup", "reps", "l2_flush", "near_ties")}


def method(device: str) -> dict:
    return {"timer": "cuda-graph replay (and eager), CUDA events" if device == "cuda" else "wall clock",
            "what": "backend.forward, K/V write included; prepare once per step, outside the timing "
                    "(varlen buckets: backend.varlen, no KV cache)",
            "statistic": "median", "warmup": WARMUP if device == "cuda" else 1,
            "reps": REPS if device == "cuda" else 3, "budget_s": BUDGET_S, "slow_s": SLOW_S,
            "l2_flush": device == "cuda",
            "near_ties": {"within": NEAR, "rounds": ROUNDS, "statistic": "median of the rounds' medians "
                          "and the first timing"},
            "check": "attnkit.reference (float64) on sampled query rows, before timing",
            "tolerance": dict(TOLERANCE)}


def tune(*, device: str = "cuda", quick: bool = False, models: Sequence[ModelAttention] = (),
         out: str | os.PathLike | None = None, backends: Sequence[str] | None = None,
         env: Mapping[str, str] | None = None, stream: TextIO | None = None,
         command: str = "attnkit tune", shapes: Sequence | None = None,
         request=None, phases: Sequence[str] | None = None) -> tuple[Path, Profile]:
    """Measure and write the profile; returns (its path, the profile). ``models``: tune only
    their shapes, as ``plan(model, here, request)`` runs them (``request``: a PlanRequest or
    dict of what `attnkit plan` takes, handed to plan() unchanged); ``backends``: only these
    (canonical names); ``shapes``: this grid instead (``[(Shape, Runtime)]``, tune/grid.py);
    ``phases``: only these phases' buckets."""
    env = os.environ if env is None else env
    platform = platform_for(device)
    if shapes is None:
        shapes = grids.model_grid(models, device, quick, platform, request) if models else \
            grids.default_grid(device, quick)
    path = Path(out) if out else default_path(platform.name, device, env)
    head = {"device": device_info(platform), "software": software(), "method": method(device)}
    check_writable(path)                  # before anything is measured, not after the first entry
    old = resume(path, head)
    entries = list(old.entries) if old else []
    done = {e.key() for e in entries}
    from attnkit.registry import declarations
    registry = declarations()
    jobs = pending(shapes, registry, platform, backends, done, phases)
    again = {(n, b, k) for b, n, k in jobs}
    entries = [e for e in entries if e.key() not in again]     # timed again: this run's replaces it
    if not jobs and (not entries or not pending(shapes, registry, platform, backends, set(), phases)):
        # nothing this selection could time: refused whether or not a profile is being resumed
        raise AttnkitError("AK233", f"no backend to time on {platform.name}"
                           + (f" among {', '.join(backends)}" if backends else "")
                           + (f" for phase {', '.join(phases)}" if phases else "")
                           + (f" on the shapes of {', '.join(m.name for m in models)}" if models else ""),
                           field="backends", expected=sorted(registry), actual=list(backends or []))
    runs = (old.header.get("runs", []) if old else []) + [
        {"command": command, "started": _now(), "measured": len(jobs), "seconds": None}]
    bar = Progress(len(jobs), stream if stream is not None else sys.stderr)
    start, done_n, prof = time.perf_counter(), 0, None

    def keep(*new: Entry) -> None:
        """Put ``new`` into the profile (in place of an entry of the same key) and write it."""
        nonlocal prof
        by_key = {e.key(): e for e in new}
        entries[:] = [by_key.pop(e.key(), e) for e in entries] + list(by_key.values())
        runs[-1]["seconds"] = round(time.perf_counter() - start, 1)
        prof = write(path, head, entries, runs, smoke=device == "cpu")

    def measured(entry: Entry) -> None:
        nonlocal done_n
        keep(entry)
        done_n += 1
        bar.done(done_n, entry)

    for b in dict.fromkeys(b for b, _, _ in jobs):      # the buckets, in the jobs' order
        _free(device)
        case = case_module(b).make_case(b, device)
        # the settled times of the near-ties replace their first
        keep(*time_bucket(case, [(n, k) for jb, n, k in jobs if jb == b], device, on_entry=measured,
                          earlier=[e for e in entries if e.bucket == b and e.key() not in again]))
        case = None
    bar.close()
    if not jobs:
        prof = load_profile(path)
    return path, prof


def pending(shapes, registry, platform, backends: Sequence[str] | None, done: set,
            phases: Sequence[str] | None = None) -> list[tuple]:
    """(bucket, backend, variant) to measure: every variant each serving backend can run on each
    bucket of ``shapes`` (of ``phases`` only, if given) where the profile being resumed
    (``done``: Entry.key()s) lacks any of them. A bucket that lacks one variant has all of that
    backend's variants timed again, so the variants a kernel table ranks at one bucket are always
    timed in one run (a variant declared later, timed alone in another run, was compared with
    rates of a faster or slower day: the 16k prefill bucket of 2026-12-02 ranked gluon_rows over
    gluon by 675 against 588 from two runs, and bench_triton measured gluon 3 % ahead)."""
    jobs = []
    for b in grids.buckets(shapes):
        if phases and b.phase not in phases:
            continue
        for n in serving(b, registry, platform, backends):
            variants = variants_to_time(b, registry[n], platform)
            if any((n, b, k) not in done for k in variants):
                jobs += [(b, n, k) for k in variants]
    return jobs


def serving(b: Bucket, registry, platform, only: Sequence[str] | None) -> list[str]:
    """The backends whose declarations serve bucket ``b`` here (the planner's check; a varlen
    bucket: a non-causal layer's prefill, by the backends declaring the varlen call)."""
    model = ModelAttention(name=f"bucket {b.label()}", architecture="attnkit-tune",
                           layers=(case_module(b).layer_spec(b.shape),), dtype=b.shape.dtype)
    needs = model_needs(model)
    settings = {"dtype": b.shape.dtype, "kv_cache_dtype": b.shape.kv_dtype, "page_size": b.page_size,
                "speculative_tokens": 0, "cuda_graph": False}
    phase = "prefill" if b.phase == "varlen" else b.phase
    return [n for n, d in sorted(registry.items())
            if (n in only if only else not d.explicit_only)
            and (b.phase != "varlen" or "varlen" in d.capabilities.features)
            and not check_backend(d, model=model, needs=needs, platform=platform, phase=phase, settings=settings)]


def pairs_for(b: Bucket, registry, platform, only: Sequence[str] | None = None) -> list[tuple[str, str | None]]:
    """Every (backend, variant) that can run bucket ``b`` here: the serving backends' runnable
    variants (``serving``, ``variants_to_time``), each a candidate of its own."""
    return [(n, k) for n in serving(b, registry, platform, only) for k in variants_to_time(b, registry[n], platform)]


def case_module(b: Bucket):
    """How a bucket becomes a call: tune/case.py (a paged step) or tune/varlen_case.py."""
    return varlen_case if b.phase == "varlen" else paged_case


def role_of(b: Bucket) -> str:
    """The plan role a bucket measures: decode, a fresh prefill, an extend over a prefix, or
    the varlen call."""
    if b.phase in ("decode", "varlen"):
        return b.phase
    return "prefill" if b.prefix == 0 else "extend"


def variants_to_time(b: Bucket, decl, platform) -> list[str | None]:
    """The backend's kernel variants that can run bucket ``b`` here (each is timed on its own),
    or [None] for a backend with one kernel."""
    if not decl.variants:
        return [None]
    facts = dict(dtype=b.shape.dtype, kv_dtype=b.shape.kv_dtype, head_dim=b.shape.head_dim,
                 heads=b.shape.heads, page_size=b.page_size, features=frozenset(),
                 causal=b.phase != "varlen")
    return [k.name for k in decl.variants_for(role_of(b))
            if not variant_misfits(k, platform=platform, **facts)
            and takes_step(k, num_reqs=b.batch, has_prefix=b.prefix > 0)]


def backend_for(b: Bucket, name: str, variant: str | None):
    """Backend ``name`` built to run only kernel ``variant`` (None: its one kernel)."""
    from attnkit.registry import load_backend
    options = {} if variant is None else {"kernels": {role_of(b): KernelTable.only(role_of(b), variant)}}
    return load_backend(name, **options)


def time_bucket(case, candidates: Sequence[tuple[str, str | None]], device: str, *, on_entry=None,
                earlier: Sequence[Entry] = ()) -> list[Entry]:
    """Check and time each (backend, variant) of ``candidates`` on ``case`` (``on_entry`` is
    called with each entry as it is measured), then settle the near-ties among them and
    ``earlier`` (the bucket's entries a resumed profile already holds: measured the same way,
    on another run); the entries, ``earlier``'s included (those it settled with new times)."""
    got = []
    for name, variant in candidates:
        got.append(measure_entry(case, backend_for(case.bucket, name, variant), device, variant=variant))
        if on_entry is not None:
            on_entry(got[-1])
    return settle(case, list(earlier) + got, device)


def near_ties(entries: Sequence[Entry]) -> dict[str, list[Entry]]:
    """method -> the ``ok`` entries to settle by it: those within NEAR of the bucket's fastest
    (the backends' ranking) and, per backend, its variants within NEAR of its fastest variant
    (the order of its kernel table), each group timed by the ranking's method: graph replays
    where every timed entry of the group has one (planning/measured.rank), else eager."""
    ok = [e for e in entries if e.status == "ok" and (e.graph_ms or e.eager_ms)]
    groups = [ok] + [[e for e in ok if e.backend == n] for n in dict.fromkeys(e.backend for e in ok)]
    out: dict[str, list[Entry]] = {}
    for group in groups:
        how = "graph" if group and all(e.graph_ms for e in group) else "eager"
        rated = [e for e in group if e.rate(how)]
        if len(rated) < 2:
            continue
        best = max(e.rate(how) for e in rated)
        ties = [e for e in rated if e.rate(how) >= (1 - NEAR) * best]
        if len(ties) > 1:
            out.setdefault(how, [])
            out[how] += [e for e in ties if e not in out[how]]
    return out


def settle(case, entries: list[Entry], device: str) -> list[Entry]:
    """``entries`` with their near-ties (``near_ties``) timed again: ROUNDS interleaved rounds
    (tune/timing.interleaved), each one's time the median of its rounds and its first timing.
    A tie whose call cannot be built again (or captured again) keeps its first timing, and its
    note says why; so do all of a group whose rounds failed."""
    settled: dict[tuple, Entry] = {}
    for how, ties in near_ties(entries).items():
        field = "graph_ms" if how == "graph" else "eager_ms"
        calls, kept = [], []
        for e in ties:
            e = settled.get(e.key(), e)
            e = replace(e, note=e.note.split("; near-tie")[0])   # a resumed entry: settled anew
            try:
                fwd = _forward(case, backend_for(case.bucket, e.backend, e.variant))
                run, note = graphed(fwd) if how == "graph" and device == "cuda" else (fwd, None)
            except Exception as exc:  # noqa: BLE001 - it ran once; the first timing stands
                run, note = None, f"{type(exc).__name__}: {_first_line(exc)}"
            if note is None:
                calls.append(run)
                kept.append(e)
            else:
                settled[e.key()] = replace(e, note=f"{e.note}; near-tie not settled ({note})")
        try:
            rounds = interleaved(calls, device, rounds=ROUNDS) if len(kept) > 1 else None
        except Exception as exc:  # noqa: BLE001 - the group keeps its first timings, noted
            rounds = None
            for e in kept:
                settled[e.key()] = replace(e, note=f"{e.note}; near-tie not settled "
                                                   f"({type(exc).__name__}: {_first_line(exc)})")
        finally:
            calls = []
            _free(device)
        for e, times in zip(kept, rounds or ()):
            every = sorted(times + [getattr(e, field)])
            settled[e.key()] = replace(e, **{field: statistics.median(every)}, note=(
                f"{e.note}; near-tie of {len(kept)}: median of {len(every)} {how} timings over {ROUNDS} "
                f"interleaved rounds ({every[0]:.4g}-{every[-1]:.4g} ms)"))
    return [settled.get(e.key(), e) for e in entries]


def _forward(case, backend):
    """The call that is timed: backend.forward over the case's step (varlen: backend.varlen)."""
    if case.bucket.phase == "varlen":
        return lambda: case.call(backend)
    step = backend.prepare(case.meta, case.cache)
    extra = {} if case.indexer is None else {"indexer": case.indexer}
    return lambda: backend.forward(case.q, case.k, case.v, case.layer, case.cache, step, **extra)


def measure_entry(case, backend, device: str, *, variant: str | None = None) -> Entry:
    """Check, then time, one backend (one kernel variant of it) on one case."""
    b = case.bucket
    tol = TOLERANCE[b.shape.dtype]
    how = case_module(b)
    base = dict(backend=backend.name, bucket=b, work=how.work(b), variant=variant)
    try:
        fwd = _forward(case, backend)
        err = how.check(case, fwd())
        if not err < tol:
            return Entry(status="wrong", rel_err=err, note=f"relative error {err:.3g} > {tol:g} "
                                                           "against the float64 reference", **base)
        seconds = _one_call(fwd, device)              # the first call may have compiled kernels
        if seconds > SLOW_S:
            return Entry(status="skipped", rel_err=err, note=f"slow: one call took {seconds:.1f} s "
                                                             f"(over {SLOW_S:g} s), not timed", **base)
        times = measure(fwd, device, warmup=WARMUP, reps=REPS, budget_s=BUDGET_S)
    except torch.cuda.OutOfMemoryError as exc:
        return Entry(status="skipped", note=f"out of memory: {_first_line(exc)}", **base)
    except Exception as exc:  # noqa: BLE001 - a backend that raises is a result, not the end of the run
        code = f"{exc.code} " if isinstance(exc, AttnkitError) else ""
        return Entry(status="error", note=f"{code}{type(exc).__name__}: {_first_line(exc)}", **base)
    finally:
        _free(device)
    return Entry(status="ok", rel_err=err, graph_ms=times["graph_ms"], eager_ms=times["eager_ms"],
                 note=times["note"], **base)


def resume(path: Path, head: dict) -> Profile | None:
    """The profile already at ``path`` if it was measured like this run (AK232 otherwise)."""
    if not path.exists():
        return None
    old = load_profile(path)
    have = {"device": old.device, "software": old.software, "method": old.method}
    for part, keys in RESUME_KEYS.items():
        for key in keys:
            if have[part].get(key) != head[part].get(key):
                raise AttnkitError(
                    "AK232", f"{path} was measured with {part}.{key} = {have[part].get(key)!r}, this run has "
                             f"{head[part].get(key)!r}: resuming would mix two environments in one profile",
                    field=f"{part}.{key}", expected=have[part].get(key), actual=head[part].get(key),
                    solutions=[f"write to another file (--out), or delete {path} to re-measure"])
    return old


def check_writable(path: Path) -> None:
    """AK230 unless ``write`` can put a profile at ``path``: its folder is (or can be made) a
    folder, the file and its ``.tmp`` are not folders, and a file can be created there."""
    tmp = path.with_name(path.name + ".tmp")
    def refuse(why: str) -> AttnkitError:
        return AttnkitError("AK230", f"cannot write profile {str(path)!r}: {why}", field="out",
                            expected="a file path in a writable folder", actual=str(path),
                            solutions=["pass --out a file path in a folder you can write"])
    for p in (path, tmp):
        if p.is_dir():
            raise refuse(f"{p} is a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("ab"):
            pass
        if tmp.stat().st_size == 0:
            tmp.unlink()
    except OSError as exc:
        raise refuse(str(exc.strerror or exc)) from None


def write(path: Path, head: dict, entries: list[Entry], runs: list[dict], *, smoke: bool) -> Profile:
    """Write the profile atomically (a reader never sees half a file)."""
    note = ("CPU smoke profile: tiny shapes that test the tune code path; the planner uses it only "
            "when named (--profile / ATTNKIT_PROFILE)" if smoke else "written by attnkit tune; do not edit")
    prof = Profile(device=head["device"], software=head["software"], date=datetime.date.today().isoformat(),
                   method=head["method"], entries=tuple(entries), smoke=smoke,
                   header={"note": note, "runs": runs}, path=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(prof.to_dict(), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return prof


def default_path(name: str, device: str, env: Mapping[str, str]) -> Path:
    """The per-user cache file for this device (planning/profile.cache_dir)."""
    folder = cache_dir(env) or Path.cwd()
    return folder / f"{slug(name)}{'-smoke' if device == 'cpu' else ''}.json"


class Progress:
    """A progress bar on a terminal; one line per entry elsewhere (logs of a GPU run)."""

    def __init__(self, total: int, stream: TextIO):
        self.total, self.stream, self.start = total, stream, time.perf_counter()
        self.live = bool(getattr(stream, "isatty", lambda: False)())

    def done(self, n: int, e: Entry) -> None:
        rate = e.rate("graph") or e.rate("eager")
        what = f"{e.status}" + (f" {rate:.4g} {e.unit}" if rate else f" ({e.note[:60]})" if e.note else "")
        line = f"{n}/{self.total} {e.backend}{'/' + e.variant if e.variant else ''} {e.bucket.phase} {e.bucket.label()} {e.bucket.shape.label()}: {what}"
        if self.live:
            filled = 24 * n // max(self.total, 1)
            line = f"\r[{'#' * filled}{'.' * (24 - filled)}] {line} ({time.perf_counter() - self.start:.0f} s)\x1b[K"
            self.stream.write(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.live and self.total:
            self.stream.write("\n")
        self.stream.flush()


def _one_call(fn, device: str) -> float:
    start = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _free(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else ""


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

