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
