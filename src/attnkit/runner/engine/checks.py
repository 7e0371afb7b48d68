"""Argument checks shared by the runner's public entry points: each bad value is an
AttnkitError with the entry point's code (AK483 engine, AK486 generation, AK487 LLM), naming
the field; a call its signature does not accept is that code too, not Python's TypeError."""
from __future__ import annotations

import difflib
import functools
import inspect
import numbers
from collections.abc import Mapping
from typing import Any, Callable

import torch

from attnkit.errors import preview as _preview
from attnkit.errors import fail

RUN_DEVICES = ("cpu", "cuda", "mps")


def device_of(device: Any) -> torch.device:
    """``device`` as a torch.device this process can run kernels on, else AK483: a name
    torch does not know, the meta device, a device type this torch lacks (CUDA without CUDA,
    MPS without MPS, xpu ...) or a GPU index past the count."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        fail("AK483", f"device {device!r} is not a device torch knows ({exc})", field="device",
             expected="'cpu', 'cuda' or 'cuda:N'", actual=repr(device))
    if dev.type == "meta":
        fail("AK483", "the meta device holds no data and runs no kernels: use the device the "
                      "model runs on ('cpu', 'cuda', 'cuda:N')", field="device",
             expected="'cpu' or 'cuda'", actual="meta")
    if dev.type not in RUN_DEVICES:
        fail("AK483", f"device type {dev.type!r}: the runner runs on {', '.join(RUN_DEVICES)}",
             field="device", expected=list(RUN_DEVICES), actual=str(dev))
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            fail("AK483", f"device {str(dev)!r} asked for, but MPS is not available to this torch "
                          "(not an Apple-silicon Mac, or a build without MPS); use device='cpu'",
                 field="device", expected="'cpu'", actual=str(dev))
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            fail("AK483", f"device {str(dev)!r} asked for, but CUDA is not available to this "
                          "torch (a CPU-only build or no visible GPU); use device='cpu'",
                 field="device", expected="'cpu'", actual=str(dev))
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            fail("AK483", f"device {str(dev)!r} asked for, but torch sees {count} CUDA device(s) "
                          f"(cuda:0 .. cuda:{count - 1})",
                 field="device", expected=f"cuda:N with N < {count}", actual=str(dev))
    return dev


def check_id(value: Any, *, field: str, code: str = "AK483") -> None:
    """``code`` unless ``value`` can be a dict key (a tuple holding a list cannot, though
    isinstance(value, Hashable) says it is)."""
    try:
        hash(value)
    except TypeError:
        fail(code, f"{field} {preview(value)} is not hashable: ids are ints, strings or tuples "
                   "of them", field=field, expected="a hashable id (int, str, ...)",
             actual=type(value).__name__)


def coded_args(code: str) -> Callable:
    """Decorate a public function so that a call its signature does not accept (an unknown
    keyword, a missing or extra argument) is ``code`` naming the nearest keyword, not
    Python's TypeError."""
    def wrap(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        names = [n for n, p in sig.parameters.items() if p.kind is not p.VAR_KEYWORD]

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                sig.bind(*args, **kwargs)
            except TypeError as exc:
                unknown = [k for k in kwargs if k not in sig.parameters]
                hints = [m for u in unknown for m in difflib.get_close_matches(u, names, n=1)]
                fail(code, f"{fn.__qualname__}(): {exc}"
                           + (f"; did you mean {', '.join(hints)}?" if hints else ""),
                     field=unknown[0] if unknown else fn.__name__,
                     expected=[n for n in names if n != "self"], actual=unknown or str(exc))
            return fn(*args, **kwargs)

        return checked
    return wrap


def preview(value: Any, limit: int = 60) -> str:
    """repr(value), cut to ``limit`` characters, for messages (attnkit.errors.preview: a
    5000-digit integer or a very deep list prints as a placeholder, not a ValueError)."""
    return _preview(value, limit)


def check_count(name: str, value: Any, *, minimum: int, maximum: int | None = None,
                allow_none: bool = False, code: str = "AK483") -> None:
    """``code`` (AK483: engine arguments, AK486: generation ones) unless ``value`` is an int
    (not a bool) in [minimum, maximum] (or None if allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum \
            or (maximum is not None and value > maximum):
        expected = f"int >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "") \
            + (" or None" if allow_none else "")
        fail(code, f"{name} must be an {expected}, got {preview(value)}", field=name,
             expected=expected, actual=preview(value))


def check_list(name: str, value: object, *, allow_none: bool = False) -> None:
    """AK483 unless ``value`` is a sized, non-text collection (list, tuple, tensor ...)."""
    if value is None and allow_none:
        return
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__") \
            or (torch.is_tensor(value) and value.dim() == 0):
        fail("AK483", f"{name} must be a list, got {preview(value)}", field=name,
             expected="a list" + (" or None" if allow_none else ""), actual=preview(value))
