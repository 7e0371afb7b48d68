"""``attnkit backends``: every registered backend, installed / usable here, and why not.

Three separate states: *installed* (its required packages are on the platform), *usable* (also
its platform kind and compute capability fit), and *serves this model* (``attnkit plan``).
"""
from __future__ import annotations

from typing import Any, Mapping

from attnkit.registry.capabilities import BackendDeclaration
from attnkit.planning.reasons import platform_reasons


def backends_report(platform, registry: Mapping[str, BackendDeclaration] | None = None) -> dict[str, Any]:
    """``{"platform": {...}, "packages_source": "preset" | "this machine", "backends": [{name,
    aliases, installed, usable, why_not, capabilities}]}``."""
    if registry is None:
        from attnkit.registry import declarations
        registry = declarations()
    rows = []
    for name, decl in sorted(registry.items()):
        why = platform_reasons(decl, platform)
        rows.append({
            "name": name,
            "aliases": sorted(decl.aliases),
            "description": decl.description,
            "explicit_only": decl.explicit_only,
            "installed": not any(r.code == "AK212" for r in why),
            "usable": not why,
            "why_not": [{k: v for k, v in r.to_dict().items() if k not in ("layers", "phases")} for r in why],
            "capabilities": decl.capabilities.to_dict(),
            "variants": [k.to_dict() for k in decl.variants],
        })
    info = platform.to_dict() if hasattr(platform, "to_dict") else {"kind": platform.kind, "name": platform.name}
    # a preset's packages are what it assumes a typical install has, not what this machine has
    source = "preset" if getattr(platform, "preset", None) else "this machine"
    return {"platform": info, "packages_source": source, "backends": rows}
