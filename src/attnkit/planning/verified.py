"""Declared versus verified: warn when a plan relies on a backend on an architecture no run proved.

A declaration may claim a compute-capability range wider than the devices its GPU tests have
passed on (``Capabilities.verified``). Planning for such a device is allowed (the claim may be
right), but the plan says so, naming what was declared and what was verified.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from attnkit.registry.capabilities import BackendDeclaration


def unverified_warnings(registry: Mapping[str, BackendDeclaration], backends: Iterable[str | None],
                        platform) -> list[str]:
    """One warning per backend in ``backends`` that runs on ``platform``'s kind but has no
    verification run on its compute capability. Platforms without a capability (CPU, MPS)
    are proven by the test suite itself: nothing to say."""
    cc = getattr(platform, "capability", None)
    if cc is None:
        return []
    cc = tuple(cc)
    out = []
    for name in dict.fromkeys(n for n in backends if n):
        caps = registry[name].capabilities
        if platform.kind not in caps.platforms:
            continue
        runs = [v for v in caps.verified if v.platform == platform.kind]
        if any(v.capability is not None and tuple(v.capability) == cc for v in runs):
            continue
        declared = _span(caps.compute_capability) or platform.kind
        here = f"{platform.name} is {_sm(cc)}"
        if runs:
            seen = ", ".join(dict.fromkeys(f"{_sm(v.capability)} ({v.device}, {v.date})" for v in runs))
            out.append(f"{name}: declared for {declared}, verified on {seen} only; {here}, unverified")
        else:
            out.append(f"{name}: declared for {declared}, not verified on any {platform.kind} device; {here}")
    return out


def _span(cc_range) -> str | None:
    if cc_range is None:
        return None
    lo, hi = cc_range
    return _sm(lo) + (f"-{_sm(hi)}" if hi else "+")


def _sm(cc) -> str:
    return "an unknown architecture" if cc is None else f"sm{cc[0]}{cc[1]}"
