"""The README's console examples are what the CLI prints today."""
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
EXAMPLES = re.findall(r"```console\n\$ (attnkit [^\n]*)\n(.*?)```", README.read_text(), re.S)


def test_readme_has_console_examples():
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("command,shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_readme_example_matches_the_cli(command, shown):
    args = shlex.split(command)[1:]
    run = subprocess.run([sys.executable, "-m", "attnkit", *args], capture_output=True, text=True)
    assert run.stdout.rstrip("\n") == shown.rstrip("\n")
