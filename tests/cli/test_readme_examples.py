"""The README's console examples are what the CLI prints today.

After a change of the planner's output (e.g. a new shipped profile): ``PYTHONPATH=src python
tests/cli/test_readme_examples.py`` rewrites them (then read the diff)."""
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


def update_readme() -> int:
    """Rewrite every console example's output with what the CLI prints now; the number changed."""
    text, changed = README.read_text(), 0
    for command, shown in EXAMPLES:
        run = subprocess.run([sys.executable, "-m", "attnkit", *shlex.split(command)[1:]],
                             capture_output=True, text=True)
        if run.stdout.rstrip("\n") != shown.rstrip("\n"):
            text = text.replace(f"$ {command}\n{shown}```", f"$ {command}\n{run.stdout.rstrip()}\n```", 1)
            changed += 1
    README.write_text(text)
    return changed


if __name__ == "__main__":   # python tests/cli/test_readme_examples.py: refresh README.md's examples
    print(f"updated {update_readme()} example(s) in {README}")
