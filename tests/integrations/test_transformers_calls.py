"""What transformers may hand an "attnkit" layer: every mask form and call shape it produces is
served exactly (checked against eager or sdpa), and what attnkit would otherwise drop or
misread is an AttnkitError with a fix, never a raw exception or a silently different result."""
import copy
import inspect
import sys
import threading
import types

import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.integrations import hf_call, hf_plan
from attnkit.integrations.dense_step import DenseLayout
from attnkit.integrations.transformers import attention_forward
from hf_tiny import build_config, close, dtype_kw

GEN = dict(do_sample=False, pad_token_id=0, eos_token_id=[])


def pair(family="llama", *, ref="eager", dtype=torch.float32, **extra):
    """(attnkit model, reference model) with the same random weights, eval mode."""
    import transformers

    config = build_config(family, **extra)
    auto = transformers.AutoModelForCausalLM
    torch.manual_seed(3)
    ours = auto.from_config(copy.deepcopy(config), attn_implementation="attnkit",
                            **dtype_kw(dtype)).eval()
    theirs = auto.from_config(copy.deepcopy(config), attn_implementation=ref, **dtype_kw(dtype)).eval()
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def ids_of(batch, length, seed=0):
    return torch.randint(1, 128, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_batch_of_one_without_padding(attnkit_tf, family):
    """No mask at all (transformers' is_causal shortcut) in prefill, decode and a static cache."""
    attnkit_tf()
    ours, eager = pair(family)
    ids = ids_of(1, 9)
    with torch.no_grad():
        close(ours(ids).logits, eager(ids).logits)
        for cache in ("dynamic", "static"):
            kw = dict(GEN, max_new_tokens=8, cache_implementation=cache)
            assert torch.equal(ours.generate(ids, **kw), eager.generate(ids, **kw))


@pytest.mark.parametrize("family", ["llama", "gpt_oss"])
def test_several_queries_over_a_cache(attnkit_tf, family):
    """Lq > 1 with a cache: a prompt fed in two chunks, and prompt-lookup (assisted) decoding."""
    import transformers

    attnkit_tf()
    ours, eager = pair(family)
    ids = ids_of(1, 11)
    # the cache argument is `cache` from transformers 5.2x on, `past_key_values` before
    name = "cache" if "cache" in inspect.signature(ours.forward).parameters else "past_key_values"
    with torch.no_grad():
        caches = [transformers.DynamicCache(), transformers.DynamicCache()]
        for part in (ids[:, :7], ids[:, 7:]):
            got, want = (m(part, use_cache=True, **{name: c}).logits
                         for m, c in zip((ours, eager), caches))
            close(got, want)
        kw = dict(GEN, max_new_tokens=8, prompt_lookup_num_tokens=3)
        doubled = torch.cat([ids, ids], 1)
        assert torch.equal(ours.generate(doubled, **kw), eager.generate(doubled, **kw))


@pytest.mark.parametrize("kv_heads", [1, 4])
def test_mqa_and_mha_head_counts(attnkit_tf, kv_heads):
    attnkit_tf()
    ours, eager = pair(num_key_value_heads=kv_heads)
    ids, mask = ids_of(2, 7), torch.tensor([[1] * 7, [0, 0, 0] + [1] * 4])
    with torch.no_grad():
        close(ours(ids, attention_mask=mask).logits[mask.bool()],
              eager(ids, attention_mask=mask).logits[mask.bool()])


def test_half_precision_computes_in_the_models_dtype(attnkit_tf):
    attnkit_tf()
    ours, eager = pair("gpt_oss", dtype=torch.float16)
    ids = ids_of(2, 8)
    with torch.no_grad():
        got, want = ours(ids).logits, eager(ids).logits
    assert got.dtype == torch.float16 and hf_plan.state_of(ours.config).current.plan.settings[
        "dtype"] == "fp16"
    close(got.float(), want.float(), rtol=1e-2)


@pytest.mark.parametrize("form", ["bool", "finfo_min", "minus_1e4", "minus_1e9"])
def test_custom_4d_masks(attnkit_tf, form):
    """A 4D mask the caller builds is handed over as is: boolean (compared with sdpa: eager adds
    a boolean mask as 0/1) or additive, with -10000 / -1e9 for masked keys as older code wrote."""
    attnkit_tf()
    ours, ref = pair(ref="sdpa" if form == "bool" else "eager")
    ids = ids_of(2, 8)
    causal = torch.ones(8, 8, dtype=torch.bool).tril().expand(2, 1, 8, 8).clone()
    causal[1, :, :, :3] = False                               # row 1: 3 left-padding keys
    masked = {"bool": None, "finfo_min": torch.finfo(torch.float32).min, "minus_1e4": -1e4,
              "minus_1e9": -1e9}[form]
    mask = causal if masked is None else torch.zeros(causal.shape).masked_fill(~causal, masked)
    rows = causal[:, 0].any(-1)                               # queries that see a key
    with torch.no_grad():
        close(ours(ids, attention_mask=mask).logits[rows], ref(ids, attention_mask=mask).logits[rows])


def test_integer_and_biased_4d_masks_are_refused():
    mask = torch.ones(4, 4, dtype=torch.bool).tril()[None, None]
    for bad, words in ((mask.long(), "mask.bool()"), (mask.float() - 1 + 0.5 * mask, "bias")):
        with pytest.raises(AttnkitError) as err:
            DenseLayout.of(bad, batch=1, q_len=4, kv_len=4, window=None, page_size=4,
                           device=torch.device("cpu"))
        assert err.value.code == "AK491" and words in err.value.message


def test_custom_masks_of_sliding_layers_need_the_window(attnkit_tf):
    """One 4D mask goes to every layer: refused, naming the fix (masks by layer type)."""
    attnkit_tf()
    ours, sdpa = pair("qwen2", ref="sdpa")                    # layer 1 slides (window 4)
    ids, i = ids_of(1, 8), torch.arange(8)
    full = (i[None] <= i[:, None])[None, None]
    with torch.no_grad(), pytest.raises(AttnkitError) as err:
        ours(ids, attention_mask=full)
    assert err.value.code == "AK491" and "no sliding window of 4" in err.value.message
    assert "'sliding_attention'" in err.value.message
    masks = {"full_attention": full, "sliding_attention": full & (i[None] > i[:, None] - 4)}
    with torch.no_grad():
        close(ours(ids, attention_mask=masks).logits, sdpa(ids, attention_mask=masks).logits)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_right_padding_matches_sdpa_at_every_position(attnkit_tf, family, recwarn):
    """Padding queries after a row's end attend to the row's keys, as sdpa computes them (they
    were zeros, with a warning); under qwen2's window of 4 their windows run out (sdpa gives
    zeros there too). generate() continues from them exactly."""
    attnkit_tf()
    ours, sdpa = pair(family, ref="sdpa")
    ids, mask = ids_of(2, 10), torch.tensor([[1] * 10, [1] * 3 + [0] * 7])
    with torch.no_grad():
        close(ours(ids, attention_mask=mask).logits, sdpa(ids, attention_mask=mask).logits)
        kw = dict(GEN, max_new_tokens=6, attention_mask=mask)
        assert torch.equal(ours.generate(ids, **kw), sdpa.generate(ids, **kw))
    assert not [w for w in recwarn if "padding" in str(w.message)]


@pytest.mark.parametrize("family", ["gemma2", "gpt_oss"])
def test_right_padding_with_softcap_and_sinks_matches_eager(attnkit_tf, family):
    attnkit_tf()
    ours, eager = pair(family)
    ids, mask = ids_of(2, 8), torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
    with torch.no_grad():
        close(ours(ids, attention_mask=mask).logits, eager(ids, attention_mask=mask).logits)


def test_bidirectional_4d_masks_match_sdpa(attnkit_tf):
    """An all-True mask (every token sees every token) and a causal mask with a bidirectional
    block (image tokens, as Gemma 3 and PaliGemma build it): positions 1.. of the all-True mask
    were zeros."""
    attnkit_tf()
    ours, sdpa = pair(ref="sdpa")
    ids = ids_of(2, 9)
    full = torch.ones(2, 1, 9, 9, dtype=torch.bool)
    block = torch.ones(9, 9, dtype=torch.bool).tril().expand(2, 1, 9, 9).clone()
    block[:, :, 2:6, 2:6] = True
    block[1, :, :, 0] = False                                 # row 1: one padding key
    with torch.no_grad():
        for mask in (full, block):
            close(ours(ids, attention_mask=mask).logits, sdpa(ids, attention_mask=mask).logits)


def test_packed_sequences_match_sdpa(attnkit_tf):
    """position_ids that restart without a mask or cache: transformers builds a block-diagonal
    causal mask for the packed sequences."""
    attnkit_tf()
    ours, sdpa = pair(ref="sdpa")
    ids = ids_of(1, 9)
    pos = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1]])
    with torch.no_grad():
        got = ours(ids, position_ids=pos, use_cache=False).logits
        want = sdpa(ids, position_ids=pos, use_cache=False).logits
        alone = sdpa(ids[:, 4:7], use_cache=False).logits     # the second sequence on its own
    close(got, want)
    # transformers >= 4.5x builds the block-diagonal mask: the second sequence is on its own
    if (want[:, 4:7] - alone).abs().max() <= 1e-4 * alone.abs().max():
        close(got[:, 4:7], alone)


