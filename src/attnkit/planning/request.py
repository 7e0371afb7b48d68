"""The user's planning request: every setting optional, validated once, junk rejected with AK306.

``None`` means "not set": rules may fill it (and record why). A set value is never changed by
the planner; it is honoured or rejected with a fix.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from attnkit.errors import AttnkitError, preview
from attnkit.registry.capabilities import DTYPES, KV_CACHE_DTYPES, NUMERICS, dtype_spelled

DUAL_CHUNK_MODES = ("auto", "on", "off")
CUDA_GRAPH_MODES = ("auto", "on", "off")
BACKEND_FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")

@dataclass(frozen=True)
class PlanRequest:
    """The settings a user asks the planner for (None = not set). Not the runtime's
    ``backends.batch.Request``, which is one sequence's share of a step."""
    attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None
    page_size: int | None = None
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    tp_size: int | None = None
    speculative_tokens: int | None = None
    dual_chunk: str | None = None
    cuda_graph: bool | None = None
    deny: tuple[str, ...] = ()
    require: tuple[str, ...] = ()       # NUMERICS every chosen backend must declare (requirements.py)
    # field -> where a value came from when not the caller ("env")
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def is_set(self, name: str) -> bool:
        value = getattr(self, name)
        return value not in (None, ())

    def backend_field(self, phase: str) -> str:
        """The request field that names ``phase``'s backend: the phase's own flag if set, else the shared one."""
        own = f"{phase}_attention_backend"
        return own if getattr(self, own) else "attention_backend"

    def with_values(self, source: str, **values: Any) -> "PlanRequest":
        return replace(self, **values, sources={**self.sources, **{k: source for k in values}})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in fields(self) if f.name != "sources"}


def parse_request(request: Any = None, **overrides: Any) -> PlanRequest:
    """A ``PlanRequest`` from None, a dict or a PlanRequest (plus keyword overrides); AK306 on junk.
    A PlanRequest without overrides is returned as it is (parsed once, its sources kept)."""
    if isinstance(request, PlanRequest) and not overrides:
        return request
    if request is None:
        raw: dict[str, Any] = {}
    elif isinstance(request, PlanRequest):
        raw = request.to_dict()
    elif isinstance(request, Mapping):
        raw = dict(request)
    else:
        raise AttnkitError("AK306", f"a planning request is a dict of settings, not {type(request).__name__}",
                           field="request", actual=type(request).__name__)
    raw.update(overrides)
    if "speculative" in raw and "speculative_tokens" not in raw:
        raw["speculative_tokens"] = raw.pop("speculative")
    known = {f.name for f in fields(PlanRequest)} - {"sources"}
    unknown = sorted(set(raw) - known, key=repr)
    if unknown:
        import difflib
        hints = [m for u in unknown for m in difflib.get_close_matches(str(u), known, n=1)]
        raise AttnkitError("AK306", f"unknown request setting(s) {', '.join(map(str, unknown))}"
                           + (f"; did you mean {', '.join(hints)}?" if hints else ""),
                           field="request", actual=unknown, expected=sorted(known))
    return PlanRequest(
        **{name: _backend_name(name, raw.get(name)) for name in BACKEND_FIELDS},
        page_size=_int("page_size", raw.get("page_size"), minimum=1),
        kv_cache_dtype=_dtype("kv_cache_dtype", raw.get("kv_cache_dtype"), KV_CACHE_DTYPES),
        dtype=_dtype("dtype", raw.get("dtype"), DTYPES),
        tp_size=_int("tp_size", raw.get("tp_size"), minimum=1),
        speculative_tokens=_int("speculative_tokens", raw.get("speculative_tokens"), minimum=0),
        dual_chunk=_dual_chunk(raw.get("dual_chunk")),
        cuda_graph=_cuda_graph(raw.get("cuda_graph")),
        deny=_names("deny", raw.get("deny")),
        require=parse_require(raw.get("require")),
    )


def _bad(name: str, value: Any, expected: Any, why: str) -> AttnkitError:
    shown = preview(value)
    return AttnkitError("AK306", f"{name}={shown} is not valid: {why}", field=name,
                        expected=expected, actual=shown)


def _backend_name(name: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "auto")):
        return None
    if not isinstance(value, str):
        raise _bad(name, value, "a backend name", "expected a backend name (a string)")
    return value.strip()


_INT_TEXT = re.compile(r"-?[0-9]{1,12}")   # ASCII digits only: '²'.isdigit() is true, int('²') fails


def _int(name: str, value: Any, *, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, value, f"an integer >= {minimum}", "expected an integer")
    if value < minimum or value > 1 << 20:
        raise _bad(name, value, f"an integer in [{minimum}, {1 << 20}]", "out of range")
    return value


def _dtype(name: str, value: Any, allowed: tuple[str, ...]) -> str | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    norm = dtype_spelled(value) if isinstance(value, str) else None
    if norm not in allowed:
        raise _bad(name, value, list(allowed), f"choose one of {', '.join(allowed)} (or auto)")
    return norm


def _dual_chunk(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and value.strip().lower() in DUAL_CHUNK_MODES:
        return None if value.strip().lower() == "auto" else value.strip().lower()   # auto = unset
    raise _bad("dual_chunk", value, list(DUAL_CHUNK_MODES), "choose auto, on or off")


def _cuda_graph(value: Any) -> bool | None:
    """True (on), False (off) or None (auto: the planner decides, see rules.cuda_graph_rule)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in CUDA_GRAPH_MODES:
        return {"on": True, "off": False, "auto": None}[value.strip().lower()]
    raise _bad("cuda_graph", value, list(CUDA_GRAPH_MODES) + [True, False],
               "choose auto, on or off (or true / false)")


def _names(name: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple, set, frozenset)) or not all(isinstance(v, str) for v in value):
        raise _bad(name, value, "a list of backend names", "expected backend names")
    return tuple(dict.fromkeys(v.strip() for v in value if v.strip()))


def parse_require(value: Any) -> tuple[str, ...]:
    """``"batch-invariant,deterministic"``, a list of names, or None -> canonical names; AK306."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple, set, frozenset)) or not all(isinstance(v, str) for v in value):
        raise AttnkitError("AK306", f"require={str(value)[:80]} is not valid: expected names of "
                           f"{', '.join(spelled(n) for n in NUMERICS)}", field="require",
                           expected=[spelled(n) for n in NUMERICS], actual=str(value)[:80])
    out = []
    for raw in value:
        name = raw.strip().lower().replace("-", "_")
        if not name:
            continue
        if name not in NUMERICS:
            raise AttnkitError("AK306", f"require={raw.strip()!r} is not valid: choose "
                               f"{' or '.join(spelled(n) for n in NUMERICS)}", field="require",
                               expected=[spelled(n) for n in NUMERICS], actual=raw.strip())
        out.append(name)
    return tuple(dict.fromkeys(out))


def spelled(name: str) -> str:
    """A numeric property as the command line spells it: batch_invariant -> batch-invariant."""
    return name.replace("_", "-")
