"""The runner on CUDA: every backend the planner allows there (triton included), fp32 logits
against transformers, greedy generation, and a bf16 run against fp32."""
import pytest
import torch

from attnkit.runner import Engine
from runner_helpers import close

pytestmark = pytest.mark.gpu
PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64], [4, 6], [3, 3, 3, 3, 3, 9, 17]]
# Triton's fp32 dots may run in TF32 on the GPU: looser than the exact torch paths.
RTOL = {"torch_native": 1e-4, "sdpa": 1e-4, "triton": 5e-3}


WIDE = dict(vocab_size=128, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2)


def build(tmp_path_factory, config_cls: str, model_cls: str, **extra):
    import transformers

    config = getattr(transformers, config_cls)(**WIDE, **extra)
    torch.manual_seed(1)
    model = getattr(transformers, model_cls)(config).eval()
    model.set_attn_implementation("eager")
    path = tmp_path_factory.mktemp(model_cls)
    model.save_pretrained(path)
    return path, model


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


@pytest.mark.parametrize("family,backend", [("llama", "torch_native"), ("llama", "sdpa"),
                                            ("llama", "triton"), ("gpt_oss", "torch_native"),
                                            ("gpt_oss", "triton")])
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
