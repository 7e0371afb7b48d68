"""The import graph of src/attnkit follows the layers docs/architecture.md draws.

Read with ``ast`` (nothing is imported): every ``import`` / ``from ... import`` in every module,
at the top or inside a function, under ``TYPE_CHECKING`` or not. Each module belongs to one
layer (``LAYERS``); a layer may import only the layers ``ALLOWED`` lists. Those directions are
data, acyclic by construction (checked), so no cycle between layers can pass. Within a layer,
no two modules may import each other, at import time or through imports made inside a function.
"""
from __future__ import annotations

import ast
import fnmatch
import pathlib
from functools import lru_cache

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

# (layer, patterns on the dotted module name), first match wins. "declarations" are the
# torch-free halves of the backends: each backend package's __init__ and declaration.py, and
# the data they cite; the registry discovers them by walking attnkit.backends.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("api", ("attnkit",)),
    ("cli", ("attnkit.__main__", "attnkit.cli", "attnkit.cli.*")),
    ("errors", ("attnkit.errors", "attnkit.errors.*")),
    ("vocabulary", ("attnkit.registry.capabilities", "attnkit.registry.kernels")),
    ("registry", ("attnkit.registry", "attnkit.registry.*")),
    ("declarations", ("attnkit.backends", "attnkit.backends.*.declaration", "attnkit.backends.*.configs",
                      "attnkit.backends.gpu_runs",
                      "attnkit.backends.dual_chunk.config", "<backend package>")),
    ("backends", ("attnkit.backends.*",)),
    ("model", ("attnkit.model", "attnkit.model.*")),
    ("hardware", ("attnkit.hardware", "attnkit.hardware.*")),
    ("planning", ("attnkit.planning", "attnkit.planning.*")),
    ("kvcache", ("attnkit.kvcache", "attnkit.kvcache.*")),
    ("reference", ("attnkit.reference", "attnkit.reference_dca", "attnkit.reference_dsa")),
    ("runtime", ("attnkit.runtime",)),
    ("runner", ("attnkit.runner", "attnkit.runner.*")),
    ("tune", ("attnkit.tune", "attnkit.tune.*")),
    ("integrations", ("attnkit.integrations", "attnkit.integrations.*")),
)

# layer -> the layers it may import (DESIGN.md: dependencies point downward).
ALLOWED: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    "errors": (),
    "vocabulary": (),
    "model": ("vocabulary", "errors"),
    "hardware": ("errors",),
    "declarations": ("vocabulary", "model", "errors"),
    "registry": ("vocabulary", "declarations", "errors"),
    "planning": ("registry", "vocabulary", "model", "hardware", "errors"),
    "kvcache": ("vocabulary", "model", "errors"),
    "backends": ("declarations", "registry", "vocabulary", "kvcache", "model", "errors"),
    "reference": ("backends", "declarations", "kvcache", "model", "errors"),
    "runtime": ("registry", "backends", "declarations", "kvcache", "reference", "model", "hardware", "errors"),
    "runner": ("backends", "declarations", "registry", "vocabulary", "planning", "kvcache", "model", "hardware",
               "errors"),
    "tune": ("api", "backends", "declarations", "registry", "vocabulary", "planning", "reference", "kvcache", "model",
             "hardware", "errors"),
    "integrations": ("runner", "planning", "backends", "declarations", "registry", "vocabulary", "kvcache", "model",
                     "hardware", "errors"),
    "api": ("planning", "errors"),
    "cli": ("api", "runner", "tune", "planning", "registry", "model", "hardware", "errors"),
}.items()}

# Layers that `import attnkit` and `attnkit plan` load: never torch, triton or transformers.
TORCH_FREE = ("api", "errors", "vocabulary", "registry", "declarations", "model", "hardware", "planning")
HEAVY = ("torch", "triton", "transformers")
# ... except where asking torch is the point, inside a function:
TORCH_PROBES = {"attnkit.hardware.detect": "--device auto asks torch (when installed) which GPU this is"}


