"""Config inputs that reached AK900 (raw OverflowError, RecursionError, ValueError, OSError)
get AK5xx codes, through load_model and through `attnkit plan --json`."""
import json

import pytest

from attnkit.errors import AttnkitError
from attnkit.model import load_model, preset_config

MHA = {"model_type": "llama", "num_attention_heads": 8, "hidden_size": 512, "num_hidden_layers": 2}


def _err(source) -> AttnkitError:
    with pytest.raises(AttnkitError) as info:
        load_model(source)
    json.dumps(info.value.to_dict())                 # the error itself always serialises
    return info.value


def test_yarn_mscale_overflow():
    cfg = preset_config("deepseek-v3")
    cfg["rope_scaling"]["mscale_all_dim"] = 1e308
    err = _err(cfg)
    assert (err.code, err.field) == ("AK505", "rope_scaling.mscale_all_dim")


def test_deeply_nested_json_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert _err(path).code == "AK514"


def test_5000_digit_integer_in_a_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "num_attention_heads": ' + "9" * 5000 + "}")
    assert _err(path).code == "AK514"


@pytest.mark.parametrize("key", ["num_attention_heads", "hidden_size", "sliding_window"])
def test_huge_integers_in_a_dict(key):
    err = _err({**MHA, "model_type": "mistral", key: 10 ** 5000})
    assert err.code == "AK505" and err.field == key and "digits" in err.message


def test_deeply_nested_value_in_a_dict():
    deep = []
    for _ in range(100_000):
        deep = [deep]
    err = _err({**MHA, "num_attention_heads": deep})
    assert err.code == "AK504" and err.field == "num_attention_heads"


@pytest.mark.parametrize("path", ["a" * 5000 + ".json", "x/" + "b" * 300 + "/config.json", "bad\0name.json"])
def test_paths_the_os_refuses(path):
    err = _err(path)
    assert err.code == "AK500" and len(err.message) < 400


def test_a_weights_file_passed_as_config(tmp_path):
    path = tmp_path / "model.json"
    with open(path, "wb") as f:
        f.truncate(17 << 20)                         # sparse: 17 MiB of zeros, no disk use
    err = _err(path)
    assert err.code == "AK500" and "bytes" in err.message
