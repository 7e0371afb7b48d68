"""The device and software a profile is measured with (what its header records)."""
from __future__ import annotations

import platform as _platform
import re
import subprocess

import torch

import attnkit
from attnkit.errors import AttnkitError
from attnkit.hardware import Platform, detect
from attnkit.hardware.detect import cpu_platform

DEVICES = ("cuda", "cpu")


def platform_for(device: str) -> Platform:
    """The platform to tune: the first CUDA GPU (``cuda``) or this CPU (``cpu``); AK233 if absent."""
    if device not in DEVICES:
        raise AttnkitError("AK233", f"attnkit tune measures on cuda or cpu, not {device!r}",
                           field="device", expected=list(DEVICES), actual=device)
    if device == "cpu":
        return cpu_platform()
    found = detect() if torch.cuda.is_available() else None
    if found is None or found.kind != "cuda":
        what = "no CUDA GPU is visible to torch" if found is None else f"the GPU here is {found.kind}"
        raise AttnkitError("AK233", f"attnkit tune --device cuda needs an NVIDIA GPU: {what}",
                           field="device", expected="a CUDA GPU", actual=found.kind if found else None,
                           solutions=["run it on the GPU machine the profile is for",
                                      "use --device cpu --quick for a smoke run of the code path"])
    return found


def device_info(p: Platform) -> dict:
    info = {"kind": p.kind, "name": p.name, "capability": list(p.capability) if p.capability else None,
            "memory_gb": p.memory_gb, "arch": p.arch}
    if p.kind == "cuda":
        info["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
    return info


def software() -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"attnkit": attnkit.__version__, "torch": torch.__version__, "triton": triton_version,
            "cuda": torch.version.cuda, "driver": driver_version(), "python": _platform.python_version()}


def driver_version() -> str | None:
    """The NVIDIA driver version (nvidia-smi), or None without a GPU or the tool."""
    if not torch.cuda.is_available():
        return None
    try:
        run = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    first = run.stdout.strip().splitlines()[:1]
    return first[0].strip() if run.returncode == 0 and first else None


def slug(name: str) -> str:
    """``NVIDIA H200`` -> ``nvidia-h200`` (profile file names)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"
