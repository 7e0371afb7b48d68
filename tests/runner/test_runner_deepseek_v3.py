"""DeepSeek-V3 (sigmoid noaux_tc router with score-correction bias, MLA) on attnkit's MLA
backends equals transformers' DeepseekV3ForCausalLM (fp32): prefill rows, every decode step,
greedy generation, on torch_native and sdpa at page sizes 1 and 16; Kimi-K2's model_type
runs the same code. The router equals transformers' own, and the tests fail when the
correction bias, the sigmoid or the renormalisation is dropped."""
import dataclasses

import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.runner import Engine
from attnkit.runner.models.config import architecture_of
from runner_helpers import (close, edit_config, hf_greedy, hf_logits, prefill_then_decode_match,
                            rel_err)

PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64], [4, 6, 8, 10], [3, 3, 3, 3, 3, 9, 17]]
BACKENDS = ["torch_native", "sdpa"]
FAMILIES = ["deepseek_v3", "deepseek_v3_yarn"]   # q_lora + interleaved; q_proj + neox + YaRN


def expert_blocks(engine):
    return [b for b in engine.model.blocks if hasattr(b.mlp, "route")]


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_steps_and_greedy_generation_match_transformers(tiny_model, family, backend, page_size):
    """Every prefill row and three decode steps (fp32, rel err <= 1e-4), then greedy
    generation token for token against transformers' generate(do_sample=False)."""
    path, hf = tiny_model(family)
    engine = Engine.from_pretrained(path, backend=backend, page_size=page_size)
    assert all(b.attn.spec.kind == "mla" for b in engine.model.blocks)
    assert len(expert_blocks(engine)) == 2                  # first_k_dense_replace = 1
    prefill_then_decode_match(engine, hf, PROMPTS, decode_steps=3)
    expected = [hf_greedy(hf, p, 10) for p in PROMPTS]
    assert engine.generate(PROMPTS, max_new_tokens=10) == expected


def test_kimi_k2_model_type_runs_the_same_architecture(tiny_model, tmp_path):
    """model_type "kimi_k2" (Moonshot's name, DeepseekV3 classes) with Kimi's one expert group."""
    path, hf = tiny_model("deepseek_v3_kimi")
    path = edit_config(path, tmp_path, model_type="kimi_k2")
    engine = Engine.from_pretrained(path, backend="sdpa", page_size=16)
    assert engine.model.arch.model_type == "kimi_k2"
    assert expert_blocks(engine)[0].mlp.moe.num_groups == 1
    prefill_then_decode_match(engine, hf, PROMPTS, decode_steps=3)
    assert engine.generate(PROMPTS, max_new_tokens=8) == [hf_greedy(hf, p, 8) for p in PROMPTS]


@pytest.mark.parametrize("form", ["absorbed", "mha"])
def test_both_mla_forms_with_neox_rope(tiny_model, form):
    """rope_interleave false: both MLA forms of the backend, prefill then a cached prefix."""
    path, hf = tiny_model("deepseek_v3_yarn")
    engine = Engine.from_pretrained(path, backend="sdpa", page_size=4,
                                    backend_options={"mla_form": form})
    assert not engine.model.rotary.interleaved
    for prompt, logits in zip(PROMPTS, engine.prefill([p[:3] for p in PROMPTS])):
        close(logits, hf_logits(hf, prompt[:3]))
    for prompt, logits in zip(PROMPTS, engine.prefill([p[3:] for p in PROMPTS], ids=[0, 1, 2])):
        close(logits, hf_logits(hf, prompt)[3:])


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter run; the GPU test covers CUDA")
@pytest.mark.parametrize("page_size", [1, 16])
def test_triton_mla_in_the_interpreter(tiny_model, page_size):
    """triton_mla (kv_lora_rank 64, rope 16) by the Triton interpreter, as for DeepSeek-V2: a
    backend object skips the planner (which keeps triton_mla to CUDA); prefills of 4+ tokens
    take the MHA-form kernel, the rest and every decode step the absorbed one."""
    from attnkit.registry import load_backend

    path, hf = tiny_model("deepseek_v3_triton")
    backend = load_backend("triton_mla", mha_form_min_query=4)
    engine = Engine.from_pretrained(path, backend=backend, page_size=page_size)
    prefill_then_decode_match(engine, hf, PROMPTS, decode_steps=2)


def test_in_memory_model_equals_saved_directory(tiny_model):
    """In memory: experts fused (gate_up_proj [E, 2I, hidden]); saved: one by one."""
    path, hf = tiny_model("deepseek_v3")
    assert any(k.endswith("experts.gate_up_proj") for k in hf.state_dict())
    memory = Engine.from_pretrained(hf, backend="sdpa", page_size=16).prefill(PROMPTS)
    saved = Engine.from_pretrained(path, backend="torch_native", page_size=16).prefill(PROMPTS)
    for a, b in zip(memory, saved):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES + ["deepseek_v3_kimi"])
