"""``LLM``: greedy output equals transformers; sampling is seeded per request; EOS from the
checkpoint; planning flags checked like ``attnkit plan``; stats and progress."""
import io
import json
import shutil

import pytest

from attnkit.errors import AttnkitError
from attnkit.runner import LLM
from test_runner_generate import hf_greedy

PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22], [4, 6], [3, 3, 3, 3, 3, 9, 17]]


def llm(tiny_model, **kw):
    path, _ = tiny_model("llama")
    return LLM(path, device="cpu", attention_backend=kw.pop("attention_backend", "torch_native"),
               page_size=4, **kw)


def test_greedy_equals_transformers_with_chunks_and_stats(tiny_model):
    _, hf = tiny_model("llama")
    model = llm(tiny_model, max_num_batched_tokens=5)
    outs = model.generate(PROMPTS, max_new_tokens=8, ignore_eos=True)
    assert [o.token_ids for o in outs] == [hf_greedy(hf, p, 8) for p in PROMPTS]
    assert [o.prompt_token_ids for o in outs] == PROMPTS
    assert all(o.finish_reason == "length" and o.stats.num_output_tokens == 8 for o in outs)
    assert all(o.stats.ttft_s <= o.stats.latency_s for o in outs)
    stats = model.last_stats
    assert stats.prefill_tokens == sum(map(len, PROMPTS)) and stats.prefill_tok_s > 0
    assert stats.decode_tokens + stats.mixed_decode_tokens == 3 * 7 and stats.decode_tok_s > 0
    assert model.plan.prefill_backend == "torch_native"
    assert model.engine.allocator.num_free == model.engine.allocator.num_pages


def test_in_memory_model_and_its_eos(tiny_model):
    _, hf = tiny_model("llama")
    model = LLM(hf, device="cpu", dtype="fp32")
    assert model.eos_token_ids == (hf.config.eos_token_id,)
    free = model.generate([PROMPTS[0]], max_new_tokens=8, ignore_eos=True)[0].token_ids
    out = model.generate([PROMPTS[0]], max_new_tokens=8, eos_token_id=free[2])[0]
    assert out.token_ids == free[:free.index(free[2]) + 1] and out.finish_reason == "stop"


def test_eos_comes_from_generation_config(tiny_model, tmp_path):
    path, _ = tiny_model("llama")
    for f in path.iterdir():
        shutil.copy(f, tmp_path / f.name)
    free = llm(tiny_model).generate([PROMPTS[1]], max_new_tokens=8, ignore_eos=True)[0].token_ids
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [free[4], 127]}))
    model = LLM(tmp_path, device="cpu", page_size=4)
    assert model.eos_token_ids == (free[4], 127)
    out = model.generate([PROMPTS[1]], max_new_tokens=8)[0]
    assert out.token_ids == free[:free.index(free[4]) + 1] and out.finish_reason == "stop"


def test_seeded_sampling_is_reproducible_and_batch_independent(tiny_model):
    model = llm(tiny_model)
    kw = dict(max_new_tokens=10, temperature=1.0, top_p=0.95, ignore_eos=True)
    batch = [o.token_ids for o in model.generate(PROMPTS, seed=[7, 8, 9], **kw)]
    assert batch == [o.token_ids for o in model.generate(PROMPTS, seed=7, **kw)]   # seed + i
    assert model.generate([PROMPTS[1]], seed=[8], **kw)[0].token_ids == batch[1]
    chunked = llm(tiny_model, max_num_batched_tokens=3, max_tokens=32)
    assert [o.token_ids for o in chunked.generate(PROMPTS, seed=7, **kw)] == batch
    other = model.generate(PROMPTS, seed=100, **kw)
    assert [o.token_ids for o in other] != batch
    greedy = [o.token_ids for o in model.generate(PROMPTS, max_new_tokens=10, ignore_eos=True)]
    assert batch != greedy
    unseeded = model.generate([PROMPTS[0]], max_new_tokens=4, temperature=1.0)[0]
    assert isinstance(unseeded.stats.seed, int)       # the drawn seed, to replay the request
    replay = model.generate([PROMPTS[0]], max_new_tokens=4, temperature=1.0, seed=unseeded.stats.seed)
    assert replay[0].token_ids == unseeded.token_ids


def test_progress_bar_on_a_stream(tiny_model):
    stream = io.StringIO()
    llm(tiny_model).generate(PROMPTS, max_new_tokens=3, progress=stream)
    assert "3/3 requests" in stream.getvalue() and stream.getvalue().count("\n") == 1


@pytest.mark.parametrize("kw,code", [({"tp_size": 3}, "AK305"), ({"speculative_tokens": 2}, "AK487"),
                                     ({"cuda_graph": True}, "AK489"),
                                     ({"deny": ["sdpa"]}, "AK487"), ({"atention_backend": "sdpa"}, "AK487"),
                                     ({"page_size": "big"}, "AK306"), ({"kv_cache_dtype": "int3"}, "AK306"),
                                     ({"attention_backend": "triton"}, "AK121")])
def test_plan_flags_checked(tiny_model, kw, code):
    path, _ = tiny_model("llama")
    with pytest.raises(AttnkitError) as e:
        LLM(path, device="cpu", **kw)
    assert e.value.code == code


def test_generate_arguments_checked(tiny_model):
    model = llm(tiny_model, max_tokens=16)
    for call, code in [(lambda: model.generate(PROMPTS, seed=[1, 2]), "AK486"),
                       (lambda: model.generate(PROMPTS[0]), "AK486"),
                       (lambda: model.generate(PROMPTS, top_p=0), "AK486"),
                       (lambda: model.generate(PROMPTS, max_new_tokens=9), "AK485")]:
        with pytest.raises(AttnkitError) as e:
            call()
        assert e.value.code == code
    assert model.engine.allocator.num_free == model.engine.allocator.num_pages
