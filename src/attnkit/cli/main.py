"""The ``attnkit`` command: plan, backends, explain, models, devices, generate, tune. Torch-free
(``generate`` and ``tune`` import torch when they run, not when the parser is built).

Exit codes: 0 planned (or listed), 1 internal error (AK900), 2 usage error (bad flag (AK310),
unknown model/device/code or backend name (AK300/AK301), invalid value (AK306)), 3 no valid plan,
130 interrupted (Ctrl-C). Every subcommand takes ``--json`` and then prints exactly one JSON
object for every outcome, failures included: ``attnkit plan --json`` a plan object (or a list;
a model, device or flag that cannot be read gives the failed-plan shape with ``error``,
docs/plan-json.md), the others ``{"ok": false, "command", "error": {"code", ...}}`` on failure.
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any, Sequence

from attnkit.cli import lists
from attnkit.cli.common import (EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_NO_PLAN, EXIT_OK, EXIT_USAGE,
                                USAGE_CODES, add_plan_flags, failure_dict, print_error, request_from_args)
from attnkit.errors import CATALOG, AttnkitError



class UsageError(Exception):
    """argparse's complaint, raised instead of printed so ``plan --json`` can answer in JSON."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser, self.message = parser, message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):   # argparse's hook: print usage and exit 2, unless --json (main)
        raise UsageError(self, message)


def build_parser() -> argparse.ArgumentParser:
    from attnkit import __version__

    parser = _Parser(prog="attnkit", description="Plan, explain and run attention backends.")
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    # --debug is accepted after the subcommand too; SUPPRESS keeps it from resetting the top-level value
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", parents=[common], help="choose prefill/decode backends for a model on a device",
                       epilog="Model presets: attnkit models. Device presets: attnkit devices. What a failure "
                              "means: attnkit explain CODE.")
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="a model preset (attnkit models), a config.json or a model directory")
    p.add_argument("--device", action="append", metavar="D",
                   help="a device preset (attnkit devices) or 'auto', this machine (the default; repeatable)")
    add_plan_flags(p)
    p.add_argument("--json", action="store_true", help="print Plan.to_dict() (a list for several)")
    p.add_argument("--profile", metavar="FILE", help="device profile to rank backends by (attnkit tune)")
    p.add_argument("--strict", action="store_true",
                   help="refuse (AK314) a plan where a flag you set moves a role to a backend the device "
                        "profile measures 1.5x or more slower (without --strict: a warning)")
    from attnkit.cli.components import add_workload_flags
    add_workload_flags(p)

    b = sub.add_parser("backends", parents=[common], help="list backends: installed, usable here, why not")
    b.add_argument("--device", default="auto", metavar="D",
                   help="auto (default): this machine and its installed packages; a preset (attnkit devices): "
                        "that device with the packages the preset assumes")
    b.add_argument("--json", action="store_true")

    from attnkit.cli.generate import add_parser as add_generate   # torch-free; needs cli.common
    add_generate(sub, common)
    from attnkit.cli.tune import add_parser as add_tune
    add_tune(sub, common)

    e = sub.add_parser("explain", parents=[common], help="print an error code's catalog entry")
    e.add_argument("code")
    e.add_argument("--json", action="store_true", help="the entry as JSON")
    m = sub.add_parser("models", parents=[common], help="list model presets")
    m.add_argument("--json", action="store_true", help="each preset's architecture, kind and layers")
    d = sub.add_parser("devices", parents=[common], help="list device presets")
    d.add_argument("--json", action="store_true", help="each preset's platform and assumed packages")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    as_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
    except UsageError as err:
        name = f"attnkit {command}" if command in COMMANDS else "attnkit"
        usage = AttnkitError("AK310", f"{name}: {err.message}", field="argv", actual=argv[:20],
                             solutions=[f"run {name} --help for the flags"])
        if as_json:
            _print_failed(command, usage)
        err.parser.print_usage(sys.stderr)     # then exit 2, as argparse itself does
        err.parser.exit(EXIT_USAGE, f"{err.parser.prog}: error AK310: {err.message}\n")
    try:
        return COMMANDS[args.command](args)
    except AttnkitError as err:
        if as_json:
            _print_failed(args.command, err)
        print_error(err)
        return EXIT_USAGE
    except KeyboardInterrupt:                  # Ctrl-C (a long `generate`): no traceback
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the CLI boundary: no raw traceback without --debug
        if args.debug:
            traceback.print_exc()
        if as_json:
            _print_failed(args.command, AttnkitError("AK900", f"{type(exc).__name__}: {exc}"[:500]))
        sys.stderr.write(f"error AK900: {CATALOG['AK900'].title}: {type(exc).__name__}: {exc}\n"
                         + ("" if args.debug else "  re-run with --debug for the traceback and report it\n"))
        return EXIT_INTERNAL


