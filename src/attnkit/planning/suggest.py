"""Where a failed request would work: other devices, backends that serve, nearby page sizes.

Used by failures.py to build each error's fixes and its example "after" command.
"""
from __future__ import annotations

from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from attnkit.planning.solver import Solve


def serving(s: "Solve", phases: list[str], *, exclude: str | None = None) -> list[str]:
    """Backends that serve every layer in ``phases`` here, priority order first."""
    order = [n for p in phases for n in s.pool(p)] + list(s.registry)
    return [n for n in dict.fromkeys(order) if n != exclude and not s.registry[n].explicit_only
            and n not in s.request.deny and all(not s.reasons(p, n) for p in phases)]


def nearest(sizes: list[int], target: int, n: int = 3) -> list[int]:
    """The ``n`` sizes closest to ``target`` (ties to the smaller)."""
    return sorted(sizes, key=lambda v: (abs(v - target), v))[:n]


def other_device(s: "Solve", *, fixed: dict[str, str] | None = None, without: list[str] = ()) -> str | None:
    """The first device preset where some automatic candidate serves both phases (for the example fix).

    ``fixed`` (phase -> backend): instead, the first preset where those backends serve their phases.
    ``without``: settings to leave out (as if the user dropped them).
    """
    from attnkit.hardware import get_preset, preset_names
    from attnkit.planning.reasons import check_backend

    here = getattr(s.platform, "preset", None)
    settings = {k: v for k, v in s.settings.items() if v is not None and k not in without}
    for preset in sorted(preset_names(), key=lambda n: (n not in ("h100", "cpu"), n)):
        if preset == here:
            continue
        platform = get_preset(preset)
        if fixed:
            if all(not check_backend(s.registry[n], model=s.model, needs=s.needs, platform=platform,
                                     phase=p, settings=settings) for p, n in fixed.items()):
                return preset
            continue
        names = [n for n in s.registry if not s.registry[n].explicit_only and n not in s.request.deny]
        if any(all(not check_backend(s.registry[n], model=s.model, needs=s.needs, platform=platform,
                                     phase=p, settings=settings) for p in s.phases) for n in names):
            return preset
    return None


def device_for(s: "Solve", failing: dict[str, list[str]], *, without: list[str] = ()) -> tuple[str | None, bool]:
    """(a device where the named backends serve, True), else (one where some candidate does, False)."""
    device = other_device(s, fixed={p: n for n, ps in failing.items() for p in ps}, without=without)
    return (device, True) if device else (other_device(s, without=without), False)
