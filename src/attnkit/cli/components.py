"""``attnkit plan`` for models of several components (a diffusers pipeline, a VLM). Torch-free.

The workload flags (--height, --width, --frames, --text-tokens) say what one call attends over;
each left out is the model's own default (docs/models.md).
"""
from __future__ import annotations

import argparse
import json
import sys

from attnkit.cli.common import EXIT_NO_PLAN, EXIT_OK


def add_workload_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pipelines and VLMs (what one call attends over; default: the model's own)")
    g.add_argument("--height", type=int, metavar="PX", help="image or video height in pixels")
    g.add_argument("--width", type=int, metavar="PX", help="image or video width in pixels")
    g.add_argument("--frames", type=int, metavar="N", help="video frames")
    g.add_argument("--text-tokens", type=int, metavar="N", help="prompt tokens")


def inputs_of(args: argparse.Namespace) -> dict:
    return {k: getattr(args, k) for k in ("height", "width", "frames", "text_tokens") if getattr(args, k) is not None}


def find_pipelines(args: argparse.Namespace) -> dict:
    """{model argument: Pipeline} for the arguments that name models of several components."""
    from attnkit.model.pipeline import load_components

    found = {}
    for name in args.models:
        pipe = load_components(name, inputs=inputs_of(args))
        if pipe is not None:
            found[name] = pipe
    return found


def plan_pipelines(args: argparse.Namespace, pipelines: dict, request) -> int:
    """Every device x pipeline: text blocks, or --json (one object, or a list for several)."""
    from attnkit.planning.components import plan_components
    from attnkit.planning.render_components import components_text

    results = [plan_components(pipe, device, request, label=name, profile=args.profile)
               for name, pipe in pipelines.items() for device in (args.device or ["auto"])]
    if args.json:
        data = [r.to_dict() for r in results]
        sys.stdout.write(json.dumps(data[0] if len(data) == 1 else data, indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(components_text(r.to_dict()) for r in results))
    return EXIT_OK if all(r.ok for r in results) else EXIT_NO_PLAN
