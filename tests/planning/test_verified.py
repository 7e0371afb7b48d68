"""Declared versus verified: every GPU declaration lists the runs that proved it; plans for an
architecture none of them covered say so."""
import json

from attnkit.cli.main import main
from attnkit.hardware import Platform
from attnkit.registry import declarations
from attnkit.planning.solver import plan
from attnkit.planning.verified import unverified_warnings


def test_every_gpu_declaration_lists_where_it_was_verified():
    for name, decl in declarations().items():
        caps = decl.capabilities
        if "cuda" in caps.platforms:
            runs = [v for v in caps.verified if v.platform == "cuda"]
            assert runs and all(v.capability and v.device and v.date for v in runs), name


def test_an_unverified_architecture_is_named_in_a_warning():
    p = plan("llama-3.1-8b", "a100", profile=False)
    assert p.ok and p.prefill_backend == "triton"
    assert ("triton: declared for sm80+, verified on sm90 (NVIDIA H200, 2026-11-29) only; "
            "NVIDIA A100-SXM4-80GB is sm80, unverified") in p.warnings
    assert not [w for w in plan("llama-3.1-8b", "h100", profile=False).warnings if "verified" in w]
    t4 = plan("llama-3.1-8b", "t4", profile=False)                                   # sdpa: any capability
    assert any(w.startswith("sdpa: declared for cuda, verified on sm90") for w in t4.warnings)
    assert not [w for w in plan("llama-3.1-8b", "cpu", profile=False).warnings if "verified" in w]


def test_a_declaration_without_runs_on_the_platform_kind(monkeypatch):
    import dataclasses
    reg = dict(declarations())
    caps = dataclasses.replace(reg["triton"].capabilities, verified=())
    reg["triton"] = dataclasses.replace(reg["triton"], capabilities=caps)
    gpu = Platform(kind="cuda", name="NVIDIA B200", capability=(10, 0))
    assert unverified_warnings(reg, ["triton", None, "triton"], gpu) == [
        "triton: declared for sm80+, not verified on any cuda device; NVIDIA B200 is sm100"]


def test_backends_json_lists_the_verified_runs(capsys):
    assert main(["backends", "--device", "h100", "--json"]) == 0
    rows = {b["name"]: b["capabilities"] for b in json.loads(capsys.readouterr().out)["backends"]}
    assert rows["triton"]["verified"][0] == {"platform": "cuda", "capability": [9, 0], "device": "NVIDIA H200",
                                             "date": "2026-11-29", "record": rows["triton"]["verified"][0]["record"]}
    assert all("verified" in caps for caps in rows.values())
