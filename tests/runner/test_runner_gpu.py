"""The runner on CUDA: every backend the planner allows there (triton included), fp32 logits
against transformers, greedy generation, and a bf16 run against fp32."""
import pytest
import torch

from attnkit.runner import Engine
from runner_helpers import close, prefill_then_decode_match, rel_err, save_tiny

pytestmark = pytest.mark.gpu
PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64], [4, 6], [3, 3, 3, 3, 3, 9, 17]]
# Triton's fp32 dots may run in TF32 on the GPU: looser than the exact torch paths.
RTOL = {"torch_native": 1e-4, "sdpa": 1e-4, "triton": 5e-3, "triton_mla": 5e-3}


WIDE = dict(vocab_size=128, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2)


def build(tmp_path_factory, config_cls: str, model_cls: str, **extra):
    return save_tiny(tmp_path_factory.mktemp(model_cls), config_cls, model_cls,
                     {**WIDE, **extra}, seed=1)


@pytest.fixture(scope="module")
def wide_llama(tmp_path_factory):
    """head_dim 64: a size the triton backend declares."""
    return build(tmp_path_factory, "LlamaConfig", "LlamaForCausalLM")


@pytest.fixture(scope="module")
def wide_gpt_oss(tmp_path_factory):
    """Sinks, sliding window 5 on even layers, experts; head_dim 64."""
    return build(tmp_path_factory, "GptOssConfig", "GptOssForCausalLM", head_dim=64,
                 num_local_experts=4, num_experts_per_tok=2, sliding_window=5,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


@pytest.fixture(scope="module")
def wide_deepseek(tmp_path_factory):
    """DeepSeek-V2 MLA at DeepSeek's own latent sizes (kv_lora_rank 512, rope 64: what
    triton_mla declares), q_lora, one dense layer then experts."""
    return build(tmp_path_factory, "DeepseekV2Config", "DeepseekV2ForCausalLM",
                 num_key_value_heads=None, kv_lora_rank=512, qk_rope_head_dim=64,
                 qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=128, n_routed_experts=4,
                 num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=64,
                 first_k_dense_replace=1)


@pytest.fixture(scope="module")
def wide_deepseek_v3(tmp_path_factory):
    """DeepSeek-V3 at the same latent sizes: sigmoid noaux_tc router (8 experts, 4 groups,
    2 kept, random correction bias). initializer_range 0.05: experts move the residual less
    than at 0.2, so an expert choice flipped by bf16 / TF32 rounding near a tie (this router
    has near-ties) moves the logits little (measured on CPU: bf16 errors ~0.013 for
    transformers and the runner; at 0.2 up to ~0.4 for both)."""
    return build(tmp_path_factory, "DeepseekV3Config", "DeepseekV3ForCausalLM",
                 num_key_value_heads=None, kv_lora_rank=512, qk_rope_head_dim=64,
                 qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=128, n_routed_experts=8,
                 num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
                 moe_intermediate_size=64, first_k_dense_replace=1, initializer_range=0.05)


@pytest.mark.parametrize("family,backend", [("llama", "torch_native"), ("llama", "sdpa"),
                                            ("llama", "triton"), ("gpt_oss", "torch_native"),
                                            ("gpt_oss", "triton"), ("deepseek", "torch_native"),
                                            ("deepseek", "sdpa"), ("deepseek", "triton_mla"),
                                            ("deepseek_v3", "torch_native"),
                                            ("deepseek_v3", "triton_mla")])
def test_cuda_logits_and_generation(request, hf_logits, family, backend):
    path, hf = request.getfixturevalue(f"wide_{family}")
    engine = Engine.from_pretrained(path, backend=backend, page_size=16, device="cuda")
    for prompt, logits in zip(PROMPTS, engine.prefill(PROMPTS)):
        close(logits.cpu(), hf_logits(hf, prompt), rtol=RTOL[backend])
    engine.release()
    cpu = Engine.from_pretrained(path, backend="torch_native", page_size=16)
    assert engine.generate(PROMPTS, max_new_tokens=8) == cpu.generate(PROMPTS, max_new_tokens=8)


def test_cuda_bf16_tracks_fp32(wide_llama):
    path, _ = wide_llama
    fp32 = Engine.from_pretrained(path, page_size=16, device="cuda").prefill(PROMPTS)
    bf16 = Engine.from_pretrained(path, page_size=16, device="cuda", dtype="bf16").prefill(PROMPTS)
    for a, b in zip(bf16, fp32):
        close(a, b, rtol=5e-2)


# Prompts of 4 to 40 new tokens: the plan's kernel tables decide per request which form each
# takes (mha_form or an absorbed kernel); every decode step takes an absorbed kernel.
MLA_PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64], [4, 6, 8, 10],
               [3, 3, 3, 3, 3, 9, 17], list(range(2, 42))]


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("family", ["deepseek", "deepseek_v3"])
def test_cuda_deepseek_triton_mla_steps(request, family, page_size):
    """fp32 prefill rows and three decode steps against transformers (TF32 tolerance)."""
    path, hf = request.getfixturevalue(f"wide_{family}")
    engine = Engine.from_pretrained(path, backend="triton_mla", page_size=page_size, device="cuda")
    prefill_then_decode_match(engine, hf, MLA_PROMPTS, decode_steps=3, rtol=RTOL["triton_mla"])


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("family", ["deepseek", "deepseek_v3"])
def test_cuda_deepseek_bf16_on_triton_mla(request, family, page_size):
    """bf16 on triton_mla against transformers in fp32. Tolerance: bf16 rounding moves the
    V2 model's logits by up to ~0.14 of the largest one in transformers' own bf16 run
    (measured on CPU: an expert choice flips for one token), so the runner in bf16 may be off
    by twice transformers' own bf16 error, and never more than 0.3 (V3: see its fixture)."""
    import copy

    path, hf = request.getfixturevalue(f"wide_{family}")
    hf_bf16 = copy.deepcopy(hf).to("cuda", torch.bfloat16)
    engine = Engine.from_pretrained(path, backend="triton_mla", page_size=page_size,
                                    device="cuda", dtype="bf16")
    ours, theirs = [], []
    for prompt, logits in zip(MLA_PROMPTS, engine.prefill(MLA_PROMPTS)):
        with torch.no_grad():
            ref = hf(torch.tensor([prompt])).logits[0]
            own = hf_bf16(torch.tensor([prompt], device="cuda")).logits[0]
        ours.append(rel_err(logits, ref))
        theirs.append(rel_err(own, ref))
    assert max(ours) <= min(0.3, max(2 * max(theirs), 5e-2)), (ours, theirs)
