"""Tiny random-weight transformers models for the attn_implementation="attnkit" tests.

``tiny(family)`` -> (model directory, the model loaded with attn_implementation="eager"), fp32,
built and saved once per session. ``attnkit_tf`` registers "attnkit" with the flags a test
gives and restores the registered defaults afterwards. Works with transformers 4.55+ and 5.x.
"""
import pytest

from hf_tiny import build_config


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    built = {}

    def get(family: str):
        if family not in built:
            import torch
            import transformers

            torch.manual_seed(sum(map(ord, family)))
            model = transformers.AutoModelForCausalLM.from_config(build_config(family)).eval()
            path = tmp_path_factory.mktemp(family)
            model.save_pretrained(path)
            eager = transformers.AutoModelForCausalLM.from_pretrained(
                path, attn_implementation="eager").eval()
            built[family] = (path, eager)
        return built[family]

    return get


@pytest.fixture
def attnkit_tf(monkeypatch):
    """register(**flags) for one test; the environment is cleared of ATTNKIT_* overrides."""
    from attnkit.integrations import hf_plan
    from attnkit.integrations.transformers import register

    monkeypatch.delenv("ATTNKIT_ATTENTION_BACKEND", raising=False)
    monkeypatch.delenv("ATTNKIT_DENY_BACKENDS", raising=False)
    saved = dict(hf_plan.DEFAULT_FLAGS)
    yield register
    hf_plan.DEFAULT_FLAGS.clear()
    hf_plan.DEFAULT_FLAGS.update(saved)
