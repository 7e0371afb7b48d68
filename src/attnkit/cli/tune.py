"""``attnkit tune``: measure every usable backend here and write a device profile.

The parser is torch-free; ``cmd_tune`` imports attnkit.tune (torch) when it runs.
"""
from __future__ import annotations

import argparse
import json
import sys

from attnkit.cli.common import add_plan_flags, request_from_args, require_torch
from attnkit.errors import fail


def model_names(given) -> list[str]:
    """--models' words, each split at commas (``a,b`` as --backends takes them) unless it is an
    existing path holding a comma."""
    import os

    return [n for word in given for n in ([word] if os.path.exists(word) else word.split(",")) if n.strip()]


def add_parser(sub, common) -> None:
    t = sub.add_parser("tune", parents=[common], help="time the backends on this device, write a profile",
                       description="Time every usable backend per phase over a grid of shapes (each result "
                                   "checked against the float64 reference first) and write a device profile "
                                   "that `attnkit plan` ranks backends by (docs/profile.md). Resumable: a "
                                   "re-run skips what the output file already holds.")
    t.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda (default), or cpu for a smoke run of tiny shapes (a CPU profile)")
    t.add_argument("--quick", action="store_true", help="the few shapes that decide each phase")
    t.add_argument("--models", nargs="+", metavar="MODEL",
                   help="tune only the shapes of these models (space- or comma-separated, as --backends)")
    t.add_argument("--backends", metavar="B,B", help="only these backends (comma list)")
    t.add_argument("--phase", action="append", choices=("decode", "prefill", "varlen"),
                   help="only this phase's buckets (repeatable; varlen: the varlen call at DiT shapes)")
    t.add_argument("--out", metavar="FILE", help="profile file (default: the per-user cache, "
                                                 "where attnkit plan finds it)")
    t.add_argument("--json", action="store_true", help="print {ok, path, profile, entries, counts}")
    # attnkit plan's settings: with --models, each model is tuned as plan() plans it for them
    add_plan_flags(t)


def cmd_tune(args: argparse.Namespace) -> int:
    from attnkit.model import load_model
    from attnkit.planning.request import PlanRequest
    from attnkit.registry import declarations, names

    require_torch("attnkit tune")
    from attnkit.tune.run import tune

    request = request_from_args(args)            # the one parse (AK306 names a junk flag)
    if not args.models and request != PlanRequest():
        fail("AK306", "attnkit tune's plan flags choose the shapes of --models; name the models",
             field="models", expected="--models MODEL ... with plan flags", actual=None)
    models = [load_model(m) for m in model_names(args.models or ())]
    backends = [names.resolve(n.strip(), declarations())[0] for n in (args.backends or "").split(",") if n.strip()]
    command = "attnkit tune " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["tune"] else "attnkit tune"
    path, prof = tune(device=args.device, quick=args.quick, models=models, out=args.out,
                      backends=backends or None, command=command.strip(), request=request,
                      phases=args.phase)
    counts: dict[str, int] = {}
    for e in prof.entries:
        counts[e.status] = counts.get(e.status, 0) + 1
    if args.json:
        sys.stdout.write(json.dumps({"ok": True, "path": str(path), "profile": prof.name,
                                     "entries": len(prof.entries), "counts": counts}, indent=2) + "\n")
        return 0
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    sys.stdout.write(f"wrote {path}: {prof.name}, {len(prof.entries)} entries ({summary})\n"
                     f"use it: attnkit plan MODEL --profile {path}"
                     + ("" if prof.smoke or args.out else "  (found automatically for this device)") + "\n")
    return 0
