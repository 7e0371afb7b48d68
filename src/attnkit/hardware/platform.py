"""``Platform``: the machine a plan is made for, as plain torch-free data.

A Platform comes from a preset (``h100``, ``cpu`` ...; planning without the hardware) or
from ``detect()`` (this machine). The planner reads nothing else about the hardware.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from attnkit.errors import AttnkitError

PLATFORM_KINDS = ("cuda", "rocm", "cpu", "mps", "xpu")
BF16_MIN_CUDA = (8, 0)   # bf16 arithmetic arrived with Ampere; Turing (sm75) and Volta have none


@dataclass(frozen=True)
class Platform:
    """One accelerator (or the CPU) and the packages importable next to it.

    ``capability`` is the CUDA compute capability ``(major, minor)``. ROCm GPUs report their
    gfx target the same way torch does on ROCm: ``gfx942`` -> ``(9, 4)``, ``gfx90a`` -> ``(9, 0)``;
    CPU and MPS have none. ``memory_gb`` is GiB of device memory (nominal for presets).
    ``packages`` maps importable name -> version (``{"torch": "2.11.0", "triton": "3.6.0"}``).
    ``arch`` names the instruction set: ``sm_90``, ``gfx942``, ``x86_64``, ``arm64``.
    ``index`` is which device of its kind (``cuda:1`` -> 1) when detected; None for presets
    and the CPU. ``shared_memory_kb`` is the shared memory (ROCm: LDS) one thread block may
    opt into, KB: geometry from the part's specification (presets) or the device (detected),
    which kernels' tile shapes must fit; None where unknown.
    """
    kind: str
    name: str
    capability: tuple[int, int] | None = None
    memory_gb: float | None = None
    packages: dict[str, str] = field(default_factory=dict)
    preset: str | None = None
    arch: str | None = None
    index: int | None = None
    shared_memory_kb: int | None = None

    def has_package(self, name: str) -> bool:
        return name in (self.packages or {})

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "capability": list(self.capability) if self.capability is not None else None,
            "memory_gb": self.memory_gb,
            "packages": dict(sorted((self.packages or {}).items())),   # None: none known
            "preset": self.preset,
            "arch": self.arch,
            "index": self.index,
            "shared_memory_kb": self.shared_memory_kb,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Platform":
        """The inverse of ``to_dict`` (JSON lists back to a capability tuple)."""
        cap = d.get("capability")
        return cls(kind=d["kind"], name=d["name"], capability=tuple(cap) if cap is not None else None,
                   memory_gb=d.get("memory_gb"), packages=dict(d.get("packages") or {}),
                   preset=d.get("preset"), arch=d.get("arch"), index=d.get("index"),
                   shared_memory_kb=d.get("shared_memory_kb"))

    def __hash__(self) -> int:  # packages is a dict; hash the rest plus its items
        return hash((self.kind, self.name, self.capability, self.memory_gb,
                     tuple(sorted((self.packages or {}).items())), self.preset, self.arch,
                     self.index, self.shared_memory_kb))


def compute_dtypes(platform: Any) -> tuple[str, ...]:
    """The compute dtypes the hardware has: bf16 needs CUDA sm80+ (Ampere); ROCm (MI200/MI300),
    CPUs (torch computes bf16 there), MPS and XPU have all three."""
    cc = getattr(platform, "capability", None)
    if getattr(platform, "kind", None) == "cuda" and cc is not None and tuple(cc) < BF16_MIN_CUDA:
        return ("fp32", "fp16")
    return ("fp32", "fp16", "bf16")


def arch_label(kind: str, capability, arch: str | None) -> str | None:
    """How the architecture is named: ``sm90`` for CUDA, the gfx target (``gfx942``) for ROCm,
    whose "capability" is only torch's (major, minor) reading of it; None without one."""
    if kind == "rocm" and arch:
        return arch
    return f"sm{capability[0]}{capability[1]}" if capability else None


def validate_platform(platform: Any) -> None:
    """AK201 naming the first field of ``platform`` (a Platform or a look-alike) that planning
    cannot use."""
    def bad(field_: str, why: str, value: Any) -> AttnkitError:
        return AttnkitError("AK201", f"platform.{field_} = {value!r:.80}: {why}", field=f"platform.{field_}",
                            actual=repr(value)[:80], expected=why,
                            solutions=["build the Platform with a preset (attnkit.hardware.get_preset) or "
                                       "fix the named field"])
    kind, name = getattr(platform, "kind", None), getattr(platform, "name", None)
    if kind not in PLATFORM_KINDS:
        raise bad("kind", f"one of {', '.join(PLATFORM_KINDS)}", kind)
    if not isinstance(name, str) or not name.strip():
        raise bad("name", "a non-empty string", name)
    cc = getattr(platform, "capability", None)
    if cc is not None and not (isinstance(cc, (tuple, list)) and len(cc) == 2 and all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 1000 for c in cc)):
        raise bad("capability", "None or (major, minor), two integers in 0 .. 999", cc)
    memory = getattr(platform, "memory_gb", None)
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, float))
                               or not math.isfinite(memory) or memory <= 0):
        raise bad("memory_gb", "None or a finite number > 0", memory)
    packages = getattr(platform, "packages", None)
    if packages is None:
        packages = {}
    if not isinstance(packages, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in packages.items()):
        raise bad("packages", "a dict of import name -> version string", packages)
    index = getattr(platform, "index", None)
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
        raise bad("index", "None or a device index >= 0", index)
    smem = getattr(platform, "shared_memory_kb", None)
    if smem is not None and (isinstance(smem, bool) or not isinstance(smem, int) or smem <= 0):
        raise bad("shared_memory_kb", "None or an integer > 0 (KB)", smem)
    for field_ in ("preset", "arch"):
        value = getattr(platform, field_, None)
        if value is not None and not isinstance(value, str):
            raise bad(field_, "None or a string", value)
