"""Planning never imports torch, triton or transformers (STYLE 8): proven in a fresh interpreter."""
import json
import os
import subprocess
import sys

HEAVY = ("torch", "triton", "transformers")
SCRIPT = """
import sys, io, json, contextlib
import attnkit, attnkit.planning.solver
from attnkit.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(["plan", "deepseek-v3", "llama-3.1-8b", "--device", "h100", "--device", "cpu", "--json"])
    main(["backends", "--device", "h100", "--json"])
    main(["explain", "AK121"])
print(json.dumps({"rc": rc, "heavy": sorted(m for m in sys.modules if m.split(".")[0] in %r)}))
""" % (HEAVY,)


def test_plan_and_cli_do_not_import_torch():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNKIT_")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"rc": 0, "heavy": []}
