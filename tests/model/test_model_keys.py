"""Walk model/keys.py: every rule does what it says, in every family it names.

modelled -> the key changes the parsed spec (against the same config without it, which may also
fail to parse); refused -> parsing raises the rule's code naming the key; outside -> it parses
and a model note names the key; unused -> the spec is exactly the one without the key.
"""
import pytest

from attnkit.errors import AttnkitError
from attnkit.model import parse_config
from attnkit.model.keys import RULES, STATUSES, classify

MHA = {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256, "num_hidden_layers": 4}
MLA = {"num_attention_heads": 4, "num_hidden_layers": 2, "kv_lora_rank": 32, "qk_rope_head_dim": 16,
       "qk_nope_head_dim": 32, "v_head_dim": 32}
# A config per family that parses as it stands (test-side: written from each family's transformers config).
BASES = {
    "nemotron_h": {**MHA, "head_dim": 64, "hybrid_override_pattern": "M*-*"},
    "jamba": {**MHA, "num_hidden_layers": 8},
    "bamba": {**MHA, "attn_layer_indices": [1]},
    "modernbert": {**MHA, "num_key_value_heads": 4, "global_attn_every_n_layers": 1},
    "deepseek_v32": MLA, "glm_moe_dsa": MLA,
}
STAR = "mystery"   # a family no rule names: what "*" rules cover


def _base(family: str) -> dict:
    return {"model_type": family, **BASES.get(family, MHA)}


def _parse(cfg):
    try:
        return parse_config(cfg)
    except AttnkitError as err:
        return err


def _spec(result):
    if isinstance(result, AttnkitError):
        return ("error", result.code, result.field)
    return (result.layers, result.other_layers)


CASES = [(rule, family) for rule in RULES for family in rule.families]


@pytest.mark.parametrize("rule, family", CASES,
                         ids=[f"{r.key}-{r.status}-{f}" for r, f in CASES])
def test_rule_holds(rule, family):
    family = STAR if family == "*" else family
    with_key = {**_base(family), **rule.example}
    without = {k: v for k, v in with_key.items() if k != rule.key}
    assert rule.status in STATUSES
    assert classify(rule.key, family, rule.example[rule.key]) == (rule.status, rule)
    got = _parse(with_key)
    if rule.status == "refused":
        assert isinstance(got, AttnkitError) and got.code == rule.code, got
        assert rule.key in got.message and got.field.endswith(rule.key)
        return
    assert not isinstance(got, AttnkitError), got
    if rule.status == "modelled":
        assert _spec(got) != _spec(_parse(without)), f"{rule.key} changed nothing for {family}"
    elif rule.status == "outside":
        assert any(rule.key in note for note in got.notes), got.notes
        assert _spec(got) == _spec(_parse(without))
    else:
        assert _spec(got) == _spec(_parse(without)), f"{rule.key} claimed unused changed {family}"


@pytest.mark.parametrize("family, extra", [
    ("llama", {"attention_chunk_size": 16}),                     # a '*' rule needs layer_types
    (STAR, {"hybrid_override_pattern": "M*M*"}),                 # only NemotronH's
    (STAR, {"index_topk": 4}),                                   # DSA in an MHA family
    ("llama", {"no_rope_layers": [1, 0, 1, 0]}),                 # Llama-4's
    (STAR, {"sliding_window": 8}),                               # which layers? nobody says
    ("bert", {"full_attention_interval": 2}),                    # Qwen3-Next's
    ("gemma3_text", {"layer_types": ["linear_attention"] * 4}),  # vLLM reuses the name for block-local
])
def test_attention_keys_a_family_does_not_use_are_refused(family, extra):
    err = _parse({**_base(family), **extra})
    assert isinstance(err, AttnkitError) and err.code in ("AK512", "AK513"), err
    assert next(iter(extra)) in err.message


def test_inactive_values_change_nothing():
    for family, extra in [("qwen2", {"use_sliding_window": False, "sliding_window": 4096,
                                     "max_window_layers": 2}),
                          ("llama", {"is_causal": True, "use_bidirectional_attention": False}),
                          ("bert", {"is_decoder": False, "position_embedding_type": "absolute"})]:
        got = _parse({**_base(family), **extra})
        assert _spec(got) == _spec(_parse(_base(family))), (family, got)


def test_a_modelled_key_the_parse_never_reads_is_refused(monkeypatch):
    """The enforcement itself: a rule promising 'modelled' that no parser code reads refuses."""
    import attnkit.model.keys as keys

    fake = keys._rule("made_up_window", "llama", "modelled", "a window", "nothing yet", {"made_up_window": 8})
    monkeypatch.setattr(keys, "RULES", keys.RULES + (fake,))
    err = _parse({**_base("llama"), "made_up_window": 8})
    assert isinstance(err, AttnkitError) and err.code == "AK513" and "made_up_window" in err.message
