"""DiT kernel sweep (issue 29): the varlen Gluon kernel's non-causal path under launch
configurations and code forms, next to cuDNN SDPA and flash SDPA in the same process.

    PYTHONPATH=src python3 benchmarks/sweep_dit.py [--set main|persistent|all] [--rows ...]
                                                   [--budget-s 170] [--out FILE.json]
    python3 benchmarks/sweep_dit.py --summary FILE.json ...      (a markdown table of runs)

Rows (B = 1, bf16, non-causal, d128; shapes from attnkit's pipeline presets, as bench_dit.py):
wan2.1-720p (75,600 tokens x 40 heads), flux.1-1024 (4,608 x 24), and, with fewer forms,
wan2.1-480p and hunyuanvideo-720p. Forms (``FORMS``: prefill_gluon_attention's arguments):

    block_major   the kernel the varlen call runs today: a program a (query block, head),
                  heads fastest (every head's K / V streamed at once: 40 x 38.7 MB at 720p)
    head_major    a head's blocks one after another: the programs running at once share one
                  head's K / V in L2
    tiles         (keys a tile, K slots, V slots) of the rings, head-major
    persistent    one program an SM walking the blocks (prefill_gluon_persistent.py): a block's
                  loads start under the previous block's epilogue; head- or block-major
    split         persistent with the split tail: the last, partial wave's items cut along the
                  keys over every program and merged (split_tail.py)

The ``persistent`` set runs alone (gpu_dit_sweep.sh gives it its own process and timeout): its
kernel is new, and a hang there must not cost the main set. Each output is checked against
flash SDPA's (relative Frobenius error, max |diff|; the output buffer is NaN before the call,
so a block the kernel skips shows) before it is timed; a form over 1e-2 is marked wrong and
never timed. Timing is bench_dit.timed_cell (attnkit's one method: CUDA-graph replays, the
eager call beside; the peers the same way). TFLOP/s count 4 * T^2 * H * D. The JSON is
rewritten after every cell.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(__file__))
from bench_dit import shape, timed_cell  # noqa: E402
from common import environment  # noqa: E402

from attnkit.backends._triton import LOG2E  # noqa: E402

BF16 = torch.bfloat16
# name -> prefill_gluon_attention options (programs "sms": the device's SM count)
FORMS = {
    "block_major": dict(tiles=(128, 4, 2)),
    "head_major": dict(tiles=(128, 4, 2), head_major=True),
    "head_major_128_3_3": dict(tiles=(128, 3, 3), head_major=True),
    "head_major_128_3_2": dict(tiles=(128, 3, 2), head_major=True),
    "head_major_128_2_2": dict(tiles=(128, 2, 2), head_major=True),
    "head_major_64_6_6": dict(tiles=(64, 6, 6), head_major=True),
    "persistent_head_major": dict(tiles=(128, 4, 2), head_major=True, programs="sms"),
    "persistent_block_major": dict(tiles=(128, 4, 2), programs="sms"),
    "persistent_head_major_128_3_3": dict(tiles=(128, 3, 3), head_major=True, programs="sms"),
    # after call 3 (FLUX: persistent heads-fastest 503, and (128, 2, 2) the best one-block tile)
    "persistent_block_major_128_2_2": dict(tiles=(128, 2, 2), programs="sms"),
    "persistent_block_major_128_3_2": dict(tiles=(128, 3, 2), programs="sms"),
    # session of 04:00 (FLUX by CUDA-graph replays): one-program-a-block heads fastest with the
    # smaller rings, and 64-key tiles in the persistent form (twice the tiles, half each)
    "block_major_128_2_2": dict(tiles=(128, 2, 2)),
    "block_major_128_3_2": dict(tiles=(128, 3, 2)),
    "persistent_block_major_64_6_6": dict(tiles=(64, 6, 6), programs="sms"),
    # the split tail (prefill_gluon_persistent.py, split_tail.py): the last partial wave's
    # items cut along the keys and dealt out to every program, the pieces merged after
    "persistent_split_block_major": dict(tiles=(128, 4, 2), programs="sms", split_tail=True),
    "persistent_split_block_major_128_2_2": dict(tiles=(128, 2, 2), programs="sms", split_tail=True),
    "persistent_split_block_major_128_3_2": dict(tiles=(128, 3, 2), programs="sms", split_tail=True),
    "persistent_split_head_major": dict(tiles=(128, 4, 2), head_major=True, programs="sms", split_tail=True),
}
MAIN = [f for f in FORMS if not f.startswith("persistent")]
PERSISTENT = [f for f in FORMS if f.startswith("persistent")]
# the target rows get every form; the reported rows the baseline and the likeliest winners
ROW_FORMS = {
    "wan2.1-720p": None, "flux.1-1024": None,
    "wan2.1-480p": ["block_major", "head_major", "persistent_head_major"],
    "hunyuanvideo-720p": ["block_major", "head_major", "persistent_head_major"],
}


def sdpa(kind, q, k, v):
    with sdpa_kernel(kind):
        return F.scaled_dot_product_attention(q, k, v)


class Row:
    """One row's tensors, its flash SDPA reference and its JSON cells."""

    def __init__(self, name: str):
        tokens, spec = shape(name)
        self.name, self.tokens, self.heads, self.dim = name, tokens, spec.num_heads, spec.head_dim
        self.flops = 4 * tokens * tokens * self.heads * self.dim
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.q, self.k, self.v = (torch.randn(tokens, n, self.dim, device="cuda", dtype=BF16, generator=gen)
                                  for n in (self.heads, spec.num_kv_heads, spec.num_kv_heads))
        self.bhsd = [t.transpose(0, 1).unsqueeze(0) for t in (self.q, self.k, self.v)]   # [1, H, T, D]
        self.scale = spec.softmax_scale
        self.ref = sdpa(SDPBackend.FLASH_ATTENTION, *self.bhsd)[0].transpose(0, 1).float()  # [T, H, D]
        self.cells = {"row": name, "tokens": tokens, "heads": self.heads, "head_dim": self.dim,
                      "flops": self.flops}

    def cell(self, key: str, fn, *, check=None, reps: int) -> None:
        """Check (``check()`` -> [T, H, D]) and time ``fn`` (bench_dit.timed_cell)."""
        self.cells[key] = timed_cell(fn, self.flops, check=check, ref=self.ref, reps=reps)

    def ratios(self) -> None:
        base = self.cells.get("sdpa_cudnn")
        if isinstance(base, dict):
            self.cells["vs_cudnn"] = {k: round(v["tflops"] / base["tflops"], 3) for k, v in self.cells.items()
                                      if isinstance(v, dict) and "tflops" in v}


