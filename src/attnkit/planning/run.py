"""``RunSpec``: what a plan runs, as one frozen, typed record (``Plan.run``).

Everything the runner, ``attnkit generate``, the integrations and ``attnkit tune`` need to
execute a plan, read from here and nothing re-derived: per role (fresh prefill, extend over
a cached prefix, decode) the backend and its kernel table (registry/kernels.py: the variant
per measured bucket, with its rate); the page size; compute and KV dtypes; CUDA graphs;
tensor parallelism and heads per rank; dual chunk; the device planned for (index included).
``Plan.settings`` stays as the explained, printable form of the same values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from attnkit.registry.kernels import ROLES, KernelTable


@dataclass(frozen=True)
class RoleRun:
    role: str                       # "prefill" | "extend" | "decode" | "varlen" (the varlen call)
    backend: str
    kernels: KernelTable | None     # None: the backend has one kernel for the role

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "backend": self.backend,
                "kernels": None if self.kernels is None else self.kernels.to_dict()}


@dataclass(frozen=True)
class DeviceRef:
    """The device a plan was made for: its kind, index (None: the default / a preset), name."""
    kind: str
    name: str
    index: int | None = None
    capability: tuple[int, int] | None = None

    def torch_device(self) -> str:
        """``"cuda:1"``, ``"cuda"``, ``"cpu"``: the string torch.device takes (ROCm GPUs are
        torch's "cuda" devices)."""
        kind = "cuda" if self.kind == "rocm" else self.kind
        return kind if self.index is None or kind == "cpu" else f"{kind}:{self.index}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "index": self.index,
                "capability": list(self.capability) if self.capability else None}


@dataclass(frozen=True)
class RunSpec:
    roles: tuple[RoleRun, ...]      # prefill, extend (encoders: none), decode (encoders: none)
    dtype: str                      # "fp32" | "fp16" | "bf16"
    kv_cache_dtype: str
    page_size: int
    cuda_graph: bool
    tp_size: int
    heads_per_rank: int | None
    kv_heads_per_rank: int | None
    kv_layout: str                  # "per_head_kv" | "latent"
    dual_chunk: bool                # the layers with dual_chunk_attention_config run it (else plain RoPE)
    speculative_tokens: int
    device: DeviceRef
    numerics: tuple[str, ...] = ()  # --require: what every chosen backend declares (batch_invariant ...)

    def role(self, name: str) -> RoleRun | None:
        return next((r for r in self.roles if r.role == name), None)

    @property
    def backends(self) -> dict[str, str]:
        """role -> backend name."""
        return {r.role: r.backend for r in self.roles}

    def backend_options(self, backend: str) -> dict[str, Any]:
        """The options the plan hands ``backend``: its kernel tables for the roles it runs
        (``{"kernels": {role: KernelTable}}``), or none when it has no variants."""
        tables = {r.role: r.kernels for r in self.roles if r.backend == backend and r.kernels is not None}
        return {"kernels": tables} if tables else {}

    def to_dict(self) -> dict[str, Any]:
        return {"roles": {r.role: r.to_dict() for r in self.roles}, "dtype": self.dtype,
                "kv_cache_dtype": self.kv_cache_dtype, "page_size": self.page_size,
                "cuda_graph": self.cuda_graph, "tp_size": self.tp_size,
                "heads_per_rank": self.heads_per_rank, "kv_heads_per_rank": self.kv_heads_per_rank,
                "kv_layout": self.kv_layout, "dual_chunk": self.dual_chunk,
                "speculative_tokens": self.speculative_tokens, "device": self.device.to_dict(),
                "numerics": list(self.numerics)}


def run_spec(backends: Mapping[str, str | None], settings: Mapping[str, Any], platform,
             kernels: Mapping[str, KernelTable | None], *, has_decode: bool) -> RunSpec:
    """The RunSpec of a finished plan: ``backends`` (prefill, extend, decode -> name),
    ``settings`` (the plan's filled settings), ``kernels`` (role -> table)."""
    names = {"prefill": backends["prefill"], "extend": backends.get("extend") or backends["prefill"],
             "decode": backends.get("decode"),
             "varlen": backends["prefill"] if "varlen" in kernels else None}   # the varlen call: its table
    roles = tuple(RoleRun(role, names[role], kernels.get(role)) for role in ROLES
                  if names[role] is not None and (has_decode or role in ("prefill", "varlen")))
    cc = getattr(platform, "capability", None)
    device = DeviceRef(platform.kind, platform.name, getattr(platform, "index", None),
                       tuple(cc) if cc is not None else None)
    return RunSpec(roles=roles, dtype=settings["dtype"], kv_cache_dtype=settings["kv_cache_dtype"],
                   page_size=settings["page_size"], cuda_graph=bool(settings.get("cuda_graph")),
                   tp_size=settings.get("tp_size") or 1, heads_per_rank=settings.get("heads_per_rank"),
                   kv_heads_per_rank=settings.get("kv_heads_per_rank"),
                   kv_layout=settings.get("kv_layout", "per_head_kv"),
                   dual_chunk=settings.get("dual_chunk") == "on",
                   speculative_tokens=settings.get("speculative_tokens") or 0, device=device)
