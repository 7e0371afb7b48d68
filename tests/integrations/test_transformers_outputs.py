"""attn_implementation="attnkit" computes what "eager" computes: fp32 logits of left-padded
batches, per-step logits of generate() with transformers' own cache, and greedy tokens."""
import pytest
import torch

from attnkit.integrations.transformers import attnkit_plan
from hf_tiny import close, load

# sdpa has no softcap and no sinks, so Gemma-2 and gpt-oss run on torch_native only.
CASES = [("llama", "torch_native"), ("llama", "sdpa"), ("qwen2", "torch_native"),
         ("qwen2", "sdpa"), ("gemma2", "torch_native"), ("gpt_oss", "torch_native")]
PAD = 0


def left_padded(lengths, total, seed=0):
    """input_ids [B, total] and attention_mask, row i holding lengths[i] tokens on the right."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 128, (len(lengths), total), generator=g)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, : total - n] = PAD
        mask[i, total - n:] = 1
    return ids, mask


def real(logits, mask):
    return logits[mask.bool()]


@pytest.mark.parametrize("family,backend", CASES)
def test_left_padded_logits_match_eager(tiny, attnkit_tf, family, backend):
    path, eager = tiny(family)
    attnkit_tf(attention_backend=backend)
    model = load(path)
    assert attnkit_plan(model).prefill_backend == backend
    ids, mask = left_padded([12, 7, 3], 12)          # longer than every sliding window
    with torch.no_grad():
        want = eager(input_ids=ids, attention_mask=mask).logits
        got = model(input_ids=ids, attention_mask=mask).logits
    close(real(got, mask), real(want, mask))


@pytest.mark.parametrize("family,backend", CASES)
def test_generate_matches_eager(tiny, attnkit_tf, family, backend):
    path, eager = tiny(family)
    attnkit_tf(attention_backend=backend)
    model = load(path)
    ids, mask = left_padded([5, 9, 2], 9, seed=1)
    kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
              pad_token_id=PAD, return_dict_in_generate=True, output_logits=True)
    with torch.no_grad():
        want, got = eager.generate(**kw), model.generate(**kw)
    assert torch.equal(got.sequences, want.sequences)      # greedy, fp32: token-identical
    for step_got, step_want in zip(got.logits, want.logits, strict=True):
        close(step_got, step_want)


@pytest.mark.parametrize("page_size", [1, 3])
def test_page_sizes_and_right_padding(tiny, attnkit_tf, page_size):
    """Rows spanning many pages; right padding (pad queries that do not see themselves)."""
    path, eager = tiny("gemma2")
    attnkit_tf(page_size=page_size)
    model = load(path)
    assert attnkit_plan(model).settings["page_size"] == page_size
    ids, mask = left_padded([11, 6, 4], 11, seed=2)
    ids, mask = ids.flip(-1), mask.flip(-1)                 # padding on the right
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=mask).logits
        want = eager(input_ids=ids, attention_mask=mask).logits
    close(real(got, mask), real(want, mask))
    # rows 0, 1: every padding query sees a key in every layer (window 6), so every position
    # matches; row 2's last padding queries see none (eager averages all keys there, sdpa and
    # attnkit give zeros)
    close(got[:2], want[:2])


def test_static_cache_generate(tiny, attnkit_tf):
    """StaticCache hands every call the whole preallocated cache: unwritten slots are dropped."""
    path, eager = tiny("gpt_oss")
    attnkit_tf()
    model = load(path)
    ids, mask = left_padded([6, 3], 6, seed=3)
    kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False,
              pad_token_id=PAD, cache_implementation="static")
    with torch.no_grad():
        assert torch.equal(model.generate(**kw), eager.generate(**kw))


def test_prepare_runs_once_per_mask(tiny, attnkit_tf, monkeypatch):
    """Layers handed the same mask share one step: the backend prepares once per mask."""
    path, _ = tiny("llama")
    attnkit_tf(attention_backend="torch_native")
    model = load(path)
    backend = _backend(model)
    calls = []
    real_prepare = backend.prepare
    monkeypatch.setattr(backend, "prepare", lambda meta, cache: calls.append(meta) or
                        real_prepare(meta, cache))
    ids, mask = left_padded([8, 5], 8)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    assert len(calls) == 1 and model.config.num_hidden_layers == 2
    assert list(calls[0].seq_lens_cpu) == [8, 5]                 # padding never reaches the backend


def _backend(model):
    from attnkit.integrations import hf_plan

    return hf_plan.state_of(model.config).current.backend
