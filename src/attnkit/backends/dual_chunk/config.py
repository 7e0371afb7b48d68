"""The rules of a dual chunk layout, torch-free: shared by the planner's check
(declaration.py), the DCA rotary and the backend, so each rule is written once.

A problem is a tuple (field, required, actual, message); ``require_*`` raise it as an
AttnkitError (AK473 for the config, AK470 for the page size).
"""
from __future__ import annotations

from typing import Any

from attnkit.errors import fail

Problem = tuple[str, Any, Any, str]     # (field, required, actual, message)


def config_problems(config) -> list[Problem]:
    """What is wrong with a DualChunkConfig (empty if it is usable)."""
    cs, ls, omax = config.chunk_size, config.local_size, config.original_max_position_embeddings
    out: list[Problem] = []
    if not (isinstance(cs, int) and isinstance(ls, int) and 0 <= ls < cs):
        out.append(("dual_chunk.local_size", f"0 <= local_size < chunk_size ({cs})", ls,
                    f"dual chunk attention needs 0 <= local_size < chunk_size so the chunk "
                    f"length chunk_size - local_size is at least 1; got chunk_size={cs}, "
                    f"local_size={ls}"))
    if not (isinstance(omax, int) and omax >= 0):
        out.append(("dual_chunk.original_max_position_embeddings", ">= 0", omax,
                    f"original_max_position_embeddings must be an integer >= 0 (0 turns the "
                    f"length scale off), got {omax!r}"))
    return out


def page_size_problem(chunk_len: int, page_size: int) -> Problem | None:
    """A reason if ``page_size`` does not divide the chunk length, else None."""
    if chunk_len % page_size == 0:
        return None
    near = sorted((d for d in divisors(chunk_len) if d <= 4 * page_size),
                  key=lambda d: (abs(d - page_size), d))[:3]
    return ("page_size", f"a divisor of the dual-chunk length {chunk_len}", page_size,
            f"page size {page_size} does not divide the dual-chunk length {chunk_len} "
            f"(chunk_size - local_size), so a page would straddle two chunks; "
            f"nearest valid page sizes: {', '.join(map(str, sorted(near)))}")


def require_valid_config(config, *, where: str = "") -> int:
    """The chunk length cl of a usable config; AK473 otherwise."""
    problems = config_problems(config)
    if problems:
        field, required, actual, message = problems[0]
        fail("AK473", f"{where}{message}", field=field, expected=required, actual=actual)
    return config.chunk_len


def require_page_size(chunk_len: int, page_size: int) -> None:
    """AK470 unless ``page_size`` divides ``chunk_len``."""
    bad = page_size_problem(chunk_len, page_size)
    if bad:
        field, required, actual, message = bad
        fail("AK470", message, field=field, expected=required, actual=actual,
             details={"chunk_len": chunk_len, "page_size": page_size})


def runtime_check(spec, *, page_size: int) -> None:
    """The declaration's runtime_check (backends/envelope.py calls it once per layer spec and
    page size): what the capability data cannot say. The layer has a dual chunk config (AK440:
    the backend computes nothing else), a usable one (AK473), whose chunk length the page size
    divides (AK470)."""
    if spec.dual_chunk is None:
        fail("AK440", f"backend 'dual_chunk' does not serve layer {spec.layer_id}: it has no "
                      "dual_chunk config, and the backend computes only dual chunk attention",
             field="layer.spec.dual_chunk", expected="DualChunkConfig", actual=None)
    require_page_size(require_valid_config(spec.dual_chunk, where=f"layer {spec.layer_id}: "), page_size)


def divisors(n: int) -> list[int]:
    """Every d >= 1 with n % d == 0, ascending."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))

