"""DeepSeek-V3.2 (DSA) on CUDA: every backend the planner allows for it there (torch_native;
triton_dsa once registered) against transformers' DeepseekV32ForCausalLM (fp32), greedy
generation (docs/dsa.md). The model has the latent (64, 16) and the indexer (64 x 128) the
sparse Triton kernels declare, so they run too once registered."""
import pytest

from attnkit.planning.solver import plan
from attnkit.runner import Engine
from runner_helpers import hf_greedy, prefill_then_decode_match

pytestmark = pytest.mark.gpu
PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64], [4, 6, 8, 10], [3, 3, 3, 3, 3, 9, 17]]
RTOL = {"torch_native": 1e-4}          # Triton fp32 dots may run in TF32: looser
DEFAULT_RTOL = 5e-3


def dsa_backends(path):
    """The registered backends declaring sparse_topk that serve the tiny model on this GPU."""
    from attnkit.registry import declarations

    return [name for name, d in declarations().items() if "sparse_topk" in d.capabilities.features
            and plan(str(path), "auto", {"attention_backend": name, "dtype": "fp32"}, env={}).ok]


def test_each_dsa_backend_matches_transformers_on_cuda(tiny_model):
    path, hf = tiny_model("deepseek_v32_wide")
    names = dsa_backends(path)
    assert "torch_native" in names
    for name in names:
        engine = Engine.from_pretrained(path, backend=name, device="cuda", page_size=16, dtype="fp32")
        prefill_then_decode_match(engine, hf, [list(p) for p in PROMPTS], decode_steps=3,
                                  rtol=RTOL.get(name, DEFAULT_RTOL))
        assert engine.generate(PROMPTS, max_new_tokens=8) == [hf_greedy(hf, p, 8) for p in PROMPTS], name
