"""The runner's logits equal transformers' own forward (fp32), per family and backend; decode
after prefill equals the last row of a full forward; prefill in pieces equals one go."""
import pytest
import torch

from attnkit.runner import Engine
from runner_helpers import close

BACKENDS = ["torch_native", "sdpa"]
# sdpa has no attention softcap (Gemma-2) and no sinks (gpt-oss): the planner refuses it there.
CASES = [(f, b) for f in ("llama", "qwen2", "mistral", "qwen3") for b in BACKENDS] + [
    ("gemma2", "torch_native"), ("gpt_oss", "torch_native"), ("qwen2_swa", "sdpa")]
# Decode re-runs transformers per prefix; one backend per family keeps it quick.
DECODE_CASES = [("llama", "torch_native"), ("qwen2", "sdpa"), ("mistral", "torch_native"),
                ("qwen3", "sdpa"), ("gemma2", "torch_native"), ("gpt_oss", "torch_native")]
PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100, 64], [4, 6], [3, 3, 3, 3, 3, 9, 17]]


@pytest.mark.parametrize("family,backend", CASES)
def test_batched_prefill_matches_transformers(tiny_model, hf_logits, family, backend):
    path, hf = tiny_model(family)
    engine = Engine.from_pretrained(path, backend=backend, page_size=4)
    out = engine.prefill(PROMPTS)
    for prompt, logits in zip(PROMPTS, out):
        assert logits.shape == (len(prompt), 128)
        close(logits, hf_logits(hf, prompt))


@pytest.mark.parametrize("family,backend", DECODE_CASES)
def test_decode_after_prefill_matches_full_forward(tiny_model, hf_logits, family, backend):
    path, hf = tiny_model(family)
    engine = Engine.from_pretrained(hf, backend=backend, page_size=4)    # in-memory source
    engine.prefill([p[:-2] for p in PROMPTS if len(p) > 2] + [PROMPTS[1][:1]])
    seqs = [p for p in PROMPTS if len(p) > 2] + [PROMPTS[1]]
    cut = [len(p) - 2 for p in seqs[:-1]] + [1]
    for step in range(2):
        live = [i for i, p in enumerate(seqs) if cut[i] + step < len(p)]
        logits = engine.decode([seqs[i][cut[i] + step] for i in live], ids=live)
        for row, i in zip(logits, live):
            close(row, hf_logits(hf, seqs[i][:cut[i] + step + 1])[-1])


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma2", "gpt_oss"])
def test_chunked_prefill_equals_whole_prefill(tiny_model, family):
    path, _ = tiny_model(family)
    whole = Engine.from_pretrained(path, page_size=4).prefill(PROMPTS)
    engine = Engine.from_pretrained(path, page_size=4)
    pieces = [[], [], []]
    for start, stop in ((0, 3), (3, 4), (4, 9), (9, 13)):
        todo = [i for i, p in enumerate(PROMPTS) if start < len(p)]
        out = engine.prefill([PROMPTS[i][start:stop] for i in todo], ids=todo)
        for i, logits in zip(todo, out):
            pieces[i].append(logits)
    for full, parts in zip(whole, pieces):
        torch.testing.assert_close(torch.cat(parts), full, rtol=1e-5, atol=1e-5)


def test_mixed_step_extend_and_decode(tiny_model, hf_logits):
    """One step that extends one sequence by a piece and decodes another."""
    path, hf = tiny_model("llama")
    engine = Engine.from_pretrained(path, backend="sdpa", page_size=4)
    a, b = PROMPTS[0], PROMPTS[2]
    engine.prefill([a[:5], b[:-1]], ids=["a", "b"])
    out = engine.step({"a": a[5:], "b": b[-1:]})
    close(out["a"], hf_logits(hf, a)[5:])
    close(out["b"], hf_logits(hf, b)[-1:])
    assert engine.tokens("a") == a and engine.ids == ["a", "b"]
    engine.release()
    assert engine.ids == [] and engine.allocator.num_free == engine.allocator.num_pages


def test_prefill_and_decode_on_different_backends(tiny_model, hf_logits):
    """prefill_backend / decode_backend: the planner checks the pair, a hybrid runs it."""
    path, hf = tiny_model("mistral")
    engine = Engine.from_pretrained(path, prefill_backend="sdpa", decode_backend="torch_native",
                                    page_size=4)
    assert (engine.plan.prefill_backend, engine.plan.decode_backend) == ("sdpa", "torch_native")
    assert engine.backend.name == "hybrid"
    first = engine.prefill([p[:-1] for p in PROMPTS])
    close(first[0], hf_logits(hf, PROMPTS[0][:-1]))
    for row, prompt in zip(engine.decode([p[-1] for p in PROMPTS]), PROMPTS):
        close(row, hf_logits(hf, prompt)[-1])


@pytest.mark.parametrize("options,rtol", [({"dtype": "bf16"}, 3e-2), ({"dtype": torch.float16}, 1e-2),
                                          ({"kv_cache_dtype": "fp8_e4m3"}, 2.5e-1)])  # 3-bit mantissa
def test_low_precision_tracks_fp32(tiny_model, options, rtol):
    path, _ = tiny_model("llama")
    fp32 = Engine.from_pretrained(path, page_size=4).prefill(PROMPTS)
    low = Engine.from_pretrained(path, page_size=4, **options).prefill(PROMPTS)
    for a, b in zip(low, fp32):
        close(a, b, rtol=rtol)


def test_sharded_checkpoint_loads(tiny_model, hf_logits, tmp_path):
    _, hf = tiny_model("qwen2")
    hf.save_pretrained(tmp_path, max_shard_size="40KB")
    assert len(list(tmp_path.glob("*.safetensors"))) > 1
    engine = Engine.from_pretrained(tmp_path, page_size=4)
    close(engine.prefill(PROMPTS[:1])[0], hf_logits(hf, PROMPTS[0]))
