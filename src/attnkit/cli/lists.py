"""``attnkit explain``, ``attnkit models``, ``attnkit devices``: what attnkit knows, as text or
``--json`` (torch-free)."""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys

from attnkit.cli.common import EXIT_OK
from attnkit.errors import CATALOG, AttnkitError


def cmd_explain(args: argparse.Namespace) -> int:
    from attnkit.errors.docs import page

    code = args.code.strip().upper()
    code = code if code.startswith("AK") else f"AK{code}"
    if code not in CATALOG:
        close = _close_codes(code)
        raise AttnkitError("AK315", f"unknown error code {args.code!r}"
                           + (f"; did you mean {' or '.join(close)}?" if close else ""),
                           field="code", expected=list(CATALOG), actual=args.code,
                           solutions=[f"attnkit explain {close[0]}" if close else "attnkit explain AK101",
                                      "every code: docs/errors/README.md"],
                           details={"did_you_mean": close})
    if args.json:
        _print_json({"ok": True, **dataclasses.asdict(CATALOG[code])})
    else:
        sys.stdout.write(page(CATALOG[code]))
    return EXIT_OK


def _close_codes(code: str) -> list[str]:
    """Codes that start with what was typed (AK12 -> AK120, AK121, AK122), else near spellings."""
    prefixed = [c for c in CATALOG if c.startswith(code)]
    return prefixed[:6] if prefixed else difflib.get_close_matches(code, list(CATALOG), n=3, cutoff=0.5)


def cmd_models(args: argparse.Namespace) -> int:
    from attnkit.model import load_model, preset_names
    from attnkit.model.pipeline import pipeline_names

    if not args.json:
        sys.stdout.write("".join(f"{n}\n" for n in preset_names()))
        sys.stdout.write("".join(f"{n}  (pipeline: every component planned)\n" for n in pipeline_names()))
        return EXIT_OK
    rows = []
    for name in preset_names():
        m = load_model(name)
        rows.append({"name": name, "architecture": m.architecture, "kind": m.kind,
                     "attention_layers": len(m.layers), "phases": list(m.phases), "dtype": m.dtype})
    _print_json({"ok": True, "models": rows, "pipelines": pipeline_names()})
    return EXIT_OK


def cmd_devices(args: argparse.Namespace) -> int:
    from attnkit.hardware import get_preset, preset_names
    from attnkit.hardware.platform import arch_label

    presets = [get_preset(name) for name in preset_names()]
    if args.json:
        _print_json({"ok": True, "devices": [{**p.to_dict(), "packages_source": "preset"} for p in presets]})
        return EXIT_OK
    for p in presets:
        cc = arch_label(p.kind, p.capability, p.arch) or "-"
        sys.stdout.write(f"{p.preset:<9} {p.kind:<5} {cc:<6} {p.name}\n")
    sys.stdout.write("\nPlan for one: attnkit plan MODEL --device NAME. Each preset assumes a typical install "
                     "(its packages: attnkit devices --json); --device auto reads this machine.\n")
    return EXIT_OK


def _print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