def test_router_matches_transformers(tiny_model, family):
    """Chosen experts and their weights equal DeepseekV3TopkRouter's; on these inputs the
    bias and (with 4 groups) the group limit change some tokens' experts."""
    path, hf = tiny_model(family)
    engine = Engine.from_pretrained(path, backend="torch_native", page_size=16)
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    for layer, block in zip((1, 2), expert_blocks(engine)):
        moe = block.mlp
        weights, chosen = moe.route(x)
        with torch.no_grad():
            _, ref_w, ref_i = hf.model.layers[layer].mlp.gate(x)
        order, ref_order = chosen.argsort(-1), ref_i.argsort(-1)
        assert torch.equal(chosen.gather(1, order), ref_i.gather(1, ref_order))
        torch.testing.assert_close(weights.gather(1, order), ref_w.gather(1, ref_order))
        scores = torch.sigmoid(x @ moe.router.T)
        k = moe.moe.top_k
        assert (scores.topk(k).indices.sort().values != chosen.sort().values).any()  # bias
        if moe.moe.num_groups > moe.moe.topk_groups:                     # group limit
            biased = (scores + moe.bias).topk(k).indices.sort().values
            assert (biased != chosen.sort().values).any()


@pytest.mark.parametrize("mutation", ["no_bias", "softmax", "no_renormalise", "rope_layout"])
def test_the_comparison_catches_a_wrong_router_or_rope(tiny_model, mutation):
    """The same checkpoint run with one V3 detail dropped is far off transformers' logits, so
    the tests above would fail without it."""
    path, hf = tiny_model("deepseek_v3")
    engine = Engine.from_pretrained(path, backend="torch_native", page_size=16)
    for block in expert_blocks(engine):
        moe = block.mlp
        if mutation == "no_bias":
            moe.bias = torch.zeros_like(moe.bias)
        elif mutation == "softmax":
            moe.moe = dataclasses.replace(moe.moe, scoring="softmax")
        elif mutation == "no_renormalise":
            moe.moe = dataclasses.replace(moe.moe, norm_topk_prob=False)
    if mutation == "rope_layout":
        engine.model.rotary.interleaved = False
    out = engine.prefill(PROMPTS)
    errors = [rel_err(logits, hf_logits(hf, p)) for p, logits in zip(PROMPTS, out)]
    assert max(errors) > 1e-2, errors


def test_family_defaults_fill_missing_routing_fields():
    """Fields a config.json leaves out take transformers' class defaults, per generation."""
    base = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                num_attention_heads=4, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
                qk_nope_head_dim=16, v_head_dim=12, n_routed_experts=16, num_experts_per_tok=2,
                moe_intermediate_size=32)
    v3 = architecture_of({**base, "model_type": "deepseek_v3"})
    assert v3.rope_interleaved
    assert (v3.moe.first_dense, v3.moe.scaling, v3.moe.num_shared) == (3, 2.5, 1)
    assert (v3.moe.topk_method, v3.moe.scoring, v3.moe.norm_topk_prob) == ("noaux_tc", "sigmoid",
                                                                           True)
    assert (v3.moe.num_groups, v3.moe.topk_groups) == (8, 4)
    v2 = architecture_of({**base, "model_type": "deepseek_v2", "norm_topk_prob": True})
    assert (v2.moe.first_dense, v2.moe.scaling, v2.moe.num_shared) == (0, 1.0, 2)
    assert (v2.moe.topk_method, v2.moe.scoring, v2.moe.norm_topk_prob) == ("greedy", "softmax",
                                                                           False)


@pytest.mark.parametrize("changes,code", [
    ({"topk_method": "group_limited_greedy"}, "AK480"), ({"scoring_func": "softmax"}, "AK480"),
    ({"n_group": 3}, "AK480"),                    # 8 experts do not split into 3 groups
    ({"n_group": 8, "topk_group": 4}, "AK480"),   # one expert per group: no best two to sum
    ({"topk_group": 5}, "AK480"),                 # more groups kept than there are
    ({"num_experts_per_tok": 5, "topk_group": 1}, "AK480"),   # 5 experts from 1 group of 2
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}, "AK480"),
    # malformed values: the config reader's codes (AK504 type, AK505 range), naming the field
    ({"routed_scaling_factor": "2.5"}, "AK504"), ({"rope_interleave": "yes"}, "AK504"),
    ({"norm_topk_prob": 1}, "AK504"), ({"n_shared_experts": 1.5}, "AK504"),
    ({"topk_method": ["noaux_tc"]}, "AK504"), ({"routed_scaling_factor": 0}, "AK505"),
])
def test_what_the_runner_refuses(tiny_model, tmp_path, changes, code):
    path = edit_config(tiny_model("deepseek_v3")[0], tmp_path, **changes)
    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(path, backend="torch_native", page_size=16)
    assert err.value.code == code
    assert next(iter(changes)) in str(err.value) or err.value.field in changes


def test_missing_correction_bias_is_a_weight_error(tiny_model, tmp_path):
    """A V3 checkpoint without gate.e_score_correction_bias: AK481 naming the tensor."""
    from safetensors.torch import load_file, save_file

    path, _ = tiny_model("deepseek_v3")
    out = edit_config(path, tmp_path)
    (shard,) = out.glob("*.safetensors")
    tensors = {k: v for k, v in load_file(str(shard)).items()
               if k != "model.layers.2.mlp.gate.e_score_correction_bias"}
    save_file(tensors, str(shard), metadata={"format": "pt"})
    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(out, backend="torch_native", page_size=16)
    assert err.value.code == "AK481" and "e_score_correction_bias" in str(err.value)
