"""The plan and the engine agree: the engine runs the dtype, device and page size its plan
says, on devices faked where this machine has none (a Turing GPU, a second GPU).

The oracle is the planner's rule stated here, not the code under test: bf16 needs CUDA sm80+,
so a bf16 checkpoint computes in fp16 on sm75; a checkpoint's config dtype is the default
compute dtype everywhere (the CPU too); ``cuda:1`` is planned for GPU 1.
"""
import dataclasses
import importlib
import json
import shutil

import pytest
import torch

import attnkit
from attnkit.hardware.platform import Platform
from attnkit.runner import LLM, Engine
from attnkit.runner.engine import build

detect_mod = importlib.import_module("attnkit.hardware.detect")   # hardware.detect is also the function


@pytest.fixture(scope="module")
def bf16_llama(tiny_model, tmp_path_factory):
    """The tiny llama checkpoint with its config saying bfloat16 (as published checkpoints do)."""
    src, _ = tiny_model("llama")
    dst = tmp_path_factory.mktemp("llama_bf16")
    for f in src.iterdir():
        shutil.copy(f, dst / f.name)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["dtype"] = "bfloat16"
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


class Built(Exception):
    """Raised in place of allocating on a GPU this machine does not have."""


@pytest.fixture
def fake_gpus(monkeypatch):
    """Two Tesla T4s (sm75) that torch seems to see; the engine stops where it would allocate
    its cache there and records what it was about to build, and which plan it built from."""
    asked = []

    def fake_detect(packages, index):
        asked.append(index)
        return Platform(kind="cuda", name="Tesla T4", capability=(7, 5), memory_gb=15.0,
                        packages=packages, arch="sm_75", index=index)

    monkeypatch.setattr(detect_mod, "_detect_with_torch", fake_detect)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    seen = {"asked": asked}
    plan_for = build.plan_for

    def recording_plan_for(*args, **kwargs):
        seen["plan"] = plan_for(*args, **kwargs)
        return seen["plan"]

    def stop(cls, arch, tensors, **kwargs):
        seen.update(kwargs)
        raise Built

    monkeypatch.setattr(build, "plan_for", recording_plan_for)
    monkeypatch.setattr(build, "assemble", stop)
    return seen


def test_sm75_runs_the_planned_fp16(bf16_llama, fake_gpus):
    """LLM's "auto" dtype is the planner's: fp16 on sm75 (it asked for bf16 there: AK309)."""
    with pytest.raises(Built):
        LLM(bf16_llama, device="cuda", cuda_graph="off")
    run = fake_gpus["plan"].run
    assert run.dtype == "fp16" == fake_gpus["compute"] == fake_gpus["kv"]
    assert attnkit.plan(str(bf16_llama), "t4").run.dtype == "fp16"      # `attnkit plan` says so too
    with pytest.raises(Built):                                          # the engine alike
        Engine.from_pretrained(bf16_llama, device="cuda", cuda_graph=False)
    assert fake_gpus["compute"] == "fp16"


def test_cuda_1_is_planned_for_gpu_1(bf16_llama, fake_gpus):
    with pytest.raises(Built):
        LLM(bf16_llama, device="cuda:1", cuda_graph="off")
    run = fake_gpus["plan"].run
    assert fake_gpus["asked"] == [1]                                    # GPU 1 was detected
    assert run.device.index == 1 and run.device.torch_device() == "cuda:1"
    assert fake_gpus["device"] == torch.device("cuda:1")                # and the cache goes there
    assert fake_gpus["plan"].platform["index"] == 1


def test_bare_cuda_is_the_current_gpu(bf16_llama, fake_gpus):
    with pytest.raises(Built):
        Engine.from_pretrained(bf16_llama, device="cuda", cuda_graph=False)
    assert fake_gpus["asked"] == [0] and fake_gpus["device"] == torch.device("cuda:0")


def test_cpu_dtype_is_the_planners(bf16_llama, tiny_model):
    """On the CPU the engine computes in the dtype `attnkit plan --device cpu` names for the
    same checkpoint: its config's (bf16 here, fp32 for the fp32 test checkpoints)."""
    planned = attnkit.plan(str(bf16_llama), "cpu").run.dtype
    assert planned == "bf16"
    llm = LLM(bf16_llama, device="cpu", attention_backend="torch_native", max_tokens=64)
    assert llm.plan.run.dtype == planned
    assert llm.engine.model.embed.dtype == torch.bfloat16 == llm.engine.cache.dtype
    fp32, _ = tiny_model("llama")
    engine = Engine.from_pretrained(fp32, backend="torch_native", max_tokens=64)
    assert engine.plan.run.dtype == attnkit.plan(str(fp32), "cpu").run.dtype == "fp32"
    assert engine.model.embed.dtype == torch.float32


def test_the_request_reaches_the_planner_as_parsed(bf16_llama, monkeypatch):
    """One parse: the PlanRequest the runner builds is the one plan() receives (not a dict
    re-keyed on the way), with every unset field left to the planner."""
    from attnkit.planning import solver
    from attnkit.planning.request import PlanRequest

    got = []
    real = solver.plan
    monkeypatch.setattr(solver, "plan", lambda model, platform, request, **kw:
                        got.append(request) or real(model, platform, request, **kw))
    request = PlanRequest(attention_backend="torch_native", dual_chunk="off")
    LLM(bf16_llama, request=request, device="cpu", max_tokens=64)
    assert got == [request] and got[0] is request
    LLM(bf16_llama, device="cpu", backend="torch_native", page_size="8", max_tokens=64)
    assert got[1] == dataclasses.replace(PlanRequest(), attention_backend="torch_native", page_size=8)


def test_a_backend_object_gets_the_planners_dtype_rule(bf16_llama):
    """No plan chooses for a backend object, so its dtype comes from the planner's own rule
    (the config's), not from a runner default."""
    from attnkit.registry import load_backend

    engine = Engine.from_pretrained(bf16_llama, backend=load_backend("torch_native"), page_size=4,
                                    max_tokens=32)
    assert engine.plan is None and engine.model.embed.dtype == torch.bfloat16 == engine.cache.dtype


def test_a_rocm_plan_runs_on_torchs_cuda_device():
    from attnkit.planning.run import DeviceRef

    assert DeviceRef("rocm", "AMD Instinct MI300X", 1).torch_device() == "cuda:1"
    assert DeviceRef("cpu", "x86_64 CPU").torch_device() == "cpu"
