"""``attnkit generate MODEL_DIR``: run prompts through the runner and print what it made.

    attnkit generate ./tiny-llama --prompt-ids "1,5,9" --max-new-tokens 16
    attnkit generate ./llama --prompt "The capital of France is" --temperature 0.7 --seed 0

Prints the plan the engine runs (``attnkit plan``'s renderer, short form), each prompt's new
tokens (and text, with a tokenizer), and prefill / decode throughput; a progress bar goes to
stderr. ``--tp-size N`` runs N tensor-parallel ranks (this process starts them; under
torchrun every rank runs the command and rank 0 prints). ``--json`` prints {"plan",
"outputs", "stats"}. Planning flags are ``attnkit plan``'s. Text prompts use the
checkpoint's tokenizer (``tokenizers`` or ``transformers``, imported only then). Exit codes as ``attnkit plan``: 2 usage errors, 3 no valid plan.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, NamedTuple

from attnkit.cli.common import (EXIT_NO_PLAN, EXIT_OK, USAGE_CODES, add_plan_flags, failure_dict,
                                print_error, request_from_args, require_torch)
from attnkit.errors import AttnkitError, fail

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class Tokenizer(NamedTuple):
    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    g = sub.add_parser("generate", parents=[common],
                       help="generate tokens for prompts with the runner (continuous batching)")
    g.add_argument("model", metavar="MODEL_DIR", help="local model directory (config.json + safetensors)")
    prompts = g.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", action="append", metavar="TEXT",
                         help="a text prompt (repeatable; needs the checkpoint's tokenizer)")
    prompts.add_argument("--prompt-ids", action="append", type=_token_ids, metavar="IDS",
                         help='token ids of one prompt, "1,2,3" (repeatable)')
    g.add_argument("--max-new-tokens", type=int, default=32, metavar="N")
    g.add_argument("--temperature", type=float, default=0.0, help="0 (default) is greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0, help="0 (default): no top-k")
    g.add_argument("--seed", type=int, help="prompt i samples with seed + i")
    g.add_argument("--ignore-eos", action="store_true", help="always run to --max-new-tokens")
    g.add_argument("--device", default="auto", metavar="D",
                   help="cpu, cuda, cuda:N or auto: a device of this machine (plan presets such as h100 are "
                        "for attnkit plan)")
    g.add_argument("--max-tokens", type=int, default=4096, metavar="N", help="KV-cache room (tokens)")
    g.add_argument("--max-batched-tokens", type=int, default=8192, metavar="N",
                   help="tokens per step; longer prompts are prefilled in chunks")
    add_plan_flags(g, runner=True)
    g.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    g.add_argument("--json", action="store_true", help="print plan, outputs and stats as JSON")


def cmd_generate(args: argparse.Namespace) -> int:
    from attnkit.planning.render import plan_text

    request = request_from_args(args)           # AK306 on junk values, before any loading
    _check_device(args.device)
    require_torch("attnkit generate")
    if not (Path(args.model) / "config.json").is_file():
        from attnkit.runner.models.weights import read_checkpoint

        read_checkpoint(args.model)             # AK481 says what is missing, before AK484
    tokenizer, why = load_tokenizer(Path(args.model))
    if args.prompt and tokenizer is None:
        fail("AK484", f"--prompt needs the checkpoint's tokenizer: {why}; pass --prompt-ids instead",
             field="prompt", expected="tokenizers or transformers, and tokenizer files", actual=why)
    prompts = [tokenizer.encode(t) for t in args.prompt] if args.prompt else args.prompt_ids
    from attnkit.runner.engine.llm import LLM

    try:                                        # the request goes to the planner as parsed
        llm = LLM(args.model, request=request, device=args.device, max_tokens=args.max_tokens,
                  max_num_batched_tokens=args.max_batched_tokens, progress=not args.no_progress)
    except AttnkitError as err:
        if "plan" in err.details and err.code not in USAGE_CODES:
            if args.json:                           # one JSON object, with the plan that failed
                sys.stdout.write(json.dumps({**failure_dict("generate", err), "plan": err.details["plan"]},
                                            indent=2) + "\n")
            print_error(err)                        # the planner found no backend: as `attnkit plan`
            return EXIT_NO_PLAN
        raise
    if not args.json and llm.rank == 0:
        sys.stdout.write(plan_text(llm.plan, short=True) + "\n")
        sys.stdout.flush()
    outputs = llm.generate(prompts, max_new_tokens=args.max_new_tokens,
                           temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                           seed=args.seed, ignore_eos=args.ignore_eos, progress=not args.no_progress)
    if llm.rank:                                # launched by torchrun: rank 0 prints
        return EXIT_OK
    texts = [tokenizer.decode(o.token_ids) if tokenizer else None for o in outputs]
    if args.json:
        data = {"plan": llm.plan.to_dict(),
                "outputs": [{**o.to_dict(), "text": t} for o, t in zip(outputs, texts)],
                "stats": llm.last_stats.to_dict()}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return EXIT_OK
    for i, (o, text) in enumerate(zip(outputs, texts)):
        sys.stdout.write(f"[{i}] {len(o.prompt_token_ids)} prompt tokens -> {len(o.token_ids)} new "
                         f"({o.finish_reason})\n    ids: {' '.join(map(str, o.token_ids))}\n")
        if text is not None:
            sys.stdout.write(f"    text: {text!r}\n")
    sys.stdout.write(f"\n{llm.last_stats.summary()}\n")
    return EXIT_OK


def _check_device(device: str) -> None:
    """AK483 for a device preset of ``attnkit plan`` (h100, mi300x ...): generate runs here."""
    from attnkit.hardware import preset_names

    name = device.strip().lower()
    if name in preset_names() and name not in ("cpu", "mps"):
        fail("AK483", f"--device {device} is a device preset of `attnkit plan` (planning for a machine you are "
                      "not on); `attnkit generate` runs on this machine: --device cpu, cuda, cuda:N or auto",
             field="device", expected=["auto", "cpu", "cuda", "cuda:N"], actual=device,
             solutions=["attnkit generate MODEL_DIR --device cuda (or auto) on a CUDA machine",
                        f"attnkit plan MODEL_DIR --device {device} to see what would run there"])


def load_tokenizer(model_dir: Path) -> tuple[Tokenizer | None, str]:
    """The checkpoint's tokenizer: tokenizer.json through ``tokenizers`` if installed, else
    ``transformers.AutoTokenizer`` (local files only). (None, why) when neither works."""
    files = [f for f in TOKENIZER_FILES if (model_dir / f).is_file()]
    if not files:
        return None, f"{str(model_dir)!r} holds none of {', '.join(TOKENIZER_FILES)}"
    if "tokenizer.json" in files:
        try:
            from tokenizers import Tokenizer as Fast
        except ImportError:
            pass
        else:
            try:
                tok = Fast.from_file(str(model_dir / "tokenizer.json"))
            except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception
                return None, f"tokenizer.json could not be read ({exc})"
            return Tokenizer(lambda text: tok.encode(text).ids,
                             lambda ids: tok.decode(ids, skip_special_tokens=True)), ""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None, "neither the tokenizers nor the transformers package is installed"
    try:
        tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure of an optional loader means "none"
        return None, f"transformers could not load the tokenizer ({str(exc).splitlines()[0]})"
    return Tokenizer(lambda text: list(tok.encode(text)),
                     lambda ids: tok.decode(ids, skip_special_tokens=True)), ""


def _token_ids(text: str) -> list[int]:
    """'1,2,3' or '1 2 3' -> [1, 2, 3] (argparse turns the error into exit 2)."""
    parts = text.replace(",", " ").split()
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):   # not '²' or '٣'
        raise argparse.ArgumentTypeError(f"expected token ids like \"1,2,3\", got {text!r}")
    return [int(p) for p in parts]
