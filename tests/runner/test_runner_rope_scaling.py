"""Scaled RoPE (linear, llama3, yarn) in the runner equals transformers: the frequencies and
attention factor against transformers' own rope functions, then whole models (prefill, each
decode step, greedy generation) on torch_native and sdpa at page sizes 1 and 16."""
import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.runner import Engine
from attnkit.runner.layers.rope import inv_freq, rope_config
from runner_helpers import edit_config, hf_greedy, hf_logits, prefill_then_decode_match

PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64], [4, 6, 8, 10], [3, 3, 3, 3, 3, 9, 17]]
SCALED = ["llama_llama3", "llama_yarn", "gpt_oss_yarn", "qwen2_linear"]
YARN = {"rope_type": "yarn", "factor": 16.0, "rope_theta": 500000.0,
        "original_max_position_embeddings": 2048}
ROPES = [
    {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "rope_theta": 500000.0, "original_max_position_embeddings": 8192},      # Llama-3.1's own
    YARN,
    {**YARN, "truncate": False, "beta_fast": 16.0, "beta_slow": 2.0},
    {**YARN, "attention_factor": 0.8},
    {**YARN, "mscale": 0.707, "mscale_all_dim": 1.0},
    {**YARN, "mscale": 1.0, "mscale_all_dim": 1.0},                         # DeepSeek-V2's pair
    {**YARN, "partial_rotary_factor": 0.5},
]


@pytest.mark.parametrize("rope", ROPES, ids=lambda r: "-".join(f"{k}={v}" for k, v in r.items()
                                                                if k != "rope_theta"))
def test_frequencies_equal_transformers(rope):
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4,
                                      max_position_embeddings=32768, rope_parameters=dict(rope))
    ref_freq, ref_factor = ROPE_INIT_FUNCTIONS[rope["rope_type"]](config)
    ours = rope_config(config.to_dict(), config.head_dim)
    assert ours.rotary_dim == 2 * ref_freq.numel()
    torch.testing.assert_close(inv_freq(ours).float(), ref_freq, rtol=1e-6, atol=0)
    assert ours.attention_factor == pytest.approx(ref_factor, rel=1e-12)
    plain = rope_config({"rope_theta": rope["rope_theta"]}, ours.rotary_dim)
    assert not torch.allclose(inv_freq(ours), inv_freq(plain))            # the scaling did act


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("backend", ["torch_native", "sdpa"])
@pytest.mark.parametrize("family", SCALED)
def test_prefill_and_each_decode_step_match_transformers(tiny_model, family, backend, page_size):
    if family == "gpt_oss_yarn" and backend == "sdpa":
        pytest.skip("sdpa has no attention sinks (the planner refuses it for gpt-oss)")
    path, hf = tiny_model(family)
    engine = Engine.from_pretrained(path, backend=backend, page_size=page_size)
    assert engine.model.rotary.rope.rope_type == hf.config.rope_parameters["rope_type"]
    prefill_then_decode_match(engine, hf, PROMPTS, decode_steps=3)


@pytest.mark.parametrize("family", SCALED)
def test_greedy_generation_matches_transformers(tiny_model, family):
    path, hf = tiny_model(family)
    backend = "torch_native" if family.startswith("gpt_oss") else "sdpa"
    engine = Engine.from_pretrained(path, backend=backend, page_size=16)
    assert engine.generate(PROMPTS, max_new_tokens=10) == [hf_greedy(hf, p, 10) for p in PROMPTS]


def test_the_scaling_is_what_matches(tiny_model, tmp_path):
    """The same weights with plain RoPE are measurably off transformers' scaled model: the
    match above is not one that ignoring rope_parameters would also pass."""
    path, hf = tiny_model("llama_llama3")
    plain = edit_config(path, tmp_path, rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    logits = Engine.from_pretrained(plain, backend="sdpa", page_size=16).prefill(PROMPTS[:1])[0]
    ref = hf_logits(hf, PROMPTS[0])
    assert (logits - ref).abs().max() / ref.abs().max() > 1e-2


@pytest.mark.parametrize("family,changes,code", [
    ("llama", {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}},
     "AK480"),
    ("llama", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "AK480"),
    # required fields of the type missing: the config reader's AK503 naming them
    ("llama", {"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "rope_theta": 1e4}},
     "AK503"),
    ("llama", {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4}}, "AK503"),
    ("qwen2_dca", {"rope_parameters": {**YARN, "rope_theta": 1e6}}, "AK480"),   # DCA rotates plain
])
def test_rope_the_runner_refuses(tiny_model, tmp_path, family, changes, code):
    path = edit_config(tiny_model(family)[0], tmp_path, **changes)
    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(path, page_size=4)
    assert err.value.code == code
