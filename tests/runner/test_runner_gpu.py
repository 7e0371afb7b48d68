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


@pytest.fixture(scope="module")
def wide_llama(tmp_path_factory):
    """head_dim 64: a size the triton backend declares."""
    import transformers

    config = transformers.LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=256,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, initializer_range=0.2)
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(config).eval()
    model.set_attn_implementation("eager")
    path = tmp_path_factory.mktemp("wide_llama")
    model.save_pretrained(path)
    return path, model


@pytest.mark.parametrize("backend", ["torch_native", "sdpa", "triton"])
def test_cuda_logits_and_generation(wide_llama, hf_logits, backend):
    path, hf = wide_llama
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
