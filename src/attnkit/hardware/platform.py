"""``Platform``: the machine a plan is made for, as plain torch-free data.

A Platform comes from a preset (``h100``, ``cpu`` ...; planning without the hardware) or
from ``detect()`` (this machine). The planner reads nothing else about the hardware.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PLATFORM_KINDS = ("cuda", "rocm", "cpu", "mps", "xpu")


@dataclass(frozen=True)
class Platform:
    """One accelerator (or the CPU) and the packages importable next to it.

    ``capability`` is the CUDA compute capability ``(major, minor)``. ROCm GPUs report their
    gfx target the same way torch does on ROCm: ``gfx942`` -> ``(9, 4)``, ``gfx90a`` -> ``(9, 0)``;
    CPU and MPS have none. ``memory_gb`` is GiB of device memory (nominal for presets).
    ``packages`` maps importable name -> version (``{"torch": "2.11.0", "triton": "3.6.0"}``).
    ``arch`` names the instruction set: ``sm_90``, ``gfx942``, ``x86_64``, ``arm64``.
    """
    kind: str
    name: str
    capability: tuple[int, int] | None = None
    memory_gb: float | None = None
    packages: dict[str, str] = field(default_factory=dict)
    preset: str | None = None
    arch: str | None = None

    def has_package(self, name: str) -> bool:
        return name in self.packages

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "capability": list(self.capability) if self.capability is not None else None,
            "memory_gb": self.memory_gb,
            "packages": dict(sorted(self.packages.items())),
            "preset": self.preset,
            "arch": self.arch,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Platform":
        """The inverse of ``to_dict`` (JSON lists back to a capability tuple)."""
        cap = d.get("capability")
        return cls(kind=d["kind"], name=d["name"], capability=tuple(cap) if cap is not None else None,
                   memory_gb=d.get("memory_gb"), packages=dict(d.get("packages") or {}),
                   preset=d.get("preset"), arch=d.get("arch"))

    def __hash__(self) -> int:  # packages is a dict; hash the rest plus its items
        return hash((self.kind, self.name, self.capability, self.memory_gb,
                     tuple(sorted(self.packages.items())), self.preset, self.arch))