@lru_cache(maxsize=1)
def modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in (SRC / "attnkit").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def layer_of(module: str) -> str:
    path = modules()[module]
    for layer, patterns in LAYERS:
        for pattern in patterns:
            if pattern == "<backend package>":
                if path.name == "__init__.py" and module.rpartition(".")[0] == "attnkit.backends":
                    return layer
            elif fnmatch.fnmatchcase(module, pattern):
                return layer
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def _guarded(tree: ast.AST) -> set[int]:
    """Line numbers of the imports under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines |= {n.lineno for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


@lru_cache(maxsize=1)
def imports() -> dict[str, list[tuple[str, str, bool]]]:
    """module -> [(imported module or package, top name, at import time)]."""
    mods = modules()
    out: dict[str, list[tuple[str, str, bool]]] = {}
    for module, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        guarded = _guarded(tree)
        eager = {id(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                    base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            at_import = id(node) in eager and node.lineno not in guarded
            for name in names:
                found.append((name, name.split(".")[0], at_import))
        out[module] = found
    return out


def _resolve(name: str) -> str | None:
    """The module of ours that ``name`` loads (a package for a name inside it)."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def test_every_module_is_in_a_layer_and_every_layer_has_directions():
    layers = {layer_of(m) for m in modules()}
    assert layers <= set(ALLOWED) and set(ALLOWED) == {name for name, _ in LAYERS}
    assert all(deps <= set(ALLOWED) for deps in ALLOWED.values())


def test_allowed_directions_have_no_cycle():
    seen: dict[str, int] = {}          # 1 = on the path, 2 = done

    def visit(layer: str, path: tuple[str, ...]) -> None:
        assert seen.get(layer) != 1, f"ALLOWED has a cycle: {' -> '.join(path + (layer,))}"
        if seen.get(layer) == 2:
            return
        seen[layer] = 1
        for dep in sorted(ALLOWED[layer]):
            visit(dep, path + (layer,))
        seen[layer] = 2

    for layer in ALLOWED:
        visit(layer, ())


def test_every_import_goes_in_an_allowed_direction():
    bad = []
    for module, found in imports().items():
        src = layer_of(module)
        for name, top, _ in found:
            target = _resolve(name) if top == "attnkit" else None
            if target is None:
                continue
            dst = layer_of(target)
            if dst != src and dst not in ALLOWED[src]:
                bad.append(f"{module} ({src}) imports {target} ({dst})")
    assert not bad, "imports against the layers of docs/architecture.md:\n" + "\n".join(bad)


def test_torch_free_layers_never_import_torch():
    bad = [f"{m} imports {name}" for m, found in imports().items() if layer_of(m) in TORCH_FREE
           for name, top, at_import in found if top in HEAVY and (at_import or m not in TORCH_PROBES)]
    assert not bad, "\n".join(bad)


def _cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def _module_edges(*, import_time_only: bool) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, found in imports().items():
        for name, top, at_import in found:
            target = _resolve(name) if top == "attnkit" else None
            if target and target != module and (at_import or not import_time_only):
                edges.setdefault(module, set()).add(target)
    return edges


def test_no_import_time_cycle_between_modules():
    assert not _cycles(_module_edges(import_time_only=True))


def test_no_cycle_through_lazy_imports_either():
    """Imports made inside a function count too: no module cycle at all, and no whitelist."""
    assert not [sorted(c) for c in _cycles(_module_edges(import_time_only=False))]


def test_the_checks_see_real_edges():
    """The oracle can fail: a planning module importing a backend's implementation, and a
    registry module importing planning, are both against the directions."""
    assert "backends" not in ALLOWED["planning"] and "planning" not in ALLOWED["registry"]
    edges = _module_edges(import_time_only=False)
    assert "attnkit.registry.capabilities" in edges["attnkit.backends.triton.declaration"]
    assert "attnkit.planning.solver" in edges["attnkit"]                 # a lazy import is seen


def _lazy_homes(module: str) -> dict[str, str]:
    """The ``_HOMES`` table (name -> module) of a package that loads its names on first use."""
    tree = ast.parse(modules()[module].read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_HOMES")
    return ast.literal_eval(node.value)


def test_the_runtime_entry_point_names_only_what_it_may_import():
    homes = _lazy_homes("attnkit.runtime")
    targets = {home or f"attnkit.{name}" for name, home in homes.items()}
    assert targets <= set(modules())
    assert {layer_of(t) for t in targets} <= ALLOWED["runtime"]
