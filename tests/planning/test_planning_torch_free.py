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


BARE = """
import contextlib, importlib.util, io, json, sys
missing = [m for m in %r if importlib.util.find_spec(m) is not None]
from attnkit.cli.main import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    plan_rc = main(["plan", "deepseek-v3", "--device", "h100", "--json"])
    generate_rc = main(["generate", sys.argv[1], "--prompt-ids", "1,2"])
print(json.dumps({"found": missing, "plan_rc": plan_rc, "ok": json.loads(out.getvalue())["ok"],
                  "generate_rc": generate_rc, "generate_err": err.getvalue().splitlines()[:1]}))
""" % (HEAVY,)


def test_bare_install_plans_without_any_third_party_package(tmp_path):
    """What a bare ``pip install attnkit`` has: no site-packages at all (``python -S``), only
    attnkit's own source. It plans; running (``generate``) is AK212 naming torch, not a traceback."""
    import attnkit

    (tmp_path / "config.json").write_text("{}")
    src = os.path.dirname(os.path.dirname(attnkit.__file__))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNKIT_", "PYTHON"))}
    env["PYTHONPATH"] = src
    proc = subprocess.run([sys.executable, "-S", "-c", BARE, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"found": [], "plan_rc": 0, "ok": True, "generate_rc": 2,
                      "generate_err": ["error AK212: Required package not installed"]}
