"""Two planner findings: AK305 lists every tensor-parallel size that works (not only powers of
two), and a model dict with non-string keys is AK502, not a raw TypeError."""
from __future__ import annotations

import pytest

import attnkit
from attnkit.errors import AttnkitError

SIX_HEADS = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 384,
             "num_attention_heads": 6, "num_key_value_heads": 6, "num_hidden_layers": 2,
             "vocab_size": 100, "intermediate_size": 64, "max_position_embeddings": 64}


def test_ak305_lists_every_size_that_plans():
    p = attnkit.plan(SIX_HEADS, "h100", tp_size=4)
    assert p.error["code"] == "AK305"
    listed = p.error["expected"]
    assert listed == [1, 2, 3, 6] and "1, 2, 3, 6" in p.error["message"]
    for t in range(1, 9):            # the oracle: what the planner itself accepts
        assert attnkit.plan(SIX_HEADS, "h100", tp_size=t).ok == (t in listed), t


@pytest.mark.parametrize("cfg", [{1: 2, **SIX_HEADS}, {(1, 2): 3, **SIX_HEADS},
                                 {"model_type": "gemma3", "text_config": {**SIX_HEADS, None: 1}}])
def test_non_string_keys_are_ak502(cfg):
    with pytest.raises(AttnkitError) as err:
        attnkit.plan(cfg, "cpu")
    assert err.value.code == "AK502"


def test_int_keys_transformers_writes_are_fine():
    """transformers' config.to_dict() keys id2label by int: not a name attnkit reads."""
    assert attnkit.plan({**SIX_HEADS, "id2label": {0: "a", 1: "b"}}, "cpu").ok
