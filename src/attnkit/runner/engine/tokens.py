"""Token ids from what users pass: lists / tuples / 1-D integer tensors of ints, one id.

    token_ids([1, 5, torch.tensor(9)])  -> [1, 5, 9]
    token_ids("hello"), token_ids([1.5]), token_ids([True]) -> None (not token ids)
    stop_ids(2) -> (2,);  stop_ids([2, 7]) -> (2, 7);  stop_ids(None) -> ()

Python ints, numpy integers and 0-d integer tensors are ids; floats (even 2.0), bools,
strings and nested lists are not, so a text prompt or a float is refused instead of being
truncated or parsed. Callers turn None into their own error code.
"""
from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Set
from typing import Any

import torch

from attnkit.errors import fail, preview


def token_id(value: Any) -> int | None:
    """``value`` as an int id, or None if it is not an integer (bools and floats are not)."""
    if isinstance(value, bool):
        return None
    if torch.is_tensor(value) and (value.dim() != 0 or value.dtype == torch.bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def token_ids(tokens: Any) -> list[int] | None:
    """``tokens`` (an iterable of ids or a 1-D integer tensor) as a list of ints, else None."""
    if torch.is_tensor(tokens):
        if tokens.dim() != 1 or tokens.dtype == torch.bool or tokens.is_floating_point() \
                or tokens.is_complex():
            return None
        return tokens.tolist()
    if isinstance(tokens, (str, bytes, bytearray, Mapping, Set)) or not isinstance(tokens, Iterable):
        return None
    out = []
    for t in tokens:
        i = token_id(t)
        if i is None:
            return None
        out.append(i)
    return out


def stop_ids(value: Any, *, field: str = "stop_token_ids") -> tuple[int, ...]:
    """Stop / EOS ids given as None, one id, or a list of ids -> a tuple of ints >= 0 (AK486)."""
    if value is None:
        return ()
    one = token_id(value)
    ids = [one] if one is not None else token_ids(value)
    if ids is None or any(i < 0 for i in ids):
        fail("AK486", f"{field}={preview(value)} is not valid: expected a token id >= 0 or a list of them",
             field=field, expected="int >= 0 | list[int >= 0] | None", actual=preview(value))
    return tuple(ids)
