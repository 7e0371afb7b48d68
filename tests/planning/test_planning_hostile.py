"""Planner inputs a hostile user tries (the adversarial review of 2026-12-02): each is planned
truthfully or refused with a coded error, never a raw exception or a silently ignored setting."""
import pytest

from attnkit import plan


@pytest.mark.parametrize("settings, flag", [(dict(cuda_graph="on"), "--cuda-graph on"),
                                            (dict(speculative_tokens=4), "--speculative-tokens 4")])
def test_decode_only_settings_on_an_encoder_are_named_as_ignored(settings, flag):
    """An encoder has no decode phase, so nothing is captured and no draft is verified: the
    plan said cuda_graph=True / speculative_tokens=4 and nothing else (a decode backend flag
    already got a warning)."""
    p = plan("bge-m3", "h100", settings)
    assert p.ok and p.decode_backend is None
    assert any(w.startswith(f"{flag} ignored") and "no decode phase" in w for w in p.warnings), p.warnings


def test_decoder_settings_are_not_warned_about():
    p = plan("llama-3.1-8b", "h100", cuda_graph="on", speculative_tokens=2, attention_backend="triton")
    assert not any("ignored" in w for w in p.warnings), p.warnings


def test_what_cuda_graph_auto_is_said_to_need_is_what_it_needs():
    """--cuda-graph's help and AK311's fix said auto needs *both* backends to declare
    cuda_graph; the rule needs the decode backend only (prefill runs eagerly)."""
    from attnkit.cli.main import build_parser
    from attnkit.registry import declarations

    auto = plan("deepseek-v3", "h100")
    assert auto.settings["cuda_graph"] is True
    assert "cuda_graph" not in declarations()[auto.prefill_backend].capabilities.features
    refused = plan("llama-3.1-8b", "cpu", cuda_graph="on")
    assert refused.error["code"] == "AK311"
    help_text = build_parser()._subparsers._group_actions[0].choices["plan"].format_help()
    for text in (" ".join(refused.error["solutions"]), " ".join(help_text.split())):
        assert "decode backend declares it" in text and "both backends" not in text, text


@pytest.mark.parametrize("settings", [dict(page_size="abc"), dict(tp_size=0), dict(dtype="fp64"),
                                      dict(bogus=1), dict(speculative_tokens=-1)])
def test_an_invalid_setting_is_not_sent_to_a_list_the_message_lacks(settings):
    """AK306's fix read "Use a value from the message's list" under messages with no list
    ("expected an integer")."""
    from attnkit.errors import AttnkitError
    with pytest.raises(AttnkitError) as err:
        plan("llama-3.1-8b", "h100", settings)
    e = err.value
    assert e.code == "AK306"
    for fix in e.solutions:
        assert "message's list" not in fix, (e.message, fix)


@pytest.mark.parametrize("kwargs, code, field", [
    (dict(env=5), "AK306", "env"),
    (dict(env={"ATTNKIT_ATTENTION_BACKEND": 5}), "AK306", "env['ATTNKIT_ATTENTION_BACKEND']"),
    (dict(env={"ATTNKIT_PROFILE": b"/tmp/x"}), "AK306", "env['ATTNKIT_PROFILE']"),
    (dict(registry=5), "AK306", "registry"),
    (dict(registry={"x": 1}), "AK306", "registry"),
    (dict(table=5), "AK306", "table"),
    (dict(table=[1]), "AK306", "table"),
    (dict(profile=[]), "AK306", "profile"),           # was: silently "find one"
    (dict(profile=123), "AK306", "profile"),
    (dict(profile=""), "AK230", "profile"),           # was: silently "find one"
    (dict(workload={"decode": {"batch": 1, "context": 10**400}}), "AK306", "workload['decode']"),  # ValueError
    (dict(workload={"decode": {"batch": 10**5000}}), "AK306", "workload['decode']"),
])
def test_plan_keyword_arguments_of_the_wrong_kind_are_coded(kwargs, code, field):
    """These reached AttributeError / TypeError / ValueError inside the solver, or were
    silently read as "no profile named"."""
    from attnkit.errors import AttnkitError
    with pytest.raises(AttnkitError) as err:
        plan("llama-3.1-8b", "h100", **kwargs)
    assert (err.value.code, err.value.field) == (code, field), err.value


def test_a_platform_that_lists_no_packages_plans():
    """Platform(packages=None) passed validation, then to_dict() raised AttributeError."""
    import dataclasses
    from attnkit.hardware import get_preset
    p = plan("llama-3.1-8b", dataclasses.replace(get_preset("cpu"), packages=None), env={})
    assert p.platform["packages"] == {}


def test_a_hand_built_layer_with_a_5000_digit_head_count_is_ak130():
    """math.log2 failed (ValueError) in the profile ranking; the validator took any int >= 1."""
    import dataclasses
    from attnkit.errors import AttnkitError
    from attnkit.model import load_model
    m = load_model("llama-3.1-8b")
    model = dataclasses.replace(m, layers=(dataclasses.replace(m.layers[0], num_heads=10**5000),))
    with pytest.raises(AttnkitError) as err:
        plan(model, "h100")
    assert (err.value.code, err.value.field) == ("AK130", "num_heads")


def test_a_missing_feature_reason_says_what_the_backend_accepts():
    """AK103 gave required == actual == the feature (docs/plan-json.md: required is what the
    declaration accepts), so the JSON named no difference."""
    from attnkit.registry import declarations
    p = plan("llama-4-scout", "h100")
    reason = next(r for r in p.rejected["triton_mla"] if r.code == "AK103")
    assert reason.actual == "chunked_local"
    assert reason.required == sorted(declarations()["triton_mla"].capabilities.features)
    assert "chunked_local" not in reason.required
