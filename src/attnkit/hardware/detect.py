"""Detect this machine's platform. Torch is used only if installed, and imported only here.

Package versions come from installed distribution metadata, so detection never imports
triton, transformers or any kernel library.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import platform as _platform

from attnkit.errors import fail
from attnkit.hardware.platform import Platform

# importable name -> distribution names that provide it (first installed one wins).
KNOWN_PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "triton": ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu"),
    "transformers": ("transformers",),
    "flash_attn": ("flash-attn", "flash_attn"),
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "xformers": ("xformers",),
}


def installed_packages() -> dict[str, str]:
    """importable name -> version, for the packages attnkit cares about; nothing is imported."""
    found: dict[str, str] = {}
    for module, dists in KNOWN_PACKAGES.items():
        version = _dist_version(dists)
        if version is None and _findable(module):
            version = "unknown"   # importable but without metadata (e.g. a source checkout)
        if version is not None:
            found[module] = version
    return found


def _dist_version(dists: tuple[str, ...]) -> str | None:
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def require_package(package: str, used_by: str) -> None:
    """AK212 with the install line unless ``package`` (torch, triton, transformers) is importable:
    planning needs none of them, running does (``pip install 'attnkit[torch]'`` brings torch)."""
    if _findable(package):
        return
    extra = package if package in ("torch", "triton", "transformers") else None
    install = (f"pip install 'attnkit[{extra}]'" if extra else f"pip install {package}") + (
        " (on a GPU machine install your CUDA build of torch first)" if package in ("torch", "triton") else "")
    fail("AK212", f"{used_by} runs with {package}, which is not installed (planning needs no {package}; "
                  "running does)", field="requires", expected=[package], actual=package,
         solutions=[install, "or plan only: attnkit plan MODEL --device D"])


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def host_arch() -> str:
    """``x86_64`` or ``arm64`` (aarch64 and AMD64 spelled the usual way), else the raw machine."""
    machine = _platform.machine().lower()
    aliases = {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64"}
    return aliases.get(machine, machine or "unknown")


def detect(index: int | None = None) -> Platform:
    """This machine: GPU ``index`` torch sees (CUDA, ROCm, XPU; default the first, or MPS),
    else the CPU. The Platform records the index it describes."""
    packages = installed_packages()
    if "torch" in packages:
        found = _detect_with_torch(packages, 0 if index is None else index)
        if found is not None:
            return found
    return cpu_platform(packages)


def cpu_platform(packages: dict[str, str] | None = None) -> Platform:
    """This machine's CPU, with the packages installed here (found if not given)."""
    arch = host_arch()
    return Platform(kind="cpu", name=f"{arch} CPU",
                    packages=installed_packages() if packages is None else packages, arch=arch)


def _detect_with_torch(packages: dict[str, str], index: int) -> Platform | None:
    try:
        import torch
    except Exception:   # a broken torch install must not break planning
        return None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(index)
        capability = tuple(torch.cuda.get_device_capability(index))
        memory = round(props.total_memory / 2**30, 1)
        optin = getattr(props, "shared_memory_per_block_optin", None)
        smem = int(optin) // 1024 if optin else None
        if getattr(torch.version, "hip", None):
            gfx = str(getattr(props, "gcnArchName", "") or "").split(":")[0] or None
            return Platform(kind="rocm", name=props.name, capability=capability, memory_gb=memory,
                            packages=packages, arch=gfx, index=index, shared_memory_kb=smem)
        return Platform(kind="cuda", name=props.name, capability=capability, memory_gb=memory,
                        packages=packages, arch=f"sm_{capability[0]}{capability[1]}", index=index,
                        shared_memory_kb=smem)
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return Platform(kind="xpu", name=xpu.get_device_name(index), packages=packages,
                        arch=host_arch(), index=index)
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return Platform(kind="mps", name="Apple silicon GPU (MPS)", packages=packages, arch="arm64")
    return None
