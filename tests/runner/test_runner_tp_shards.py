"""Tensor-parallel shards without processes: which slice each rank holds and reads.

Oracles: the planner's tensor_parallel_rule (heads_per_rank, kv_heads_per_rank), the GQA
grouping (query head h reads KV head h // group), and the whole tensors as safetensors'
load_file reads them."""
from pathlib import Path

import pytest
import torch

import attnkit
from attnkit.model import parse_config
from attnkit.runner.layers.parallel import TensorParallel
from attnkit.runner.models.base import DecoderModel
from attnkit.runner.models.config import architecture_of
from attnkit.runner.models.weights import SafetensorsFiles, Weights, read_checkpoint


@pytest.mark.parametrize("n", [1, 7, 8, 95, 125])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_spans_cover_each_row_once(n, size):
    spans = [TensorParallel(r, size).span(n) for r in range(size)]
    assert [i for a, b in spans for i in range(a, b)] == list(range(n))
    widths = [b - a for a, b in spans]
    assert max(widths) - min(widths) <= 1


@pytest.mark.parametrize("heads,kv,tp", [(4, 2, 2), (4, 1, 2), (8, 2, 4), (8, 8, 4), (16, 2, 8),
                                         (8, 4, 8), (32, 8, 2)])
def test_local_heads_follow_the_plan_and_the_gqa_groups(heads, kv, tp):
    cfg = {"model_type": "llama", "num_attention_heads": heads, "num_key_value_heads": kv,
           "hidden_size": 16 * heads, "num_hidden_layers": 1, "vocab_size": 64,
           "intermediate_size": 32}
    plan = attnkit.plan(cfg, "h100", {"tp_size": tp})
    spec = parse_config(cfg).layers[0]
    group = heads // kv
    for rank in range(tp):
        part = TensorParallel(rank, tp)
        local = part.local(spec)
        assert (local.num_heads, local.num_kv_heads) == \
            (plan.settings["heads_per_rank"], plan.settings["kv_heads_per_rank"])
        q0, q1 = part.heads(heads)
        k0, k1 = part.kv_heads(kv)
        assert {h // group for h in range(q0, q1)} <= set(range(k0, k1))    # its KV heads


def _reads(monkeypatch):
    """Record the names read whole from a SafetensorsFiles (not through get_slice)."""
    whole = []
    read = SafetensorsFiles.__getitem__
    monkeypatch.setattr(SafetensorsFiles, "__getitem__",
                        lambda self, name: whole.append(name) or read(self, name))
    return whole


@pytest.mark.parametrize("family", ["qwen2_mqa", "deepseek_v2", "gpt_oss"])
def test_a_rank_reads_only_its_shard(tiny_model, monkeypatch, family):
    """Rank 1 of 2 builds its model: every split tensor is read as a slice, and each slice
    equals the rows (or columns) of the whole tensor the split assigns to rank 1; only
    replicated tensors (norms, routers, MLA's latent projection) are read whole."""
    from safetensors.torch import load_file

    path, _ = tiny_model(family)
    full = {k: v for f in Path(path).glob("*.safetensors") for k, v in load_file(str(f)).items()}
    whole = _reads(monkeypatch)
    cfg, tensors = read_checkpoint(path)
    arch = architecture_of(cfg)
    tp = TensorParallel(1, 2)
    model = DecoderModel(arch, Weights(tensors, dtype=torch.float32, device="cpu"),
                         layers=arch.attention.layers, tp=tp)
    spec = arch.attention.layers[0]
    replicated = ("norm", "layernorm", "router", "mlp.gate.weight", "kv_a_proj_with_mqa",
                  "q_a_proj", "e_score_correction_bias", "down_proj_bias", "o_proj.bias")
    if spec.kind == "mha" and spec.num_kv_heads < tp.size:      # one KV head: on both ranks
        replicated += ("k_proj", "v_proj")
    assert whole and all(any(r in n for r in replicated) for n in whole), \
        [n for n in whole if not any(r in n for r in replicated)]
    v0, v1 = tp.span(arch.vocab_size)
    assert torch.equal(model.embed, full["model.embed_tokens.weight"][v0:v1])
    attn = model.blocks[0].attention
    if spec.kind == "mha":
        d, (k0, k1) = spec.head_dim, tp.kv_heads(spec.num_kv_heads)
        k_rows = attn.qkv.weight[attn.sizes[0]:attn.sizes[0] + attn.sizes[1]]
        assert torch.equal(k_rows, full["model.layers.0.self_attn.k_proj.weight"][k0 * d:k1 * d])
    h0, h1 = tp.heads(spec.num_heads)
    dv = spec.value_dim
    assert torch.equal(attn.o.weight, full["model.layers.0.self_attn.o_proj.weight"][:, h0 * dv:h1 * dv])


def test_spans_of_an_in_memory_model_equal_the_directory(tiny_model):
    path, hf = tiny_model("llama")
    _, lazy = read_checkpoint(path)
    _, eager = read_checkpoint(hf)
    name = "model.layers.1.mlp.down_proj.weight"
    a = Weights(lazy, dtype=torch.float32, device="cpu").get(name, span=(10, 40), dim=1)
    b = Weights(eager, dtype=torch.float32, device="cpu").get(name, span=(10, 40), dim=1)
    assert a.shape == (64, 30) and torch.equal(a, b) and a.is_contiguous()