def _call(module, **kwargs):
    """attention_forward on ``module`` with random q/k/v as transformers lays them out:
    [B, L, H, D] projections viewed as [B, H, L, D] (non-contiguous)."""
    cfg = module.config
    b, n, d = 2, 5, cfg.hidden_size // cfg.num_attention_heads
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, n, cfg.num_attention_heads, d, generator=g).transpose(1, 2)
    k, v = (torch.randn(b, n, cfg.num_key_value_heads, d, generator=g).transpose(1, 2)
            for _ in range(2))
    return (q, k, v), attention_forward(module, q, k, v, None, scaling=d ** -0.5, **kwargs)


def test_output_layout_is_what_transformers_reshapes(attnkit_tf):
    """[B, Lq, H, D] contiguous from non-contiguous inputs; no attention weights."""
    attnkit_tf()
    ours, _ = pair()
    (q, k, v), (out, weights) = _call(ours.model.layers[0].self_attn)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True).transpose(1, 2)
    assert weights is None and out.is_contiguous() and out.shape == want.shape
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(hf_call.UNSERVED_KWARGS))
def test_arguments_attnkit_cannot_apply_are_refused(attnkit_tf, name):
    """position_bias, per-token sinks, sparse indices ... would be silently dropped."""
    attnkit_tf()
    ours, _ = pair()
    with pytest.raises(AttnkitError) as err:
        _call(ours.model.layers[0].self_attn, **{name: torch.zeros(1)})
    assert err.value.code == "AK491" and name in err.value.message and "eager" in err.value.message


