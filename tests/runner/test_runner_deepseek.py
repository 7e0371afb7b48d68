"""DeepSeek-V2 (multi-head latent attention, dense then expert layers) on attnkit's MLA
backends equals transformers' DeepseekV2ForCausalLM (fp32): prefill rows, every decode step,
greedy generation; torch_native and sdpa at page sizes 1 and 16, both MLA forms, and
triton_mla through the Triton interpreter."""
import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.runner import Engine
from runner_helpers import close, edit_config, hf_greedy, hf_logits, prefill_then_decode_match

PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64], [4, 6, 8, 10], [3, 3, 3, 3, 3, 9, 17]]
BACKENDS = ["torch_native", "sdpa"]
FAMILIES = ["deepseek_v2", "deepseek_v2_yarn"]     # q_lora + greedy; q_proj + groups + YaRN


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_prefill_and_each_decode_step_match_transformers(tiny_model, family, backend, page_size):
    path, hf = tiny_model(family)
    engine = Engine.from_pretrained(path, backend=backend, page_size=page_size)
    assert all(b.attn.spec.kind == "mla" for b in engine.model.blocks)
    assert set(engine.cache.latent) == {0, 1, 2} and not engine.cache.k   # latent cache only
    prefill_then_decode_match(engine, hf, PROMPTS, decode_steps=3)


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_generation_matches_transformers(tiny_model, backend, page_size):
    for family in FAMILIES:
        path, hf = tiny_model(family)
        engine = Engine.from_pretrained(path, backend=backend, page_size=page_size)
        expected = [hf_greedy(hf, p, 10) for p in PROMPTS]
        assert engine.generate(PROMPTS, max_new_tokens=10) == expected


@pytest.mark.parametrize("form", ["absorbed", "mha"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_both_mla_forms_match(tiny_model, backend, form):
    """The backends' absorbed form (latent as one shared KV head) and MHA form (per-head K/V
    decompressed) both compute transformers' attention, for a prefill and a cached prefix."""
    path, hf = tiny_model("deepseek_v2_yarn")
    engine = Engine.from_pretrained(path, backend=backend, page_size=4,
                                    backend_options={"mla_form": form})
    for prompt, logits in zip(PROMPTS, engine.prefill([p[:3] for p in PROMPTS])):
        close(logits, hf_logits(hf, prompt[:3]))
    for prompt, logits in zip(PROMPTS, engine.prefill([p[3:] for p in PROMPTS], ids=[0, 1, 2])):
        close(logits, hf_logits(hf, prompt)[3:])


def test_in_memory_model_and_chunked_prefill(tiny_model):
    """An in-memory model (experts fused as gate_up_proj [E, 2I, hidden]) equals its saved
    directory (experts one by one); prefill in pieces equals prefill in one go."""
    path, hf = tiny_model("deepseek_v2")
    assert any(k.endswith("experts.gate_up_proj") for k in hf.state_dict())
    whole = Engine.from_pretrained(hf, backend="sdpa", page_size=16).prefill(PROMPTS)
    engine = Engine.from_pretrained(path, backend="torch_native", page_size=1)
    for start, stop in ((0, 3), (3, 4), (4, 13)):
        todo = [i for i, p in enumerate(PROMPTS) if start < len(p)]
        out = engine.prefill([PROMPTS[i][start:stop] for i in todo], ids=todo)
        for i, logits in zip(todo, out):
            torch.testing.assert_close(logits, whole[i][start:stop], rtol=1e-5, atol=1e-5)


def test_router_matches_transformers(tiny_model):
    """Chosen experts and their weights equal DeepseekV2TopkRouter's, greedy and
    group-limited (where some tokens' best experts sit in dropped groups)."""
    for family in FAMILIES:
        path, hf = tiny_model(family)
        moe = Engine.from_pretrained(path, backend="torch_native", page_size=16).model.blocks[1].mlp
        x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
        weights, chosen = moe.route(x)
        with torch.no_grad():
            _, ref_w, ref_i = hf.model.layers[1].mlp.gate(x)
        order, ref_order = chosen.argsort(-1), ref_i.argsort(-1)
        assert torch.equal(chosen.gather(1, order), ref_i.gather(1, ref_order))
        torch.testing.assert_close(weights.gather(1, order), ref_w.gather(1, ref_order))
    # group-limited: at least one token loses an expert that plain top-k would have chosen
    scores = torch.softmax(x @ moe.router.T, dim=-1)
    assert (scores.topk(moe.moe.top_k).indices.sort().values != chosen.sort().values).any()


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter run; the GPU test covers CUDA")
@pytest.mark.parametrize("page_size", [1, 16])
def test_triton_mla_in_the_interpreter(tiny_model, page_size):
    """triton_mla (kv_lora_rank 64, rope 16) run by the Triton interpreter; a backend object
    skips the planner, which keeps triton_mla to CUDA. mha_form_min_query=4 sends prefills of
    4+ tokens to the MHA-form kernel, the 1-token one and every decode step to the absorbed
    split-KV kernel (one MIXED step)."""
    from attnkit.registry import load_backend

    path, hf = tiny_model("deepseek_v2_triton")
    backend = load_backend("triton_mla", mha_form_min_query=4)
    engine = Engine.from_pretrained(path, backend=backend, page_size=page_size)
    prefill_then_decode_match(engine, hf, PROMPTS, decode_steps=2)


@pytest.mark.parametrize("changes,code", [
    ({"topk_method": "noaux_tc"}, "AK480"), ({"model_type": "deepseek_v3"}, "AK480"),
    ({"n_group": 3, "topk_group": 2, "topk_method": "group_limited_greedy"}, "AK480"),
    ({"first_k_dense_replace": -1}, "AK505"), ({"first_k_dense_replace": 1.5}, "AK504")])
def test_what_the_runner_refuses(tiny_model, tmp_path, changes, code):
    path = edit_config(tiny_model("deepseek_v2")[0], tmp_path, **changes)
    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(path, backend="torch_native", page_size=16)
    assert err.value.code == code


def test_all_dense_layers(tiny_model, tmp_path):
    """first_k_dense_replace >= layers: every MLP dense, and no expert field is needed."""
    path, hf = tiny_model("deepseek_v2_dense")
    path = edit_config(path, tmp_path, n_routed_experts=None, num_experts_per_tok=None)
    engine = Engine.from_pretrained(path, backend="sdpa", page_size=16)
    assert [type(b.mlp).__name__ for b in engine.model.blocks] == ["GatedMLP"] * 3
    close(engine.prefill(PROMPTS[:1])[0], hf_logits(hf, PROMPTS[0]))
