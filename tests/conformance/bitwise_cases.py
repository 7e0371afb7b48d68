"""The bitwise cases: which (backend, options) claim ``batch_invariant`` / ``deterministic``,
read from the declarations (never a hand list), and the batches that prove it.

A claim is proven per device a test can reach (cpu; the Triton interpreter for CUDA-only
Triton backends; cuda, marked gpu), per kind and per compute dtype (the interpreter leaves
bf16 to the GPU, conformance_cases._axes says why). ``OPTION_CLAIMS`` holds the claims that
hold only with a backend option (a fixed split size in keys instead of a split count sized by
the batch): proven here all the same, they are planned once the option is declared as a
kernel variant (registry/kernels.py).

Each family below is a pool of requests (prefix length, new tokens) around one *target*; the
target's rows alone are compared, bit for bit, with its rows in batches of the others: every
batch size of BATCH_SIZES, the target first, last and in the middle, the others reversed.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

from attnkit.registry import declarations
from attnkit.registry.capabilities import NUMERICS

# Claims that need a backend option; (backend, options, features). Empty options never here.
OPTION_CLAIMS: tuple[tuple[str, tuple, frozenset], ...] = (
    ("triton", (("batch_invariant", True), ("split_keys", 32)), frozenset(NUMERICS)),
)
BATCH_SIZES = (2, 9, 65)          # with the target; 65: the target and 64 others (not on the interpreter)
INTERPRETER = "interp"

# (prefix, new) per family: the target first, then the pool it is batched with (cycled to
# the batch size). "long" prefixes make split counts and padded shapes differ from the
# target's own; the interpreter runs short ones (it is slow), the GPU long ones.
FAMILIES = {
    "decode": [(37, 1), (1, 1), (5, 1), (150, 1), (80, 1), (12, 1), (300, 1)],
    "extend": [(20, 7), (45, 3), (3, 30), (70, 12), (9, 2)],
    "chunked_prefill": [(16, 16), (0, 16), (0, 40), (32, 16), (0, 5)],
    "mixed_extend": [(20, 7), (33, 1), (0, 9), (150, 1), (4, 1)],
    "mixed_decode": [(33, 1), (20, 7), (0, 9), (150, 1), (0, 30)],
}
GPU_SCALE = 12                    # cuda: prefixes x12 (a 3600-key decode splits many ways)
INTERP_CAP = 64                   # interpreter: prefixes capped


@dataclass(frozen=True)
class BitConf:
    backend: str
    device: str
    kind: str
    dtype: str
    features: frozenset
    options: tuple = ()
    skip: str | None = None

    @property
    def id(self) -> str:
        opts = "-".join(f"{k}{v}" for k, v in self.options)
        return "-".join(p for p in (self.backend, self.device, self.kind, self.dtype, opts) if p)


def lengths(family: str, device: str) -> list[tuple[int, int]]:
    """The family's (prefix, new) pool at the device's scale."""
    pool = FAMILIES[family]
    if device == "cuda":
        return [(p * GPU_SCALE, n) for p, n in pool]
    if device == INTERPRETER:
        return [(min(p, INTERP_CAP), n) for p, n in pool]
    return pool


def batch_sizes(device: str) -> tuple[int, ...]:
    return tuple(n for n in BATCH_SIZES if device != INTERPRETER or n < 16)


def _devices(caps) -> list[str]:
    out = [d for d in ("cpu", "cuda") if d in caps.platforms]
    if "triton" in caps.requires and "cpu" not in caps.platforms:
        out.append(INTERPRETER)
    return out


def _skip(caps, device: str) -> str | None:
    for pkg in caps.requires:
        if importlib.util.find_spec(pkg) is None:
            return f"needs {pkg}, not installed"
    if device == INTERPRETER and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return "the Triton interpreter runs where there is no CUDA (tests/conftest.py)"
    return None


def claims() -> list[tuple[str, tuple, frozenset]]:
    """(backend, options, numeric features claimed): the declarations', then OPTION_CLAIMS."""
    out = [(name, (), frozenset(decl.capabilities.features) & frozenset(NUMERICS))
           for name, decl in declarations().items()]
    return [c for c in out if c[2]] + list(OPTION_CLAIMS)


def cases() -> list[BitConf]:
    decls = declarations()
    out = []
    for name, options, features in claims():
        caps = decls[name].capabilities
        for device in _devices(caps):
            dtypes = [d for d in caps.dtypes if not (device == INTERPRETER and d == "bf16")]
            for kind in caps.kinds:
                for dtype in dtypes:
                    out.append(BitConf(name, device, kind, dtype, features, options,
                                       _skip(caps, device)))
    return out