def test_output_attentions_warns_that_no_weights_come_back(attnkit_tf):
    attnkit_tf()
    ours, _ = pair()
    with torch.no_grad(), pytest.warns(UserWarning, match="no attention weights"):
        out = ours(ids_of(1, 5), output_attentions=True)
    assert not any(a is not None for a in out.attentions or ())


def test_features_the_plan_lacks_name_the_fix_that_applies(attnkit_tf):
    attnkit_tf()
    ours, _ = pair()
    layer = ours.model.layers[0].self_attn
    with pytest.raises(AttnkitError) as err:                  # llama's config has no sinks
        _call(layer, s_aux=torch.zeros(4))
    assert "does not have them" in err.value.message and "eager" in err.value.message
    ours.config.attn_logit_softcapping = 5.0                  # the config changed after loading
    with pytest.raises(AttnkitError) as err:
        _call(layer, softcap=5.0)
    assert "plan_for_model(model)" in err.value.message


def test_vision_towers_need_their_own_implementation(attnkit_tf):
    """A multimodal model: "attnkit" for the language model, a transformers one for the tower."""
    import transformers

    attnkit_tf()
    vision = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                                           num_attention_heads=2, image_size=16, patch_size=8)
    config = transformers.LlavaConfig(vision_config=vision, text_config=build_config("llama"),
                                      image_token_index=5)
    auto = transformers.AutoModelForImageTextToText
    ids = ids_of(1, 10)
    ids[0, 1:5] = 5                                           # 4 image tokens: (16 / 8) ** 2
    inputs = dict(input_ids=ids, pixel_values=torch.randn(1, 3, 16, 16))
    everything = auto.from_config(copy.deepcopy(config), attn_implementation="attnkit").eval()
    with torch.no_grad(), pytest.raises(AttnkitError) as err:
        everything(**inputs)
    assert err.value.code == "AK491" and "'vision_config': 'sdpa'" in err.value.message
    torch.manual_seed(0)
    ours = auto.from_config(copy.deepcopy(config), attn_implementation={
        "text_config": "attnkit", "vision_config": "sdpa"}).eval()
    eager = auto.from_config(copy.deepcopy(config), attn_implementation="eager").eval()
    eager.load_state_dict(ours.state_dict())
    with torch.no_grad():
        close(ours(**inputs).logits, eager(**inputs).logits)


