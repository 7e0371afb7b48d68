"""Tensor parallelism on GPUs (NCCL): tp 2 (and 4 where there are 4 GPUs) computes what tp 1
computes, on every backend the planner offers there; a killed rank ends the run with AK482
(the watchdog aborts the NCCL group). Needs CUDA and at least 2 GPUs."""
import os
import signal
import threading

import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.runner import LLM, Engine, SamplingParams, Scheduler
from runner_helpers import close, save_tiny

pytestmark = pytest.mark.gpu
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
needs = lambda n: pytest.mark.skipif(GPUS < n, reason=f"needs {n} GPUs")  # noqa: E731
PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64], [4, 6], [3, 3, 3, 3, 3, 9, 17]]
# heads 8 / KV heads 2: tp 2 splits the KV heads, tp 4 replicates them; head_dim 64 (triton)
WIDE = dict(vocab_size=128, hidden_size=512, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, initializer_range=0.2)
DEEPSEEK = dict(WIDE, num_hidden_layers=3, num_key_value_heads=None, kv_lora_rank=512,
                q_lora_rank=96, qk_rope_head_dim=64, qk_nope_head_dim=64, v_head_dim=64,
                n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                moe_intermediate_size=64, first_k_dense_replace=1)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("llama"), "LlamaConfig", "LlamaForCausalLM", WIDE,
                     seed=1)[0]


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("ds"), "DeepseekV2Config", "DeepseekV2ForCausalLM",
                     DEEPSEEK, seed=2)[0]


@pytest.mark.parametrize("tp", [pytest.param(2, marks=needs(2)), pytest.param(4, marks=needs(4))])
@pytest.mark.parametrize("model,backend,rtol", [("llama", "sdpa", 1e-4), ("llama", "triton", 5e-3),
                                                ("deepseek", "sdpa", 1e-4),
                                                ("deepseek", "triton_mla", 5e-3)])
def test_tp_equals_tp1_on_gpus(request, tp, model, backend, rtol):
    path = request.getfixturevalue(model)
    kw = dict(backend=backend, page_size=16, dtype="fp32", device="cuda", cuda_graph=False)
    one = Engine.from_pretrained(path, **kw)
    many = Engine.from_pretrained(path, tp_size=tp, **kw)
    assert many.plan.settings["tp_size"] == tp and len(many.ranks.procs) == tp - 1
    for a, b in zip(one.prefill(PROMPTS), many.prefill(PROMPTS)):
        close(b, a, rtol=rtol)
    close(many.decode([11, 12, 13]), one.decode([11, 12, 13]), rtol=rtol)
    one.release()
    many.release()
    assert many.generate(PROMPTS, 8) == one.generate(PROMPTS, 8)


@needs(2)
def test_tp2_bf16_greedy_and_auto_graphs_decode_eagerly(llama):
    one = LLM(llama, device="cuda", dtype="bf16")
    with pytest.warns(UserWarning, match="decodes eagerly"):
        two = LLM(llama, device="cuda", dtype="bf16", tp_size=2, attention_backend="triton")
    assert two.engine.graphs is None
    want = one.generate(PROMPTS, max_new_tokens=8, ignore_eos=True)
    got = two.generate(PROMPTS, max_new_tokens=8, ignore_eos=True)
    same = sum(a.token_ids == b.token_ids for a, b in zip(want, got))
    assert same >= len(PROMPTS) - 1            # bf16 reductions in another order may flip one


@needs(2)
def test_a_killed_rank_ends_an_nccl_run_with_ak482(llama):
    llm = LLM(llama, device="cuda", dtype="fp32", tp_size=2, max_tokens=4096)
    sched = Scheduler(llm.engine, max_num_seqs=4)
    for i in range(4):
        sched.add([1 + i, 2, 3], SamplingParams(max_new_tokens=200, stop_token_ids=()))
    sched.step()
    threading.Timer(0.05, os.kill, (llm.engine.ranks.procs[0].pid, signal.SIGKILL)).start()
    with pytest.raises(AttnkitError) as e:
        for _ in range(10**6):
            sched.step()
    assert e.value.code == "AK482" and "rank 1 of 2" in e.value.message
