"""Which backends to try first, as data: (platform kind, compute capability, kind, phase) -> order.

Where a device profile covers the platform (planning/profile_search.py), the solver ranks the
backends that serve every layer by it, and these tables only break ties among unmeasured ones.
Elsewhere it walks the first matching entry's ``backends`` in order and takes the first one that
serves every layer. Names that are not registered are skipped, so a table may name a backend
before it lands. Each entry says ``why`` it is ordered so, in words only: no benchmark figure is
typed here (they go stale with every kernel change); the solver appends the rates the shipped
profile measured for these backends, read from its file (planning/profile_choice.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from attnkit.registry.capabilities import KINDS, PHASES

Capability = tuple[int, int]


@dataclass(frozen=True)
class Priority:
    platform: str                       # platform kind: cuda, rocm, cpu, mps, xpu
    kinds: tuple[str, ...]              # "mha", "mla"
    phases: tuple[str, ...]             # "prefill", "decode"
    backends: tuple[str, ...]           # tried in this order
    why: str
    min_capability: Capability | None = None   # inclusive; None = any
    max_capability: Capability | None = None   # inclusive; None = no upper bound
    # the entry is for models that need every one of these (DeepSeek sparse attention:
    # {"sparse_topk"}); empty: any model of the kinds
    features: frozenset[str] = frozenset()

    def matches(self, platform_kind: str, capability: Capability | None, kind: str, phase: str,
                features: frozenset[str] = frozenset()) -> bool:
        if platform_kind != self.platform or kind not in self.kinds or phase not in self.phases:
            return False
        if not self.features <= features:
            return False
        if self.min_capability is not None and (capability is None or tuple(capability) < self.min_capability):
            return False
        if self.max_capability is not None and capability is not None and tuple(capability) > self.max_capability:
            return False
        return True


BOTH = PHASES
# More specific entries first: the first match wins.
TABLE: tuple[Priority, ...] = (
    Priority("cuda", ("mha",), BOTH, ("triton", "sdpa", "torch_native"), min_capability=(8, 0),
             why="Ampere and newer: attnkit's paged Triton kernels read the paged cache in place; "
                 "sdpa gathers the cached pages into a dense copy first (a prefill without a cached "
                 "prefix runs on the new K/V directly); torch_native is the portable fallback."),
    Priority("cuda", ("mha",), BOTH, ("sdpa", "triton", "torch_native"),
             why="Pre-Ampere GPUs (e.g. T4): the triton backend is declared for sm80 and newer only, "
                 "so torch's SDPA kernels go first."),
    Priority("cuda", ("mla",), BOTH, ("triton_dsa", "torch_native"), features=frozenset({"sparse_topk"}),
             why="DeepSeek sparse attention (each query attends to its indexer's top-k): triton_dsa "
                 "scores the paged index keys and gathers only the selected latent rows; "
                 "torch_native scores and masks per request in plain torch, the portable baseline."),
    Priority("cuda", ("mla",), BOTH, ("triton_mla", "sdpa", "torch_native"),
             why="MLA: triton_mla reads the paged latent cache in place (absorbed form for decode, "
                 "the MHA form for long new chunks); sdpa computes the same forms but gathers the "
                 "latent pages into a dense copy first; torch_native is the fallback."),
    Priority("rocm", ("mha",), BOTH, ("sdpa", "triton", "torch_native"),
             why="ROCm: torch's SDPA dispatches to the AMD kernels; attnkit's Triton kernels have "
                 "run on NVIDIA GPUs only."),
    Priority("rocm", ("mla",), BOTH, ("sdpa", "torch_native"),
             why="ROCm MLA: triton_mla is declared for CUDA only (nothing of it has run on ROCm); "
                 "the portable backends, in the CPU order."),
    Priority("cpu", ("mha",), BOTH, ("sdpa", "torch_native"),
             why="CPU: torch SDPA uses the fused CPU flash kernel; torch_native is the fallback."),
    Priority("cpu", ("mla",), BOTH, ("torch_native",), features=frozenset({"sparse_topk"}),
             why="CPU DeepSeek sparse attention: torch_native scores and masks per request, the "
                 "one portable implementation."),
    Priority("cpu", ("mla",), BOTH, ("sdpa", "torch_native"),
             why="CPU MLA: sdpa makes one fused call per layer (absorbed form for decode, decompressed "
                 "for long prefills); torch_native loops over requests."),
    Priority("mps", ("mha",), BOTH, ("sdpa", "torch_native"),
             why="Apple MPS: SDPA has a Metal kernel; torch_native is the fallback."),
    Priority("mps", ("mla",), BOTH, ("torch_native",),
             why="Apple MPS MLA: only the portable implementation."),
    Priority("xpu", ("mha",), BOTH, ("sdpa", "torch_native"),
             why="Intel XPU: SDPA dispatches to oneDNN kernels; torch_native is the fallback."),
    Priority("xpu", ("mla",), BOTH, ("torch_native",),
             why="Intel XPU MLA: only the portable implementation."),
)


def lookup(platform_kind: str, capability: Capability | None, kind: str, phase: str,
           *, table: tuple[Priority, ...] = TABLE, features: frozenset[str] = frozenset()) -> Priority | None:
    """The first entry that matches (``features``: the model's), or None when no table covers
    this platform."""
    if kind not in KINDS or phase not in PHASES:
        return None
    for entry in table:
        if entry.matches(platform_kind, capability, kind, phase, frozenset(features)):
            return entry
    return None


def named_backends(table: tuple[Priority, ...] = TABLE) -> frozenset[str]:
    """Every backend some entry names (used to prove each registered backend is reachable)."""
    return frozenset(name for entry in table for name in entry.backends)


def choice_text(entry: Priority, platform_kind: str, kind: str, *, registered, skipped: list[str]) -> tuple[str, str]:
    """Why the first serving backend of ``entry`` was taken: (the phase's reason, the
    adjustment's one-line summary). ``skipped``: the earlier names that cannot serve."""
    order = [n for n in entry.backends if n in registered]
    absent = [n for n in entry.backends if n not in registered]
    table = kind + "".join(f"+{f}" for f in sorted(entry.features))
    why = (f"first in the {platform_kind} {table} priority order ({', '.join(order)}) that serves every layer"
           + (f" ({', '.join(skipped)} cannot)" if skipped else "")
           + (f"; {', '.join(absent)}: not in this attnkit's registry" if absent else "")
           + f". {entry.why}")
    return why, f"first that serves every layer in the {platform_kind}/{table} priority order ({', '.join(order)})"