def _print_failed(command: str | None, err: AttnkitError) -> None:
    """The one JSON object a failed ``--json`` command prints: a failed plan for ``plan``."""
    if command == "plan":
        from attnkit.planning.plan import Plan

        data = Plan.failed(err).to_dict()
    else:
        data = failure_dict(command, err)
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def cmd_plan(args: argparse.Namespace) -> int:
    from attnkit.planning.render import matrix_text, plan_text
    from attnkit.hardware import resolve_platform
    from attnkit.model import load_model
    from attnkit.planning.solver import plan
    from attnkit.planning.speed_cost import refuse

    from attnkit.cli.components import find_pipelines, plan_pipelines

    request = request_from_args(args)
    pipelines = find_pipelines(args)     # pipelines and VLMs: one plan per component
    if pipelines:
        if len(pipelines) != len(args.models):
            raise AttnkitError("AK310", "attnkit plan: plan pipelines and VLMs apart from single models ("
                               f"{', '.join(n for n in args.models if n not in pipelines)} have one part)",
                               field="argv", actual=args.models)
        return plan_pipelines(args, pipelines, request)
    devices = args.device or ["auto"]
    # Resolve every name first: a typo is a usage error before any planning output. Under --json
    # each model x device pair whose model or device cannot be read is a failed-plan object.
    models, platforms, failed = _read_all(args.models, devices, load_model, resolve_platform)
    fleet = len(args.models) * len(devices) > 1
    if failed and not (args.json or fleet):
        raise next(iter(failed.values()))
    # a fleet prints every row, an entry that cannot be read or planned as its error cell
    pairs = [_pair(m, d, models, platforms, failed, request, plan, profile=args.profile,
                   catch=args.json or fleet) for m in args.models for d in devices]
    plans = [refuse(p) if args.strict else p for p, _ in pairs]
    single = len(plans) == 1
    if args.json:
        data: Any = plans[0].to_dict() if single else [p.to_dict() for p in plans]
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif single:
        sys.stdout.write(plan_text(plans[0]))
    else:
        sys.stdout.write(matrix_text(plans, list(args.models), devices))
    # an error the planner raised (an unreadable --profile ...) is a usage error, as without --json
    if failed or any(raised for _, raised in pairs) or any(p.error and p.error["code"] in USAGE_CODES
                                                          for p in plans):
        return EXIT_USAGE
    return EXIT_OK if all(p.ok for p in plans) else EXIT_NO_PLAN


def _read_all(names: list[str], devices: list[str], load_model, resolve_platform):
    models, platforms, failed = {}, {}, {}
    for source, read, out in ((names, load_model, models), (devices, resolve_platform, platforms)):
        for name in source:
            try:
                out[name] = read(name)
            except AttnkitError as err:
                failed[name if read is load_model else ("device", name)] = err
    return models, platforms, failed


def _pair(model: str, device: str, models, platforms, failed, request, plan, *, profile, catch):
    """(one model x device plan, whether it failed by an error rather than a plan); under
    --json (``catch``) an error the planner raises (e.g. an unreadable --profile file)
    becomes a failed-plan object too."""
    from attnkit.planning.plan import Plan

    err = failed.get(model) or failed.get(("device", device))
    if err is None:
        try:
            return plan(models[model], platforms[device], request, label=model, profile=profile), False
        except AttnkitError as exc:
            if not catch:
                raise
            err = exc
    platform = platforms[device].to_dict() if device in platforms else None
    return Plan.failed(err, model=model, platform=platform, request=request.to_dict()), True


def cmd_backends(args: argparse.Namespace) -> int:
    from attnkit.planning.render import backends_text
    from attnkit.hardware import resolve_platform
    from attnkit.planning.inventory import backends_report

    data = backends_report(resolve_platform(args.device))
    sys.stdout.write(json.dumps(data, indent=2) + "\n" if args.json else backends_text(data))
    return EXIT_OK


def cmd_generate(args: argparse.Namespace) -> int:
    from attnkit.cli.generate import cmd_generate as run

    return run(args)


def cmd_tune(args: argparse.Namespace) -> int:
    from attnkit.cli.tune import cmd_tune as run

    return run(args)


COMMANDS = {"plan": cmd_plan, "backends": cmd_backends, "explain": lists.cmd_explain,
            "models": lists.cmd_models, "devices": lists.cmd_devices, "generate": cmd_generate, "tune": cmd_tune}

if __name__ == "__main__":
    raise SystemExit(main())
