"""Two attnkit trees in one process: the previous default's (``git archive fb7aab7``) copied as a
package ``attnkit_prev`` with its own imports renamed, beside the installed one; and a tree's
bench script bound to its package (probe_mla_forward.py's sides)."""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import sys


def load_prev(src: str, into: str) -> str:
    """Copy the tree ``src``/attnkit to ``into``/attnkit_prev with its imports renamed; the
    package name to import."""
    dst = os.path.join(into, "attnkit_prev")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(os.path.join(src, "attnkit"), dst,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for root, _, files in os.walk(dst):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(root, f)
                with open(p) as fh:
                    text = fh.read()
                text = re.sub(r"(from|import)\s+attnkit\b", r"\1 attnkit_prev", text)
                text = re.sub(r"([\"'])attnkit\.", r"\1attnkit_prev.", text)
                with open(p, "w") as fh:
                    fh.write(text)
    sys.path.insert(0, into)
    return "attnkit_prev"


class Tree:
    """The modules one tree's backend needs, by package name."""

    def __init__(self, pkg: str):
        m = lambda name: importlib.import_module(f"{pkg}.{name}")  # noqa: E731
        self.pkg = pkg
        self.base, self.batch = m("backends.base"), m("backends.batch")
        self.paged, self.spec = m("kvcache.paged"), m("model.spec")
        self.mla = m("backends.triton_mla.backend")


def load_bench(tree: Tree, bench_dir: str, into: str, *, script: str = "bench_mla.py"):
    """That tree's bench ``script`` as a module bound to its package (imports renamed for prev)."""
    with open(os.path.join(bench_dir, script)) as f:
        text = f.read()
    if tree.pkg != "attnkit":
        text = re.sub(r"(from|import)\s+attnkit\b", rf"\1 {tree.pkg}", text)
    stem = script[:-3]
    path = os.path.join(into, f"{stem}_{tree.pkg}.py")
    os.makedirs(into, exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(f"{stem}_{tree.pkg}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
