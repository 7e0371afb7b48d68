"""Config values the runner reads, through the planner's typed reader: a malformed value is an
AK5xx naming the field (these were AK900 from a bare float()/int()/dict(), or silently wrong
numbers), a null is the field's default, as the planner reads it."""
import pytest

from attnkit.cli import main as cli
from attnkit.errors import AttnkitError
from attnkit.runner import Engine
from runner_helpers import close, edit_config

ROPE = {"rope_type": "default", "rope_theta": 10000.0}


@pytest.mark.parametrize("changes,code,field", [
    ({"rms_norm_eps": "1e-6"}, "AK504", "rms_norm_eps"),
    ({"rms_norm_eps": [1e-6]}, "AK504", "rms_norm_eps"),
    ({"rms_norm_eps": -1.0}, "AK505", "rms_norm_eps"),           # was NaN logits, token 0
    ({"rope_parameters": {**ROPE, "rope_theta": "1e4"}}, "AK504", "rope_parameters.rope_theta"),
    # rope_theta <= 0: NaN frequencies, NaN logits, greedy emitted id 0 with no error
    ({"rope_parameters": {**ROPE, "rope_theta": 0}}, "AK505", "rope_parameters.rope_theta"),
    ({"rope_parameters": {**ROPE, "rope_theta": -5.0}}, "AK505", "rope_parameters.rope_theta"),
    ({"rope_parameters": None, "rope_theta": -1.0}, "AK505", "rope_theta"),
    ({"rope_parameters": "default"}, "AK504", "rope_parameters"),
    ({"rope_parameters": ["default"]}, "AK504", "rope_parameters"),
    ({"rope_parameters": {**ROPE, "rope_type": 5}}, "AK504", "rope_parameters.rope_type"),
    ({"rope_parameters": {**ROPE, "partial_rotary_factor": "half"}}, "AK504",
     "rope_parameters.partial_rotary_factor"),
    ({"rope_parameters": {**ROPE, "partial_rotary_factor": 2.0}}, "AK505",
     "rope_parameters.partial_rotary_factor"),
    ({"partial_rotary_factor": [1]}, "AK504", "partial_rotary_factor"),
    ({"partial_rotary_factor": 0.1}, "AK505", "partial_rotary_factor"),   # 1.6 features of 16
    ({"rope_parameters": {**ROPE, "rope_type": "linear", "factor": "2"}}, "AK504",
     "rope_parameters.factor"),
    ({"rope_parameters": {**ROPE, "rope_type": "yarn", "factor": 2.0, "beta_fast": "x",
                          "original_max_position_embeddings": 64}}, "AK504",
     "rope_parameters.beta_fast"),
    ({"rope_parameters": {**ROPE, "rope_type": "yarn", "factor": 2.0, "rope_theta": 1.0,
                          "original_max_position_embeddings": 64}}, "AK505",
     "rope_parameters.rope_theta"),                               # ln(theta) = 0 divides
    ({"rope_parameters": {**ROPE, "rope_type": "yarn", "factor": 2.0,
                          "original_max_position_embeddings": "64"}}, "AK504",
     "rope_parameters.original_max_position_embeddings"),
    ({"tie_word_embeddings": "yes"}, "AK504", "tie_word_embeddings"),   # was bool("yes")
    ({"hidden_act": ["silu"]}, "AK504", "hidden_act"),
    ({"vocab_size": "128"}, "AK504", "vocab_size"),
])
def test_malformed_values_name_the_field(tiny_model, tmp_path, changes, code, field):
    path = edit_config(tiny_model("llama")[0], tmp_path, **changes)
    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(path, backend="torch_native", page_size=4)
    assert (err.value.code, err.value.field) == (code, field)


@pytest.mark.parametrize("changes", [{"swiglu_alpha": "x"}, {"swiglu_limit": -1.0},
                                     {"num_local_experts": 2.5}])
def test_gpt_oss_expert_values(tiny_model, tmp_path, changes):
    path = edit_config(tiny_model("gpt_oss")[0], tmp_path, **changes)
    with pytest.raises(AttnkitError) as err:
        Engine.from_pretrained(path, backend="torch_native", page_size=4)
    assert err.value.code in ("AK504", "AK505") and err.value.field in changes


@pytest.mark.parametrize("changes", [
    {"rms_norm_eps": None}, {"rope_parameters": None}, {"rope_parameters": {"rope_type": None}},
    {"rope_parameters": {**ROPE, "rope_theta": None}}, {"partial_rotary_factor": None},
    {"tie_word_embeddings": None}, {"hidden_act": None}])
def test_null_is_the_default(tiny_model, tmp_path, hf_logits, changes):
    """The tiny model uses the defaults (eps 1e-6, theta 1e4, full rotation, untied, silu), so
    transformers' logits of the unedited model are the oracle."""
    source, hf = tiny_model("llama")
    path = edit_config(source, tmp_path, **changes)
    engine = Engine.from_pretrained(path, backend="torch_native", page_size=4)
    close(engine.prefill([[1, 5, 9, 4]])[0], hf_logits(hf, [1, 5, 9, 4]))


@pytest.mark.parametrize("changes,code", [({"rms_norm_eps": "1e-6"}, "AK504"),
                                          ({"rope_parameters": [1]}, "AK504"),
                                          ({"rope_parameters": {**ROPE, "rope_theta": 0}}, "AK505")])
def test_generate_cli_exits_2_with_the_code(tiny_model, tmp_path, capsys, changes, code):
    path = edit_config(tiny_model("llama")[0], tmp_path, **changes)
    rc = cli.main(["generate", str(path), "--prompt-ids", "1,2", "--device", "cpu",
                   "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and f"error {code}" in err and "Traceback" not in err
