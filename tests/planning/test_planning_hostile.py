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
