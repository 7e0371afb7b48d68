"""The bitwise cases: which (backend, options) claim ``batch_invariant`` / ``deterministic``,
read from the declarations (never a hand list), and the batches that prove it.

A claim is proven per device a test can reach (cpu; the Triton interpreter for CUDA-only
Triton backends; cuda, marked gpu), per kind and per compute dtype (the interpreter leaves
bf16 to the GPU, conformance_cases._axes says why). A backend claims them in its capabilities
(every kernel), or through kernel variants that declare them (registry/kernels.py
``KernelVariant.numerics``): then the claim is the backend run with kernel tables naming only
those variants, one per role (what a plan with ``--require`` hands it).

Each family below is a pool of requests (prefix length, new tokens) around one *target*; the
target's rows alone are compared, bit for bit, with its rows in batches of the others: every
batch size of BATCH_SIZES, the target first, last and in the middle, the others reversed.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import itertools

from attnkit.registry import declarations
from attnkit.registry.capabilities import NUMERICS
from attnkit.registry.kernels import ROLES, KernelTable

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
    variants: tuple = ()          # ((role, variant), ...): the kernel tables it runs with
    skip: str | None = None

    @property
    def id(self) -> str:
        names = "+".join(dict.fromkeys(v for _, v in self.variants))
        return "-".join(p for p in (self.backend, self.device, self.kind, self.dtype, names) if p)

    def options(self) -> dict:
        """The backend's options: kernel tables of the claiming variants, as a plan hands them."""
        if not self.variants:
            return {}
        return {"kernels": {role: KernelTable.only(role, v) for role, v in self.variants}}


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
    """(backend, ((role, variant), ...), numeric features claimed): each backend's own claim,
    and for a backend with variants every combination of one claiming variant per role, with
    what they all declare (a role without one: no claim through variants)."""
    out = []
    for name, decl in declarations().items():
        own = frozenset(decl.capabilities.features) & frozenset(NUMERICS)
        if own:
            out.append((name, (), own))
            continue
        per_role = [[(role, k) for k in decl.variants_for(role) if k.numerics]
                    for role in ROLES if decl.variants_for(role)]
        if not per_role or not all(per_role):
            continue
        for combo in itertools.product(*per_role):
            common = frozenset.intersection(*(frozenset(k.numerics) for _, k in combo))
            if common:
                out.append((name, tuple((role, k.name) for role, k in combo), common))
    return out


def cases() -> list[BitConf]:
    decls = declarations()
    out = []
    for name, variants, features in claims():
        caps = decls[name].capabilities
        for device in _devices(caps):
            dtypes = [d for d in caps.dtypes if not (device == INTERPRETER and d == "bf16")]
            for kind in caps.kinds:
                for dtype in dtypes:
                    out.append(BitConf(name, device, kind, dtype, features, variants,
                                       _skip(caps, device)))
    return out
