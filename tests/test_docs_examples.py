"""The Python examples in docs/ run as written."""
import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("page", ["backends.md"])
def test_python_examples_run(page):
    text = (DOCS / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, f"no python example in {page}"
    for code in blocks:
        scope: dict = {}
        exec(compile(code, f"docs/{page}", "exec"), scope)
    assert tuple(scope["out"].shape) == (20, 512)


def test_the_dsa_example_runs():
    """docs/dsa.md: a DSA layer on torch_native with an fp8 index cache, against reference_dsa."""
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / "dsa.md").read_text(), re.S)
    assert len(blocks) == 1
    scope: dict = {}
    exec(compile(blocks[0], "docs/dsa.md", "exec"), scope)
    assert tuple(scope["out"].shape) == (20, 128) and scope["cache"].index_k_scale[0].any()


def test_runner_examples_run_on_the_tiny_model_the_page_builds(tmp_path, monkeypatch):
    """docs/runner.md: its first block builds ./tiny-llama; the Engine and LLM examples run on it."""
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / "runner.md").read_text(), re.S)
    build, engine, llm = blocks[0], blocks[1], next(b for b in blocks if 'LLM("./tiny-llama"' in b)
    assert "save_pretrained(\"./tiny-llama\")" in build and 'Engine.from_pretrained("./tiny-llama"' in engine
    for code in (build, engine, llm):
        scope: dict = {}
        exec(compile(code, "docs/runner.md", "exec"), scope)
    assert len(scope["outs"]) == 2
