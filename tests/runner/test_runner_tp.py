"""Tensor parallelism on CPU (gloo, 2 ranks): tp 2 computes what tp 1 computes.

The second rank is a process the engine starts (engine/ranks.py); one group serves every test
of a pytest worker (a group of the same size is reused). tp 1 is the oracle: its logits are
checked against transformers elsewhere (test_runner_logits.py, test_runner_deepseek.py).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnkit.cli import main as cli
from attnkit.runner import LLM, Engine
from runner_helpers import close

TOL = 1e-5                      # fp32: tp 2 sums the same products in another order
PROMPTS = [[1, 5, 9, 3, 7, 2, 11], [4, 8, 6]]
SRC = Path(__file__).resolve().parents[2] / "src"


def pair(path, **kw):
    """The same checkpoint on one rank and on two (the planned backend, pages of 4)."""
    return (Engine.from_pretrained(path, page_size=4, **kw),
            Engine.from_pretrained(path, page_size=4, tp_size=2, **kw))


def check_sharded(engine, one):
    """The tp 2 engine really is split: half the heads, half the vocabulary, a second rank."""
    settings = engine.plan.settings
    assert settings["tp_size"] == 2 and engine.ranks.size == 2
    assert engine.ranks.procs and engine.ranks.procs[0].poll() is None
    spec = engine.model.blocks[0].attn.spec
    assert spec.num_heads == settings["heads_per_rank"] == one.model.blocks[0].attn.spec.num_heads // 2
    assert spec.num_kv_heads == settings["kv_heads_per_rank"]
    assert engine.model.embed.shape[0] == -(-one.model.embed.shape[0] // 2)
    lid = spec.layer_id                                   # this rank's cache: its KV heads,
    if spec.kind == "mla":                                # or MLA's whole latent
        assert engine.cache.latent[lid].shape == one.cache.latent[lid].shape
    else:
        assert engine.cache.k[lid].shape[2] == settings["kv_heads_per_rank"]
    assert engine.backend.name == engine.plan.prefill_backend == one.backend.name


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen2_mqa", "gemma2", "deepseek_v2",
                                    "gpt_oss", "qwen2_dca"])
def test_tp2_logits_and_greedy_tokens_equal_tp1(tiny_model, family):
    """qwen2: 2 KV heads, one per rank; qwen2_mqa: 1 KV head replicated on both ranks, and an
    uneven vocabulary (125) and MLP width (95); deepseek_v2: MLA heads per rank with the
    latent replicated, tensor-parallel experts; gemma2: softcaps, sandwich norms, tied
    vocab-parallel embedding; gpt_oss: sinks per rank and experts with output biases;
    qwen2_dca: the dual_chunk backend (planned for it) with its heads per rank."""
    path, _ = tiny_model(family)
    one, two = pair(path)
    check_sharded(two, one)
    for a, b in zip(one.prefill(PROMPTS), two.prefill(PROMPTS)):
        close(b, a, rtol=TOL)
    for tokens in ([12, 13], [14, 15]):                  # decode over the cached prefixes
        close(two.decode(tokens), one.decode(tokens), rtol=TOL)
    one.release()
    two.release()
    assert two.generate(PROMPTS, 6) == one.generate(PROMPTS, 6)


def test_tp2_scheduler_preemption_and_sampling_equal_tp1(tiny_model):
    """Chunked prefill, preemption and recompute (a cache of 6 pages of 4 for four requests):
    rank 0's page decisions keep rank 1's cache in step, so the tokens, greedy and seeded
    sampled, equal tp 1's, with the same preemptions."""
    path, _ = tiny_model("llama")
    kw = dict(device="cpu", page_size=4, max_tokens=24, max_num_batched_tokens=6)
    one, two = LLM(path, **kw), LLM(path, tp_size=2, **kw)
    prompts = [[1, 5, 9, 3], [2, 8, 6, 4, 7], [3, 3, 1], [9, 8, 7, 6]]
    for sampling in ({}, {"temperature": 0.8, "top_p": 0.9, "seed": 5}):
        want = one.generate(prompts, max_new_tokens=8, ignore_eos=True, **sampling)
        got = two.generate(prompts, max_new_tokens=8, ignore_eos=True, **sampling)
        assert [o.token_ids for o in got] == [o.token_ids for o in want]
        assert two.last_stats.preemptions == one.last_stats.preemptions > 0
    assert two.engine.allocator.num_free == two.engine.allocator.num_pages


def test_generate_cli_tp_size(tiny_model, capsys):
    path, _ = tiny_model("llama")
    argv = ["generate", str(path), "--device", "cpu", "--prompt-ids", "1,5,9", "--prompt-ids", "4,6",
            "--max-new-tokens", "5", "--ignore-eos", "--json", "--no-progress"]
    assert cli.main(argv) == 0
    want = json.loads(capsys.readouterr().out)
    assert cli.main(argv + ["--tp-size", "2"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["plan"]["settings"]["tp_size"] == 2 and got["plan"]["settings"]["heads_per_rank"] == 2
    assert [o["token_ids"] for o in got["outputs"]] == [o["token_ids"] for o in want["outputs"]]


def test_torchrun_launch(tiny_model):
    """Under torchrun every rank runs `attnkit generate`; they join torchrun's group (no
    process started by attnkit), rank 0 prints, and the tokens are tp 1's."""
    path, _ = tiny_model("llama")
    one = Engine.from_pretrained(path, page_size=4)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "attnkit", "generate", str(path), "--device", "cpu", "--tp-size", "2",
         "--page-size", "4", "--prompt-ids", "1,5,9", "--max-new-tokens", "5", "--ignore-eos",
         "--json", "--no-progress"], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)                          # one JSON document: rank 0's
    assert out["plan"]["settings"]["tp_size"] == 2
    assert out["outputs"][0]["token_ids"] == one.generate([1, 5, 9], 5)


def test_engines_share_the_ranks_and_a_dropped_one_is_forgotten(tiny_model):
    """A second engine of the same size reuses the ranks (a new key there); an engine gone on
    rank 0 is dropped on the others with the next message."""
    import gc

    path, _ = tiny_model("llama")
    first = Engine.from_pretrained(path, page_size=4, tp_size=2)
    group, key = first.ranks, first.rank_key
    del first
    gc.collect()
    assert key in group.drops
    second = Engine.from_pretrained(path, page_size=4, tp_size=2)
    assert second.ranks is group and second.rank_key != key and not group.drops
    one = Engine.from_pretrained(path, page_size=4)
    close(second.prefill([[1, 5, 9]])[0], one.prefill([[1, 5, 9]])[0], rtol=TOL)
