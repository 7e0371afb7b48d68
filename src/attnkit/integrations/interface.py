"""The parts of an engine's interface a plugin relies on, as data, and the check of them.

An ``Expected`` names one class or function by import path and what the plugin uses of it:
parameters it passes or receives (by name, in order of appearance), attributes it reads. The
plugins keep one list each (integrations/vllm/interface.py, integrations/sglang/interface.py);
``problems`` returns one message per difference, naming the class and the engine version,
which the interface-guard tests print. Imports nothing of the engines itself.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Expected:
    path: str                               # "package.module:Qualified.name"
    params: dict[str, tuple[str, ...]] | None = None   # method ("" = the object itself) -> parameter names
    attrs: tuple[str, ...] = ()             # attributes (members, enum names, fields) it must have

    def resolve(self) -> Any:
        module, _, name = self.path.partition(":")
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj


def problems(engine: str, version: str, expected: list[Expected],
             fields: Callable[[Any], set[str]] | None = None) -> list[str]:
    """One message per way ``engine`` ``version`` differs from ``expected``: a class or
    function missing, a method or attribute missing, a parameter missing. ``fields`` lists the
    extra attribute names of an object that ``hasattr`` cannot see (dataclass fields)."""
    out = []
    for e in expected:
        where = f"{engine} {version}: {e.path}"
        try:
            obj = e.resolve()
        except (ImportError, AttributeError) as exc:
            out.append(f"{where} is missing ({type(exc).__name__}: {exc})")
            continue
        known = fields(obj) if fields else set()
        for attr in e.attrs:
            if not hasattr(obj, attr) and attr not in known:
                out.append(f"{where} has no attribute {attr!r}")
        for method, names in (e.params or {}).items():
            target = getattr(obj, method, None) if method else obj
            if target is None:
                out.append(f"{where} has no method {method!r}")
                continue
            try:
                have = list(inspect.signature(target).parameters)
            except (TypeError, ValueError):
                out.append(f"{where}.{method}: signature cannot be read")
                continue
            missing = [n for n in names if n not in have]
            if missing:
                label = f"{where}.{method}" if method else where
                out.append(f"{label}({', '.join(have)}) lacks parameter(s) {', '.join(missing)}")
    return out


def dataclass_fields(obj: Any) -> set[str]:
    """Field names of a dataclass class (instances' attributes that the class lacks)."""
    return set(getattr(obj, "__dataclass_fields__", {}))
