"""Model it or refuse it, enforced: model/keys.py's table applied to one config.

``refuse_keys`` runs before the family parser (a refused key stops it); ``check_keys`` after
it, with the parser's trace of the fields it read: an attention key the parse did not read and
no rule of the family covers is refused (AK513), and keys that act outside the attention
kernel become model notes.
"""
from __future__ import annotations

from typing import Any

from attnkit.model._fields import ConfigReader, _short
from attnkit.model.keys import RULES, KeyRule, classify, is_flag


def refuse_keys(r: ConfigReader, family: str) -> None:
    for key, value in r.cfg.items():
        if value is not None and not isinstance(value, bool) and is_flag(key, family):
            raise r.type_error(key, "true or false", value)   # is_causal: 0 is a switch, read by truthiness
        status, rule = classify(key, family, value)
        if status == "refused":
            raise _refusal(r, rule, key, value, f"{rule.what}. attnkit does not model this; it would need "
                           f"{rule.how}", family)


def check_keys(r: ConfigReader, family: str) -> list[str]:
    """The notes for keys acting outside the kernel; AK513 for an attention key left unread."""
    for key, value in r.cfg.items():
        status, rule = classify(key, family, value)
        if status not in ("modelled", "foreign") or r.path(key) in r.trace:
            continue
        if status == "foreign":
            where = ", ".join(rule.families)
            why = (f"it changes attention in {where} ({rule.what}); attnkit does not know what it does "
                   f"for model_type {family or '(none)'!r}")
        else:
            why = (f"{rule.what}; attnkit reads it only {rule.how}, which this config does not allow, so "
                   "it cannot tell which layers it applies to")
        raise _refusal(r, rule, key, value, why, family, code="AK513")
    groups: dict[str, list[tuple[str, Any]]] = {}
    rules: dict[str, KeyRule] = {}
    for key in dict.fromkeys(rule.key for rule in RULES if rule.status == "outside"):
        value = r.cfg[key] if r.has(key) else r.defaults.get(key)
        status, rule = classify(key, family, value)
        if status == "outside" and r.known(key):
            groups.setdefault(rule.what, []).append((key, value))
            rules[rule.what] = rule
    return [", ".join(f"{r.path(k)} = {_short(v)}" + ("" if r.has(k) else " (transformers' default)")
                      for k, v in keys) + f": {what}, {rules[what].how}; outside the attention kernel, so "
            "not part of the plan" for what, keys in groups.items()]


def _refusal(r: ConfigReader, rule: KeyRule, key: str, value: Any, why: str, family: str, *,
             code: str | None = None):
    return r.error(code or rule.code, key, f"{r.path(key)} = {_short(value)} (model_type "
                   f"{family or '(none)'!r}): {why}",
                   expected=rule.how, actual=_short(value) if not isinstance(value, (bool, int, float, str))
                   else value, details={"key": r.path(key), "model_type": family, "needs": rule.how},
                   solutions=[f"serve this model with an engine that implements {rule.what.split(':')[0]}",
                              "if the key is a leftover that the model does not use, remove it from "
                              "config.json (check the model's modeling code first)"])
