"""Where a failed request would work: other devices, backends that serve, nearby page sizes.

Used by failures.py to build each error's fixes and its example "after" command.
"""
from __future__ import annotations

from attnkit.planning.view import View


def serving(v: View, phases: list[str], *, exclude: str | None = None) -> list[str]:
    """Backends that serve every layer in ``phases`` here, priority order first."""
    order = [n for p in phases for n in v.pool(p)] + list(v.registry)
    return [n for n in dict.fromkeys(order) if n != exclude and not v.registry[n].explicit_only
            and n not in v.request.deny and all(not v.reasons(p, n) for p in phases)]


def nearest(sizes: list[int], target: int, n: int = 3) -> list[int]:
    """The ``n`` sizes closest to ``target`` (ties to the smaller)."""
    return sorted(sizes, key=lambda s: (abs(s - target), s))[:n]


def other_device(v: View, *, fixed: dict[str, str] | None = None, without: list[str] = ()) -> str | None:
    """The first device preset where some automatic candidate serves both phases (for the example fix).

    ``fixed`` (phase -> backend): instead, the first preset where those backends serve their phases.
    ``without``: settings to leave out (as if the user dropped them).
    """
    from attnkit.hardware import get_preset, preset_names
    from attnkit.planning.reasons import check_backend

    here = getattr(v.platform, "preset", None)
    settings = {k: v for k, v in v.settings.items() if v is not None and k not in without}
    for preset in sorted(preset_names(), key=lambda n: (n not in ("h100", "cpu"), n)):
        if preset == here:
            continue
        platform = get_preset(preset)
        if fixed:
            if all(not check_backend(v.registry[n], model=v.model, needs=v.needs, platform=platform,
                                     phase=p, settings=settings) for p, n in fixed.items()):
                return preset
            continue
        names = [n for n in v.registry if not v.registry[n].explicit_only and n not in v.request.deny]
        if any(all(not check_backend(v.registry[n], model=v.model, needs=v.needs, platform=platform,
                                     phase=p, settings=settings) for p in v.phases) for n in names):
            return preset
    return None


def device_for(v: View, failing: dict[str, list[str]], *, without: list[str] = ()) -> tuple[str | None, bool]:
    """(a device where the named backends serve, True), else (one where some candidate does, False)."""
    device = other_device(v, fixed={p: n for n, ps in failing.items() for p in ps}, without=without)
    return (device, True) if device else (other_device(v, without=without), False)
