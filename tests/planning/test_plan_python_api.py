"""The Python face of planning: help(attnkit.plan) says how to call it, a Plan renders as the
text `attnkit plan` prints, and a pipeline given to plan() is refused with the way to plan it."""
import contextlib
import io
import json
import pydoc

import pytest

import attnkit
from attnkit.cli.main import main
from attnkit.model.pipeline import load_components
from attnkit.planning.components import plan_components


def test_help_names_the_arguments_and_the_result():
    text = pydoc.render_doc(attnkit.plan, renderer=pydoc.plaintext)
    for word in ("preset", "attnkit models", "attnkit devices", "page_size", "kv_cache_dtype",
                 "Plan", "to_dict", "AttnkitError", "print(p)"):
        assert word in text, word


def test_the_docstring_example_is_true():
    p = attnkit.plan("deepseek-v3", "h100", page_size=64)
    assert (p.ok, p.prefill_backend, p.decode_backend, p.settings["page_size"]) == (True, "sdpa", "triton_mla", 64)


def test_str_of_a_plan_is_the_cli_text():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "llama-3.1-8b", "--device", "cpu"]) == 0
    p = attnkit.plan("llama-3.1-8b", "cpu", label="llama-3.1-8b")
    assert str(p) == p.render() == out.getvalue()
    assert p.render(short=True).startswith("llama-3.1-8b on") and "rejected" not in p.render(short=True)


def test_a_pipeline_preset_given_to_plan_is_a_coded_refusal_that_names_the_pipeline_api():
    """Found by the probe: plan("flux.1-dev") said "not a model preset ... Did you mean 'flux.1-dev'?"."""
    for name in ("flux.1-dev", " Wan2.1-T2V-14B "):
        with pytest.raises(attnkit.AttnkitError) as err:
            attnkit.plan(name, "h200")
        e = err.value
        assert e.code == "AK525", e
        assert "did you mean" not in str(e).lower()
        assert "pipeline" in str(e) and "plan_components" in str(e) and "attnkit plan" in str(e)
    assert plan_components(load_components("flux.1-dev"), "h200").components   # what it points to works


def test_a_pipeline_directory_given_to_plan_is_the_same_refusal(tmp_path):
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    with pytest.raises(attnkit.AttnkitError) as err:
        attnkit.plan(str(tmp_path), "h200")
    assert err.value.code == "AK525" and "plan_components" in str(err.value)
