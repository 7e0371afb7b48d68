"""Every way to misuse the runner gets an attnkit error with a catalogued code."""
import json

import pytest
import torch

from attnkit.errors import CATALOG, AttnkitError
from attnkit.runner import Engine


def code_of(call) -> str:
    with pytest.raises(AttnkitError) as info:
        call()
    assert info.value.code in CATALOG
    return info.value.code


@pytest.fixture(scope="module")
def llama(tiny_model):
    return tiny_model("llama")[0]


def copy_with(src, dst, *, config=None, drop=(), reshape=None):
    """A copy of a model directory with its config edited and tensors dropped or resized."""
    from safetensors.torch import load_file, save_file

    cfg = json.loads((src / "config.json").read_text())
    cfg.update(config or {})
    (dst / "config.json").write_text(json.dumps(cfg))
    tensors = {k: v for k, v in load_file(str(src / "model.safetensors")).items() if k not in drop}
    for name, shape in (reshape or {}).items():
        tensors[name] = torch.zeros(shape)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def test_backends_are_checked_by_the_planner(llama, tiny_model):
    assert code_of(lambda: Engine.from_pretrained(llama, backend="tritn")) == "AK300"
    assert code_of(lambda: Engine.from_pretrained(llama, backend="flashinfer")) == "AK301"
    assert code_of(lambda: Engine.from_pretrained(llama, backend="triton")) == "AK121"   # CPU
    gemma = tiny_model("gemma2")[0]
    assert code_of(lambda: Engine.from_pretrained(gemma, backend="sdpa")) == "AK121"   # softcap
    assert Engine.from_pretrained(gemma).backend.name == "torch_native"                # chosen
    gpt_oss = tiny_model("gpt_oss")[0]
    assert code_of(lambda: Engine.from_pretrained(gpt_oss, backend="sdpa")) == "AK121"  # sinks
    with pytest.warns(UserWarning, match="deprecated"):
        engine = Engine.from_pretrained(llama, backend="torch")
    assert engine.backend.name == "torch_native" and engine.plan.ok
    assert code_of(lambda: Engine.from_pretrained(llama, backend=3)) == "AK306"   # the request's parse
    # load_backend refuses an option the backend lacks itself (AK407, issue 13)
    assert code_of(lambda: Engine.from_pretrained(llama, backend_options={"nope": 1})) == "AK407"
    native = Engine.from_pretrained(llama, backend="torch_native", backend_options={"mla_form": "mha"})
    assert native.backend.mla_form == "mha"


def test_sources_and_weights(llama, tmp_path):
    assert code_of(lambda: Engine.from_pretrained(tmp_path / "nowhere")) == "AK481"
    assert code_of(lambda: Engine.from_pretrained("meta-llama/Llama-3.1-8B")) == "AK481"
    assert code_of(lambda: Engine.from_pretrained(42)) == "AK481"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text((llama / "config.json").read_text())
    assert code_of(lambda: Engine.from_pretrained(tmp_path / "empty")) == "AK481"
    for name, kwargs in [("missing", dict(drop={"model.layers.1.mlp.up_proj.weight"})),
                         ("resized", dict(reshape={"model.norm.weight": (65,)}))]:
        (tmp_path / name).mkdir()
        path = copy_with(llama, tmp_path / name, **kwargs)
        assert code_of(lambda: Engine.from_pretrained(path)) == "AK481"


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.bool])
def test_integer_weights_are_refused_not_cast(llama, tmp_path, dtype):
    """Integer or bool tensors (packed / quantized data) were silently cast to floats."""
    from safetensors.torch import load_file, save_file

    path = copy_with(llama, tmp_path)
    tensors = load_file(str(path / "model.safetensors"))
    tensors["model.layers.0.mlp.up_proj.weight"] = tensors["model.layers.0.mlp.up_proj.weight"].to(dtype)
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(path, backend="torch_native", page_size=4)
    assert err.value.code == "AK481" and err.value.field == "model.layers.0.mlp.up_proj.weight"


@pytest.mark.parametrize("config", [{"model_type": "gpt2"},
                                    {"rope_parameters": {"rope_type": "dynamic", "factor": 8.0,
                                                         "rope_theta": 5e5}},
                                    {"hidden_act": "relu"}])
def test_configs_the_runner_cannot_run(llama, tmp_path, config):
    path = copy_with(llama, tmp_path, config=config)
    assert code_of(lambda: Engine.from_pretrained(path)) == "AK480"


def test_bad_requests_leave_the_engine_unchanged(llama):
    engine = Engine.from_pretrained(llama, page_size=4, max_tokens=16)
    engine.prefill([[1, 2, 3]], ids=["a"])
    before = (engine.ids, engine.allocator.num_free)
    for call in (lambda: engine.prefill([[1, 500]]),                 # outside the vocabulary
                 lambda: engine.prefill([[]]),                       # empty prompt
                 lambda: engine.prefill([[1], [2]], ids=["x"]),      # counts disagree
                 lambda: engine.decode([5], ids=["zz"]),             # unknown sequence
                 lambda: engine.decode([5, 6]),                      # one live sequence only
                 lambda: engine.step({"a": [1]}, logits="some"),
                 lambda: engine.generate([1, 2], max_new_tokens=-1)):
        assert code_of(call) == "AK483"
    assert code_of(lambda: engine.prefill([list(range(20))])) == "AK400"   # 16 tokens of room
    assert (engine.ids, engine.allocator.num_free) == before
    assert code_of(lambda: Engine.from_pretrained(llama, dtype="int8")) == "AK306"   # the planner's
    assert code_of(lambda: Engine.from_pretrained(llama, kv_cache_dtype="int4")) == "AK306"


def test_a_step_refused_by_the_backend_is_rolled_back(tiny_model):
    from attnkit.registry import load_backend

    path = tiny_model("qwen2_dca")[0]
    assert code_of(lambda: Engine.from_pretrained(path, page_size=5)) == "AK303"   # planner
    # A backend object is used unchecked: page size 5 does not divide the chunk length 12.
    engine = Engine.from_pretrained(path, backend=load_backend("dual_chunk"), page_size=5)
    assert code_of(lambda: engine.prefill([[1, 2, 3]])) == "AK470"
    assert engine.ids == [] and engine.allocator.num_free == engine.allocator.num_pages


def test_import_is_light():
    import subprocess
    import sys

    code = ("import sys, attnkit.runner; "
            "print(any(m in sys.modules for m in ('torch', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
