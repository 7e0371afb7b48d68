"""DeepSeek-V3.2 (DeepSeek-V3 plus DeepSeek sparse attention: each MLA layer's indexer picks the
top-k cached tokens each query attends to; docs/dsa.md) on attnkit's runner equals
transformers' DeepseekV32ForCausalLM (fp32) and a float64 reference path (the runner's model
code over attnkit.reference_dsa): prefill rows, decode steps, greedy generation; top-k 4 of
prompts up to 13 tokens, so the selection matters (a test shows it does). The tiny config has
16 indexer heads: with very few, scores of exactly 0 (every head's dot product negative)
tie, and transformers' torch.topk breaks ties its own way, not by the documented rule."""
import pytest

from attnkit import reference_dsa
from attnkit.backends.base import AttentionBackend
from attnkit.errors import AttnkitError
from attnkit.runner import Engine
from runner_helpers import close, edit_config, hf_greedy, prefill_then_decode_match, rel_err

PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64], [4, 6, 8, 10], [3, 3, 3, 3, 3, 9, 17]]


class ReferenceDSA(AttentionBackend):
    """The float64 reference as a backend: each DSA layer's output is reference_dsa's (cast to
    q's dtype), then the step's latent and index keys are stored as the cache's own code
    stores them, so the next step reads what any backend would have left."""
    name = "reference_dsa"

    def _forward(self, q, k, v, layer, cache, step, *, indexer=None):
        out = reference_dsa.attention(q, k, v, layer, cache, step.meta, indexer=indexer)
        cache.store(layer.layer_id, step.meta.slot_mapping, k, v)
        cache.store_index(layer.layer_id, step.meta.slot_mapping, indexer.k)
        return out.to(q.dtype)


def steps(engine, prompts, decode=3):
    """Every prefill row and ``decode`` decode steps' logits, in order, then release."""
    cut = [len(p) - decode for p in prompts]
    out = list(engine.prefill([p[:n] for p, n in zip(prompts, cut)]))
    ids = engine.ids
    for s in range(decode):
        out += list(engine.decode([p[n + s] for p, n in zip(prompts, cut)], ids=ids))
    engine.release()
    return out


def test_every_layer_is_sparse_and_the_plan_serves_it(tiny_model):
    path, _ = tiny_model("deepseek_v32")
    engine = Engine.from_pretrained(path, page_size=16)
    assert all(b.attn.spec.sparse_topk.topk == 4 and b.attention.indexer is not None
               for b in engine.model.blocks)
    assert engine.plan.prefill_backend == engine.plan.decode_backend == "torch_native"
    assert set(engine.cache.index_k) == {b.attn.spec.layer_id for b in engine.model.blocks}


@pytest.mark.parametrize("page_size", [1, 16])
def test_steps_and_greedy_generation_match_transformers(tiny_model, page_size):
    path, hf = tiny_model("deepseek_v32")
    engine = Engine.from_pretrained(path, backend="torch_native", page_size=page_size)
    prefill_then_decode_match(engine, hf, PROMPTS, decode_steps=3)
    expected = [hf_greedy(hf, p, 10) for p in PROMPTS]
    assert engine.generate(PROMPTS, max_new_tokens=10) == expected


@pytest.mark.parametrize("kv", ["fp32", "fp8_e4m3"])
def test_steps_and_greedy_generation_match_the_float64_reference_path(tiny_model, kv):
    """fp8: latent and index keys stored in fp8 e4m3 (per-token index scales) on both sides."""
    path, _ = tiny_model("deepseek_v32")
    native = Engine.from_pretrained(path, backend="torch_native", page_size=4, kv_cache_dtype=kv)
    ref = Engine.from_pretrained(path, backend=ReferenceDSA(), page_size=4, kv_cache_dtype=kv)
    assert str(native.cache.index_dtype).endswith("e4m3fn" if kv != "fp32" else "float32")
    for got, want in zip(steps(native, PROMPTS), steps(ref, PROMPTS)):
        close(got, want, rtol=1e-5)
    assert native.generate(PROMPTS, max_new_tokens=8) == ref.generate(PROMPTS, max_new_tokens=8)


def test_the_selection_changes_the_logits(tiny_model, tmp_path):
    """With index_topk 1000 every token is selected: dense attention, which differs."""
    path, _ = tiny_model("deepseek_v32")
    dense = edit_config(path, tmp_path, index_topk=1000)
    sparse_out = steps(Engine.from_pretrained(path, backend="torch_native", page_size=4), PROMPTS)
    dense_out = steps(Engine.from_pretrained(dense, backend="torch_native", page_size=4), PROMPTS)
    assert max(rel_err(a, b) for a, b in zip(sparse_out, dense_out)) > 1e-2


@pytest.mark.parametrize("change, field", [({"q_lora_rank": None}, "q_lora_rank"),
                                           ({"index_head_dim": 24}, "index_head_dim"),
                                           ({"mlp_layer_types": ["sparse"] * 3}, "mlp_layer_types")])
def test_what_the_runner_does_not_compute_is_ak480(tiny_model, tmp_path, change, field):
    path, _ = tiny_model("deepseek_v32")
    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(edit_config(path, tmp_path, **change), backend="torch_native", page_size=4)
    assert err.value.code == "AK480" and err.value.field == field


def test_a_backend_without_sparse_topk_is_refused(tiny_model):
    path, _ = tiny_model("deepseek_v32")
    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(path, backend="sdpa", page_size=4)
    assert err.value.code == "AK121" and "sparse_topk" in str(err.value) and "torch_native" in str(err.value)
