"""Platform presets: plan for a machine you are not on (``--device h100``).

GPU presets assume a typical serving install: torch and triton importable, at the versions in
``GPU_STACK`` below; CPU and MPS presets have torch only. Memory is the nominal device size.
Names are what ``torch.cuda.get_device_name()`` prints on that card.
"""
from __future__ import annotations

from attnkit.hardware.platform import Platform

# Assumed versions of a current serving install (state them; the planner may check minimums).
GPU_STACK = {"torch": "2.11.0", "triton": "3.6.0"}
CPU_STACK = {"torch": "2.11.0"}


def _gpu(preset: str, name: str, cc: tuple[int, int], memory_gb: float, smem_kb: int) -> Platform:
    return Platform(kind="cuda", name=name, capability=cc, memory_gb=memory_gb,
                    packages=dict(GPU_STACK), preset=preset, arch=f"sm_{cc[0]}{cc[1]}",
                    shared_memory_kb=smem_kb)


# Shared memory a block may opt into: the compute capability's figure in the CUDA C
# Programming Guide's table of technical specifications (what torch reports as
# shared_memory_per_block_optin on the card): geometry, not a measurement.
PRESETS: dict[str, Platform] = {
    "t4": _gpu("t4", "Tesla T4", (7, 5), 16.0, 64),
    "a100": _gpu("a100", "NVIDIA A100-SXM4-80GB", (8, 0), 80.0, 163),
    "l4": _gpu("l4", "NVIDIA L4", (8, 9), 24.0, 99),
    "h100": _gpu("h100", "NVIDIA H100 80GB HBM3", (9, 0), 80.0, 227),
    "h200": _gpu("h200", "NVIDIA H200", (9, 0), 141.0, 227),
    "b200": _gpu("b200", "NVIDIA B200", (10, 0), 180.0, 227),
    "rtx5090": _gpu("rtx5090", "NVIDIA GeForce RTX 5090", (12, 0), 32.0, 99),
    # ROCm: torch on ROCm reports gfx942 as capability (9, 4); triton ships as pytorch-triton-rocm.
    # 64 KB of LDS a workgroup (CDNA3).
    "mi300x": Platform(kind="rocm", name="AMD Instinct MI300X", capability=(9, 4), memory_gb=192.0,
                       packages=dict(GPU_STACK), preset="mi300x", arch="gfx942", shared_memory_kb=64),
    "cpu": Platform(kind="cpu", name="x86_64 CPU", packages=dict(CPU_STACK), preset="cpu",
                    arch="x86_64"),
    "cpu-arm": Platform(kind="cpu", name="arm64 CPU", packages=dict(CPU_STACK), preset="cpu-arm",
                        arch="arm64"),
    "mps": Platform(kind="mps", name="Apple silicon GPU (MPS)", packages=dict(CPU_STACK),
                    preset="mps", arch="arm64"),
}


def preset_names() -> list[str]:
    """Every platform preset name, in a stable order (sorted)."""
    return sorted(PRESETS)
