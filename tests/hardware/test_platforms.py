"""Platform presets, resolution and detection."""
import importlib
import json
import subprocess
import sys

import pytest

from attnkit.errors import CATALOG, AttnkitError
from attnkit.hardware import Platform, detect, installed_packages, preset_names, resolve_platform

# attnkit.hardware.detect is also the name of the function, so fetch the module itself.
detect_module = importlib.import_module("attnkit.hardware.detect")

CAPABILITIES = {"t4": (7, 5), "a100": (8, 0), "l4": (8, 9), "h100": (9, 0), "h200": (9, 0),
                "b200": (10, 0), "rtx5090": (12, 0), "mi300x": (9, 4)}


def test_every_required_preset_exists():
    assert set(CAPABILITIES) | {"cpu", "cpu-arm", "mps"} <= set(preset_names())


@pytest.mark.parametrize("name", sorted(CAPABILITIES))
def test_gpu_presets(name):
    p = resolve_platform(name)
    assert p.capability == CAPABILITIES[name] and p.preset == name
    assert p.kind == ("rocm" if name == "mi300x" else "cuda")
    assert {"torch", "triton"} <= set(p.packages) and p.memory_gb > 0
    assert p.arch == ("gfx942" if name == "mi300x" else "sm_%d%d" % CAPABILITIES[name])


def test_cpu_and_mps_presets():
    cpu, arm, mps = (resolve_platform(n) for n in ("cpu", "cpu-arm", "mps"))
    assert (cpu.kind, cpu.arch, arm.kind, arm.arch, mps.kind) == ("cpu", "x86_64", "cpu", "arm64", "mps")
    for p in (cpu, arm, mps):
        assert p.capability is None and set(p.packages) == {"torch"}


def test_resolution_forms():
    h100 = resolve_platform("H100")
    assert h100.name == "NVIDIA H100 80GB HBM3"
    assert resolve_platform(h100) is h100
    h100.packages["triton"] = "0.0"   # a copy: the preset itself is unchanged
    assert resolve_platform("h100").packages["triton"] != "0.0"


def test_unknown_device_did_you_mean():
    with pytest.raises(AttnkitError) as info:
        resolve_platform("h10")
    err = info.value
    assert err.code == "AK200" and err.code in CATALOG
    assert "h100" in err.details["did_you_mean"] and "mi300x" in err.message
    with pytest.raises(AttnkitError) as info:
        resolve_platform(90)
    assert info.value.code == "AK201" and info.value.code in CATALOG


def test_to_dict_is_json():
    d = resolve_platform("mi300x").to_dict()
    assert d["capability"] == [9, 4] and d["kind"] == "rocm"
    assert json.loads(json.dumps(d)) == d
    assert Platform.from_dict(d) == resolve_platform("mi300x")
    assert Platform.from_dict(resolve_platform("cpu").to_dict()).capability is None
    assert hash(resolve_platform("h100")) == hash(resolve_platform("h100"))


def test_detect_without_torch(monkeypatch):
    monkeypatch.setattr(detect_module, "installed_packages", lambda: {})
    monkeypatch.setattr(detect_module._platform, "machine", lambda: "aarch64")
    p = detect_module.detect()
    assert (p.kind, p.arch, p.capability, p.packages) == ("cpu", "arm64", None, {})


def test_detect_here_matches_torch():
    torch = pytest.importorskip("torch")
    p = resolve_platform("auto")
    assert p.packages.get("torch", "").split("+")[0] == torch.__version__.split("+")[0]
    # Judged against torch itself, not against detect() (which "auto" calls).
    if torch.cuda.is_available():
        assert p.kind in ("cuda", "rocm")
        assert p.capability == tuple(torch.cuda.get_device_capability(0))
    else:
        assert p.kind in ("cpu", "mps", "xpu") and p.capability is None


def test_package_versions_come_without_importing():
    code = ("import sys; from attnkit.hardware import installed_packages, resolve_platform;"
            "from attnkit.model import load_model;"
            "installed_packages(); resolve_platform('h100'); load_model('deepseek-v3');"
            "print(sorted(m for m in ('torch', 'triton', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert set(installed_packages()) <= set(detect_module.KNOWN_PACKAGES)


@pytest.mark.gpu
def test_detect_on_a_cuda_machine_plans_for_it():
    """On a CUDA machine detect() names the GPU torch sees, and planning for it works."""
    import torch

    import attnkit

    found = detect()
    assert found.kind == "cuda"
    assert found.capability == tuple(torch.cuda.get_device_capability(0))
    assert found.name == torch.cuda.get_device_name(0)
    assert "torch" in found.packages and "triton" in found.packages
    plan = attnkit.plan("llama-3.1-8b", "auto")
    assert plan.ok and plan.decode_backend == "triton"
