"""Which device profile a plan uses (``find_profile``; planning/profile.py reads the files),
first that applies:
  1. ``plan(..., profile=PATH)`` / ``attnkit plan --profile PATH``;
  2. the ``ATTNKIT_PROFILE`` environment variable (a path);
  3. the per-user cache ``attnkit tune`` writes to (``cache_dir``);
  4. the profiles shipped in the package (``planning/profiles/*.json``).
A profile applies to a platform of the same kind and compute capability (same architecture);
for devices without a capability (CPU), the same device name. Among automatic ones (3, 4) an
exact device-name match goes first, then the user's cache, then the newest. Smoke profiles
(``attnkit tune --device cpu``: tiny shapes that only test the code path) are used only
when named (1, 2). A named profile that does not apply is not used (a warning says why).
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from attnkit.errors import AttnkitError
from attnkit.planning.profile import Profile, load_profile

SHIPPED_DIR = Path(__file__).parent / "profiles"
ENV_PATH = "ATTNKIT_PROFILE"
ENV_DIR = "ATTNKIT_PROFILE_DIR"


def covers(profile: Profile, platform) -> bool:
    """Same platform kind and compute capability; without a capability, the same device name."""
    d = profile.device
    if d.get("kind") != platform.kind:
        return False
    cap = d.get("capability")
    if cap is not None or platform.capability is not None:
        return cap is not None and platform.capability is not None and tuple(cap) == tuple(platform.capability)
    return _norm(d.get("name")) == _norm(platform.name)


def same_device(profile: Profile, platform) -> bool:
    return covers(profile, platform) and _norm(profile.device.get("name")) == _norm(platform.name)


def _where(device: Mapping[str, Any]) -> str:
    """``NVIDIA H200 (cuda, sm90)``: what ``covers`` compares, so a refusal names the difference."""
    cap = device.get("capability")
    return f"{device.get('name')} ({device.get('kind')}" + (f", sm{cap[0]}{cap[1]})" if cap else ")")


def _norm(name: Any) -> str:
    return " ".join(str(name or "").lower().split())


def cache_dir(env: Mapping[str, str]) -> Path | None:
    """Where ``attnkit tune`` keeps profiles: $ATTNKIT_PROFILE_DIR, else
    $XDG_CACHE_HOME/attnkit/profiles, else $HOME/.cache/attnkit/profiles (None without any)."""
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR])
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "attnkit" / "profiles"
    if env.get("HOME"):
        return Path(env["HOME"]) / ".cache" / "attnkit" / "profiles"
    return None


def find_profile(platform, *, path: str | os.PathLike | None = None, env: Mapping[str, str],
                 automatic: bool = True) -> tuple[Profile | None, list[str]]:
    """(the profile that applies to ``platform`` or None, warnings). A named profile (``path``,
    else $ATTNKIT_PROFILE) that cannot be read raises AK230/AK231; one in the cache that
    cannot is skipped with a warning. ``automatic=False``: named profiles only."""
    named = (str(path), "--profile") if path else ((env[ENV_PATH], ENV_PATH) if env.get(ENV_PATH) else None)
    if named:
        prof = load_profile(named[0], source=named[1])
        if covers(prof, platform):
            return prof, ([f"{named[1]} {named[0]} is a smoke profile (tiny shapes, tests the tune "
                           "code path): its rankings say little about real workloads"] if prof.smoke else []
                          ) + software_warnings(prof)
        return None, [f"{named[1]} {named[0]} was measured on {_where(prof.device)}, not on "
                      f"{_where({a: getattr(platform, a) for a in ('name', 'kind', 'capability')})}: not used"]
    if not automatic:
        return None, []
    warnings: list[str] = []
    found = []
    for rank, (folder, source) in enumerate(((cache_dir(env), "cache"), (SHIPPED_DIR, "shipped"))):
        for file in sorted(folder.glob("*.json")) if folder is not None and folder.is_dir() else ():
            try:
                prof = _load_once(file, source)
            except AttnkitError as err:
                warnings.append(f"skipped {source} profile {file}: {err.code} {err.message}")
                continue
            if covers(prof, platform) and not prof.smoke:
                found.append(((not same_device(prof, platform), rank, _neg(prof.date)), prof))
    if not found:
        return None, warnings
    best = min(found, key=lambda t: t[0])[1]
    return best, warnings + (software_warnings(best) if best.source != "shipped" else [])


SOFTWARE = ("attnkit", "torch", "triton")     # what tune's resume also insists on (tune/run.py)


def installed_version(package: str) -> str | None:
    """The installed distribution's version, read from its metadata (nothing is imported)."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def software_warnings(prof: Profile) -> list[str]:
    """A warning naming each of attnkit / torch / triton the profile was measured with at
    another version than the one installed: its rates may not hold for this software. Shipped
    profiles are exempt (they record the release's measurement)."""
    diffs = []
    for name in SOFTWARE:
        theirs, ours = prof.software.get(name), installed_version(name)
        if theirs is not None and ours is not None and str(theirs).split("+")[0] != ours.split("+")[0]:
            diffs.append(f"{name} {theirs} (installed: {ours})")
    if not diffs:
        return []
    return [f"{prof.source or 'profile'} {prof.path}: measured with {', '.join(diffs)}; its rates may not "
            "hold for this software (re-run attnkit tune)"]


def shipped_profiles(kind: str) -> list[Profile]:
    """The package's profiles for platform ``kind``, newest first (cited by the priority tables)."""
    out = [_load_once(f, "shipped") for f in sorted(SHIPPED_DIR.glob("*.json"))] if SHIPPED_DIR.is_dir() else []
    return sorted((p for p in out if p.device.get("kind") == kind and not p.smoke),
                  key=lambda p: p.date, reverse=True)


def _load_once(path: Path, source: str) -> Profile:
    """load_profile, parsed once per file version (every plan looks at the cache and the package)."""
    try:
        st = path.stat()
    except OSError as exc:            # a dangling symlink, a file removed meanwhile
        raise AttnkitError("AK230", f"cannot read profile {str(path)!r}: {exc.strerror or exc}",
                           field="profile", expected="a readable JSON file", actual=str(path)) from None
    return _load_version(str(path), source, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=64)
def _load_version(path: str, source: str, mtime_ns: int, size: int) -> Profile:
    return load_profile(path, source=source)


def _neg(date: str) -> tuple:
    """Sort key that puts later ISO dates first."""
    return tuple(-ord(c) for c in date)
