"""The Python face of planning: help(attnkit.plan) says how to call it, and a Plan renders as
the text `attnkit plan` prints."""
import contextlib
import io
import pydoc

import attnkit
from attnkit.cli.main import main


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
