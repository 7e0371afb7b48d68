"""What the ``attnkit`` subcommands share: exit codes, the planning flags, printing an error.

Torch-free; ``main`` (the parser and ``plan``/``backends``/...) and ``generate`` both import it.
"""
from __future__ import annotations

import argparse
import sys

from attnkit.errors import AttnkitError

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_NO_PLAN = 0, 1, 2, 3
EXIT_INTERRUPTED = 130                         # the shell's 128 + SIGINT
# Plan errors that mean the command itself is wrong (a name attnkit lacks, an invalid value), not
# that no backend fits: unknown backend name, another engine's backend name, invalid setting value.
USAGE_CODES = ("AK300", "AK301", "AK306")


def add_plan_flags(p: argparse.ArgumentParser, *, runner: bool = False) -> None:
    """The planning settings, shared by ``plan`` and ``generate`` (see request_from_args).
    ``runner``: only those the runner runs (``generate`` has no --speculative-tokens or --deny:
    the runner serves neither, AK487)."""
    p.add_argument("--attention-backend", metavar="B")
    p.add_argument("--prefill-attention-backend", metavar="B")
    p.add_argument("--decode-attention-backend", metavar="B")
    # integers are checked by parse_request (AK306 names the flag), not by argparse
    p.add_argument("--page-size", metavar="N")
    p.add_argument("--kv-cache-dtype", metavar="T")
    p.add_argument("--dtype", metavar="T")
    p.add_argument("--tp-size", metavar="N")
    if not runner:
        p.add_argument("--speculative-tokens", metavar="N")
    p.add_argument("--dual-chunk", choices=("auto", "on", "off"))
    if not runner:
        p.add_argument("--deny", action="append", metavar="B", help="never choose B (repeatable, or comma list)")
    p.add_argument("--require", action="append", metavar="P",
                   help="choose only backends proven bitwise for P: batch-invariant (a request's output "
                        "does not depend on its batch), deterministic (same bits run after run); "
                        "repeatable, or a comma list")
    p.add_argument("--cuda-graph", nargs="?", const="on", choices=("auto", "on", "off"),
                   help="capture decode steps as CUDA graphs: on (a bare --cuda-graph), off, or "
                        "auto (default: on where the device is CUDA and the decode backend declares it; prefill runs eagerly)")


def request_from_args(args: argparse.Namespace):
    """The ``PlanRequest`` that ``attnkit plan``'s flags describe (AK306 on junk values)."""
    from attnkit.planning.request import parse_request

    return parse_request({
        "attention_backend": args.attention_backend, "prefill_attention_backend": args.prefill_attention_backend,
        "decode_attention_backend": args.decode_attention_backend, "page_size": args.page_size,
        "kv_cache_dtype": args.kv_cache_dtype, "dtype": args.dtype, "tp_size": args.tp_size,
        "speculative_tokens": getattr(args, "speculative_tokens", None), "dual_chunk": args.dual_chunk,
        "cuda_graph": args.cuda_graph,
        "deny": [n for d in (getattr(args, "deny", None) or []) for n in d.split(",")],
        "require": [n for r in (args.require or []) for n in r.split(",")] or None})


def failure_dict(command: str | None, err: AttnkitError) -> dict:
    """What ``attnkit COMMAND --json`` prints when it fails (``plan`` prints a failed plan instead)."""
    error = err.to_dict()
    error["example_fix"] = error["details"].pop("example_fix", None)
    error["details"].pop("plan", None)
    return {"ok": False, "command": command, "error": error}


def print_error(err: AttnkitError) -> None:
    """The error as ``attnkit`` prints it on stderr: code, title, message, fixes, where to read more."""
    lines = [f"error {err.code}: {err.title}", f"  {err.message}"]
    lines += [f"  fix: {s}" for s in err.solutions]
    lines.append(f"  more: attnkit explain {err.code}")
    sys.stderr.write("\n".join(lines) + "\n")


def require_torch(command: str) -> None:
    """AK212 unless torch is importable (hardware.require_package): a bare ``pip install attnkit``
    plans; ``pip install 'attnkit[torch]'`` brings the runtime."""
    from attnkit.hardware import require_package

    require_package("torch", command)
