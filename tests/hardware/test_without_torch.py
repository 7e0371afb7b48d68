"""Without torch: importing a runtime module gives AK212 with the install line (never a raw
ModuleNotFoundError), and planning for this machine says what is true (install torch, or plan
for a preset that assumes it). Each case runs in a fresh interpreter where torch cannot be
imported or found (a sys.meta_path finder refuses it; its distribution metadata is hidden)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
BLOCK = """
import importlib.abc, importlib.metadata, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "triton"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoTorch())
_version = importlib.metadata.version
def version(dist):
    if dist.split("-")[0] in ("torch", "triton", "pytorch"):
        raise importlib.metadata.PackageNotFoundError(dist)
    return _version(dist)
importlib.metadata.version = version
"""


def run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.parametrize("statement", [
    "from attnkit.runner import LLM",
    "from attnkit.runner import Engine",
    "from attnkit.integrations.transformers import register",
    "from attnkit.runtime import PagedKVCache",
])
def test_importing_a_runtime_module_is_ak212_with_the_install_line(statement):
    out = run(f"""
from attnkit.errors import AttnkitError
try:
    {statement}
except AttnkitError as err:
    print(err.code, err.solutions[0])
""")
    assert out.returncode == 0, out.stderr
    code, fix = out.stdout.split(" ", 1)
    assert code == "AK212" and fix.startswith("pip install 'attnkit[torch]'"), out.stdout


def test_the_block_really_hides_torch():
    out = run("import attnkit.hardware as h; print(sorted(h.installed_packages()))\nimport torch")
    assert "'torch'" not in out.stdout and "ModuleNotFoundError" in out.stderr


def test_planning_for_this_machine_says_install_torch_first():
    out = run("from attnkit.cli.main import main; raise SystemExit(main(['plan', 'llama-3.1-8b', '--json']))")
    plan = json.loads(out.stdout)
    assert out.returncode == 3 and plan["error"]["code"] == "AK120"
    assert {r["code"] for r in plan["shared_reasons"]} == {"AK212"}
    first, *rest = plan["error"]["solutions"]
    assert first.startswith("pip install 'attnkit[torch]'")
    assert any("--device cpu" in s and "assumes" in s for s in rest), rest
    assert plan["platform"]["preset"] is None and "torch" not in plan["platform"]["packages"]


def test_planning_a_preset_needs_no_torch():
    out = run("from attnkit.cli.main import main; raise SystemExit(main(['plan', 'deepseek-v3', '--device', 'h100']))")
    assert out.returncode == 0 and "planned" in out.stdout.splitlines()[0]


def test_generate_is_ak212():
    out = run("from attnkit.cli.main import main; raise SystemExit(main(['generate', '.', '--prompt-ids', '1']))")
    assert out.returncode == 2 and "error AK212" in out.stderr and "pip install 'attnkit[torch]'" in out.stderr
