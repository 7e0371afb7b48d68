"""Typed reads from a parsed config.json: every bad field becomes an AK5xx naming it.

``ConfigReader`` wraps one JSON object (or a nested one such as ``text_config``) and knows
where it came from, so an error says ``text_config.head_dim in ./model/config.json``.
``defaults`` are transformers' config-class defaults for fields a real config may omit.
``trace`` (a set shared by a reader and its ``sub`` readers) collects the path of every field
a typed read used, so the parser can tell which attention keys it modelled (model/keys.py).
"""
from __future__ import annotations

import math
from typing import Any

from attnkit.errors import AttnkitError, preview

_MISSING = object()
# No config size, count or window comes near 2**31; larger integers are typos or attacks (and a
# 5000-digit integer cannot even be printed in an error message).
MAX_INT = 1 << 31


class ConfigReader:
    def __init__(self, cfg: dict, *, source: str, prefix: str = "", defaults: dict | None = None,
                 trace: set | None = None):
        self.cfg = cfg
        self.source = source
        self.prefix = prefix
        self.defaults = dict(defaults or {})
        self.used_defaults: list[str] = []   # fields filled from ``defaults``, for the model notes
        self.trace = trace if trace is not None else set()

    # -- presence -----------------------------------------------------------------------
    def has(self, key: str) -> bool:
        """True when ``key`` is set to something other than null."""
        return self.cfg.get(key) is not None

    def known(self, key: str) -> bool:
        """True when ``key`` is set or has a family default."""
        return self.has(key) or key in self.defaults

    def first(self, *keys: str) -> str | None:
        """The first of ``keys`` that is set (aliases: ``num_attention_heads``, ``n_head`` ...)."""
        return next((k for k in keys if self.has(k)), None)

    def path(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def considered(self, *keys: str) -> None:
        """Record ``keys`` as read: the parser looked at them and they change nothing here
        (e.g. Qwen's sliding_window while use_sliding_window is false)."""
        self.trace.update(self.path(k) for k in keys if self.has(k))

    def _raw(self, key: str, default: Any) -> tuple[Any, bool]:
        """(value, found): found is False when ``default`` (the caller's) was returned."""
        if self.has(key):
            self.trace.add(self.path(key))
            return self.cfg[key], True
        if key in self.defaults:
            self.used_defaults.append(key)
            self.trace.add(self.path(key))
            return self.defaults[key], True
        if default is _MISSING:
            raise self.error("AK503", key, f"required field {self.path(key)!r} is missing",
                             expected="a value", actual=None)
        return default, False

    # -- typed reads ----------------------------------------------------------------------
    def int(self, key: str, *, default: Any = _MISSING, minimum: int = 1,
            maximum: int | None = MAX_INT) -> Any:
        value, found = self._raw(key, default)
        if not found:
            return value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)   # 4096.0 appears in hand-edited configs; it means 4096
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.type_error(key, "an integer", value)
        if value < minimum:
            raise self.error("AK505", key, f"{self.path(key)} must be >= {minimum}, got {_short(value)}",
                             expected=f">= {minimum}", actual=_short(value))
        if maximum is not None and value > maximum:
            raise self.error("AK505", key, f"{self.path(key)} = {_short(value)} is implausibly large "
                             f"(at most {maximum})", expected=f"<= {maximum}", actual=_short(value))
        return value

    def float(self, key: str, *, default: Any = _MISSING, positive: bool = True) -> Any:
        value, found = self._raw(key, default)
        if not found:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.type_error(key, "a finite number", value)
        # before isfinite: an integer past float's range (10**400) cannot even be converted
        if isinstance(value, int) and abs(value) > MAX_INT:
            raise self.error("AK505", key, f"{self.path(key)} = {_short(value)} is implausibly large",
                             expected=f"|value| <= {MAX_INT}", actual=_short(value))
        if not math.isfinite(value):
            raise self.type_error(key, "a finite number", value)
        if positive and value <= 0:
            raise self.error("AK505", key, f"{self.path(key)} must be > 0, got {value}",
                             expected="> 0", actual=value)
        return float(value)

    def bool(self, key: str, *, default: bool) -> bool:
        value, _ = self._raw(key, default)
        if not isinstance(value, bool):
            raise self.type_error(key, "true or false", value)
        return value

    def flag(self, key: str, *, default: bool) -> bool:
        """A true/false field as Python code that tests ``if config.key:`` reads it: absent is
        ``default``, an explicit null is false; anything else but a bool is AK504."""
        if key in self.cfg and self.cfg[key] is None:
            return False
        return self.bool(key, default=default)

    def str(self, key: str, *, default: Any = _MISSING) -> Any:
        value, found = self._raw(key, default)
        if not found:
            return value
        if not isinstance(value, str):
            raise self.type_error(key, "a string", value)
        return value

    def list(self, key: str, *, default: Any = _MISSING) -> Any:
        value, found = self._raw(key, default)
        if not found:
            return value
        if not isinstance(value, list):
            raise self.type_error(key, "a list", value)
        return value

    def sub(self, key: str, *, defaults: dict | None = None) -> "ConfigReader | None":
        """The nested object at ``key`` as its own reader, or None when absent/null."""
        if not self.has(key):
            return None
        value = self.cfg[key]
        if not isinstance(value, dict):
            raise self.type_error(key, "a JSON object", value)
        self.trace.add(self.path(key))
        return ConfigReader(value, source=self.source, prefix=f"{self.path(key)}.", defaults=defaults,
                            trace=self.trace)

    # -- errors ---------------------------------------------------------------------------
    def type_error(self, key: str, expected: str, value: Any) -> AttnkitError:
        actual = value if isinstance(value, (bool, float, str, type(None))) or (
            isinstance(value, int) and abs(value) <= MAX_INT) else _short(value)
        return self.error("AK504", key, f"{self.path(key)} must be {expected}, got "
                          f"{type(value).__name__} {_short(value)}", expected=expected, actual=actual)

    def error(self, code: str, key: str | None, message: str, **kwargs: Any) -> AttnkitError:
        field = self.path(key) if key is not None else None
        details = {"source": self.source, **kwargs.pop("details", {})}
        return AttnkitError(code, f"{message} (in {self.source})", field=field, details=details,
                            **kwargs)


def _short(value: Any) -> str:
    """A repr short enough for a message, for any value a JSON file can hold."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        return f"an integer of about {int(abs(value).bit_length() * 0.30103) + 1} digits"
    return preview(value, 60)
