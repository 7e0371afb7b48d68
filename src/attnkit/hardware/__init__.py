"""Hardware platforms (torch-free): presets for planning anywhere, ``detect()`` for here."""
from __future__ import annotations

import dataclasses
import difflib

from attnkit.errors import AttnkitError
from attnkit.hardware.detect import detect, installed_packages, require_package
from attnkit.hardware.platform import PLATFORM_KINDS, Platform, compute_dtypes, validate_platform
from attnkit.hardware.presets import PRESETS, preset_names

__all__ = ["Platform", "PLATFORM_KINDS", "detect", "installed_packages", "require_package", "preset_names",
           "resolve_platform", "get_preset", "compute_dtypes", "validate_platform"]


def get_preset(name: str) -> Platform:
    """The preset called ``name`` (case-insensitive); AK200 with did-you-mean if unknown."""
    key = name.strip().lower()
    if key in PRESETS:   # a copy, so a caller editing .packages cannot change the preset
        return dataclasses.replace(PRESETS[key], packages=dict(PRESETS[key].packages))
    names = preset_names()
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise AttnkitError(
        "AK200",
        f"unknown device {name!r}.{hint} Known devices: auto, {', '.join(names)}.",
        field="device", expected=["auto", *names], actual=name,
        solutions=[f"use --device {close[0]}" if close else "use --device auto or a known preset",
                   "list presets with: attnkit devices"],
        details={"did_you_mean": close},
    )


def resolve_platform(spec: "str | Platform | None" = "auto") -> Platform:
    """``"auto"`` (or None) -> ``detect()``; a preset name -> that preset; a Platform -> itself."""
    if isinstance(spec, Platform):
        validate_platform(spec)
        return spec
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "auto"):
        return detect()
    if isinstance(spec, str):
        return get_preset(spec)
    raise AttnkitError(
        "AK201",
        f"a platform must be 'auto', a preset name or a Platform, not {type(spec).__name__}.",
        field="platform", expected="'auto' | preset name | Platform", actual=type(spec).__name__,
    )