def gluon_call(row: Row, options: dict):
    from attnkit.backends.triton.prefill_gluon import prefill_gluon_attention
    from attnkit.backends.triton.prefill_gluon_persistent import prefill_gluon_persistent_attention
    opts = dict(options)
    launch = prefill_gluon_attention
    if opts.get("programs") == "sms":
        opts["programs"] = torch.cuda.get_device_properties(0).multi_processor_count
        launch = prefill_gluon_persistent_attention
    out = torch.empty_like(row.q)

    def run():
        return launch(row.q, row.k, row.v, out, qk_scale=row.scale * LOG2E, v_scale=1.0, causal=False, **opts)

    def check():
        out.fill_(float("nan"))
        return run()
    return run, check


def summary(paths) -> str:
    """A short table of one or more sweep JSONs: per row and run, TFLOP/s and x cuDNN of that run."""
    lines = ["| row | run | cell | TFLOP/s | x cuDNN (same run) | eager TFLOP/s |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for path in paths:
        if not os.path.exists(path):
            lines.append(f"| - | {os.path.basename(path)} | missing | | |")
            continue
        with open(path) as f:
            data = json.load(f)
        for r in data["rows"]:
            for key, val in r.items():
                if isinstance(val, dict) and "tflops" in val:
                    eager = val.get("eager_tflops")
                    lines.append(f"| {r['row']} | {data['set']} | {key} | {val['tflops']:.0f} | "
                                 f"{r.get('vs_cudnn', {}).get(key, '')} | {'' if eager is None else f'{eager:.0f}'} |")
                elif isinstance(val, str) and key not in ("row",):
                    lines.append(f"| {r['row']} | {data['set']} | {key} | {val[:50]} | | |")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--summary"]:
        print(summary(sys.argv[2:]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("main", "persistent", "all"), default="main")
    ap.add_argument("--rows", default=",".join(ROW_FORMS))
    ap.add_argument("--forms", default=None, help="comma-separated FORMS to run (default: the set's)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=170.0, help="stop starting forms after this")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "sweep_dit.json"))
    args = ap.parse_args()
    chosen = {"main": MAIN, "persistent": PERSISTENT, "all": list(FORMS)}[args.set]
    if args.forms:
        chosen = [f.strip() for f in args.forms.split(",") if f.strip()]
        unknown = [f for f in chosen if f not in FORMS]
        if unknown:
            ap.error(f"unknown forms {unknown}; known: {', '.join(FORMS)}")
    results = {"environment": environment(), "command": " ".join(sys.argv), "set": args.set,
               "forms": {k: {**v, "tiles": list(v["tiles"])} for k, v in FORMS.items() if k in chosen},
               "rows": [], "skipped": []}
    start = time.perf_counter()

    def save():
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)

    for name in [r.strip() for r in args.rows.split(",") if r.strip()]:
        row = Row(name)
        results["rows"].append(row.cells)
        for key, kind in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            run = lambda kind=kind: sdpa(kind, *row.bhsd)  # noqa: E731
            row.cell(key, run, check=lambda run=run: run()[0].transpose(0, 1), reps=args.reps)
        forms = [f for f in chosen if ROW_FORMS.get(name) is None or f in ROW_FORMS[name]]
        for form in forms:
            if time.perf_counter() - start > args.budget_s:
                results["skipped"].append(f"{name} {form}: over the {args.budget_s:g} s budget")
                continue
            run, check = gluon_call(row, FORMS[form])
            row.cell(form, run, check=check, reps=args.reps)
            row.ratios()
            save()
            got, ratio = row.cells[form], row.cells.get("vs_cudnn", {}).get(form)
            print(f"{name} {form}: " + (f"{got['tflops']:.0f} TFLOP/s" + (f" ({ratio:.3f}x cuDNN)" if ratio else "")
                                        if isinstance(got, dict) else str(got)), flush=True)
        row.ratios()
        timed = {f: row.cells[f]["tflops"] for f in forms if isinstance(row.cells.get(f), dict)}
        if timed:
            best = max(timed, key=timed.get)
            row.cells["best"] = {"form": best, "tflops": timed[best],
                                 "vs_cudnn": row.cells.get("vs_cudnn", {}).get(best)}
        save()
        base = {k: row.cells[k] for k in ("sdpa_cudnn", "sdpa_flash")}
        print(f"{name}: {row.tokens} x {row.heads} x d{row.dim}: peers "
              + ", ".join(f"{k} {v['tflops']:.0f}" if isinstance(v, dict) else f"{k} {v}" for k, v in base.items())
              + (f"; best {row.cells['best']}" if "best" in row.cells else ""), flush=True)
        del row
        torch.cuda.empty_cache()
    results["seconds"] = round(time.perf_counter() - start, 1)
    save()
    print(f"wrote {args.out} ({results['seconds']} s)")


if __name__ == "__main__":
    main()
