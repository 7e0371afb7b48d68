"""Hand-built specs and platforms, keyword settings and setting strings: coded errors, never
TypeError / ValueError (issue 13). Each case raised a raw exception or planned before."""
import dataclasses
import math

import pytest

import attnkit
from attnkit.errors import AttnkitError
from attnkit.hardware import get_preset
from attnkit.model.spec import DualChunkConfig, LayerAttention, MLAConfig, ModelAttention, SparseTopK
from attnkit.planning.request import parse_request

GOOD = LayerAttention(layer_id=0, num_heads=8, num_kv_heads=2, head_dim=64)
MLA = MLAConfig(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
MLA_LAYER = LayerAttention(layer_id=0, num_heads=16, num_kv_heads=1, head_dim=192, v_head_dim=128,
                           kind="mla", mla=MLA)


def _code(fn) -> AttnkitError:
    with pytest.raises(AttnkitError) as info:
        fn()
    return info.value


def _model(*layers, **kw):
    return ModelAttention(name="hand", architecture="Hand", layers=tuple(layers), **kw)


@pytest.mark.parametrize("layers, kw, field", [
    ((dataclasses.replace(GOOD, scale=math.nan),), {}, "scale"),
    ((dataclasses.replace(GOOD, scale=-0.125),), {}, "scale"),
    ((dataclasses.replace(GOOD, scale=math.inf),), {}, "scale"),
    ((dataclasses.replace(GOOD, head_dim=0),), {}, "head_dim"),
    ((dataclasses.replace(MLA_LAYER, mla=dataclasses.replace(MLA, kv_lora_rank=-512)),), {}, "mla"),
    ((dataclasses.replace(MLA_LAYER, mla=dataclasses.replace(MLA, q_lora_rank=0)),), {}, "mla"),
    ((GOOD, GOOD), {}, "layer_id"),
    ((dataclasses.replace(GOOD, layer_id=-1),), {}, "layer_id"),
    ((dataclasses.replace(GOOD, attention_chunk=0),), {}, "attention_chunk"),
    ((dataclasses.replace(GOOD, sparse_topk=SparseTopK(0, 64, 128)),), {}, "sparse_topk"),
    ((dataclasses.replace(GOOD, dual_chunk=DualChunkConfig(8, 8)),), {}, "dual_chunk"),
    ((dataclasses.replace(GOOD, sinks=1),), {}, "sinks"),
    ((GOOD,), {"other_layers": ((1, "transformer"),)}, "other_layers"),
    ((GOOD,), {"other_layers": ((1, "mamba"), (1, "mlp"))}, "other_layers"),
    ((GOOD,), {"dtype": 16}, "dtype"),
])
def test_hand_built_specs_are_validated(layers, kw, field):
    err = _code(lambda: attnkit.plan(_model(*layers, **kw), "h100", env={}))
    assert (err.code, err.field) == ("AK130", field), err


def test_a_valid_hand_built_hybrid_plans():
    model = _model(dataclasses.replace(GOOD, layer_id=1), other_layers=((0, "mamba"), (2, "mlp")))
    assert attnkit.plan(model, "h100", env={}).ok


@pytest.mark.parametrize("changes, field", [
    (dict(kind="gpu"), "platform.kind"), (dict(capability=(9,)), "platform.capability"),
    (dict(capability=(9, "0")), "platform.capability"), (dict(memory_gb=-1.0), "platform.memory_gb"),
    (dict(memory_gb=math.nan), "platform.memory_gb"), (dict(packages={"torch": 2}), "platform.packages"),
    (dict(name=""), "platform.name"), (dict(preset=5), "platform.preset"),
])
def test_platform_objects_are_validated(changes, field):
    bad = dataclasses.replace(get_preset("h100"), **changes)
    err = _code(lambda: attnkit.plan("llama-3.1-8b", bad, env={}))
    assert (err.code, err.field) == ("AK201", field), err


def test_unknown_keyword_settings_are_coded():
    err = _code(lambda: attnkit.plan("llama-3.1-8b", "h100", env={}, page_sise=16))
    assert err.code == "AK306" and "page_size" in err.message   # did you mean
    assert attnkit.plan("llama-3.1-8b", "h100", env={}, tp_size=2).settings["tp_size"] == 2


@pytest.mark.parametrize("text", ["--5", "²", "١٦", "1e3", "16.0", "0x10", "9" * 40])
def test_setting_strings_never_reach_int(text):
    err = _code(lambda: parse_request({"page_size": text}))
    assert err.code == "AK306" and err.field == "page_size"


def test_huge_setting_values_print():
    err = _code(lambda: parse_request({"page_size": 10 ** 5000}))
    assert err.code == "AK306" and "too large to print" in err.message


def test_mixed_type_request_keys():
    assert _code(lambda: parse_request({1: 2, "x": 3})).code == "AK306"