def test_one_model_in_many_threads():
    """The layout cache of a model served from several threads (it raised KeyError)."""
    state = hf_plan.ModelState({})
    planned = types.SimpleNamespace(page_size=4)
    masks = [torch.ones(1, 1, 1, n, dtype=torch.bool) for n in range(1, 30)]
    errors = []

    def work(seed):
        try:
            for i in range(200):
                m = masks[(i * 7 + seed) % len(masks)]
                state.layout(m, batch=1, q_len=1, kv_len=m.shape[-1], window=None,
                             planned=planned, device=torch.device("cpu"))
        except Exception as exc:                              # noqa: BLE001 - collected
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:2]


@pytest.mark.parametrize("bad", ["batch", "kv_len", "none", "mask_list", "mask_meta", "scaling",
                                 "window", "softcap", "is_causal", "module"])
def test_malformed_calls_are_coded(attnkit_tf, bad):
    """What a caller other than transformers may hand attention_forward: each was an
    IndexError, AttributeError or ValueError (or, for scaling/softcap, a silent NaN)."""
    attnkit_tf()
    ours, _ = pair()
    module = ours.model.layers[0].self_attn
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 5, 16, generator=g) for h in (4, 2, 2))
    args, kw = [module, q, k, v, None], {}
    if bad == "batch":
        args[2], args[3] = k[:1], v[:1]
    elif bad == "kv_len":
        args[3] = v[:, :, :3]
    elif bad == "none":
        args[1] = None
    elif bad == "mask_list":
        args[4] = [[1]]
    elif bad == "mask_meta":
        args[4] = torch.ones(2, 1, 5, 5, dtype=torch.bool, device="meta")
    elif bad == "module":
        args[0] = torch.nn.Linear(2, 2)
    else:
        kw = {"scaling": float("nan"), "window": {"sliding_window": 0},
              "softcap": {"softcap": -1.0}, "is_causal": {"is_causal": "no"}}[bad]
        kw = kw if isinstance(kw, dict) else {"scaling": kw}
    with pytest.raises(AttnkitError) as err:
        attention_forward(*args, **kw)
    assert err.value.code == "AK491"


def test_an_empty_call_returns_an_empty_output(attnkit_tf):
    attnkit_tf()
    ours, _ = pair()
    q, k = torch.zeros(2, 4, 0, 16), torch.zeros(2, 2, 0, 16)
    out, _ = attention_forward(ours.model.layers[0].self_attn, q, k, k, None)
    assert out.shape == (2, 0, 4, 16)
