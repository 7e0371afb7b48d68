"""Decode GB/s against context, one panel per batch size, from a bench_triton.json.

    python3 benchmarks/plot_decode.py OUT/bench_triton.json [-o OUT/decode_gbs.png]

bench_triton.py calls it after writing its JSON, so the plot is always drawn from the JSON of
the run it shows (attnkit's row and each peer's, the run's measured copy ceiling dashed).
"""
from __future__ import annotations

import argparse
import json
import os

PEERS = (("attnkit", "C0"), ("sdpa_flash", "C1"), ("sdpa_cudnn", "C2"), ("flex", "C3"), ("gather_sdpa", "C4"))


def plot(json_path: str, png_path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(json_path) as f:
        data = json.load(f)
    rows, ceil = data["rows"], data["ceilings"]
    dec = [r for r in rows if r["kind"] == "decode" and r["head_dim"] == 128]
    batches = sorted({r["batch"] for r in dec})
    fig, axes = plt.subplots(1, len(batches), figsize=(4 * len(batches), 3.6), sharey=True, squeeze=False)
    for ax, b in zip(axes[0], batches):
        sub = sorted((r for r in dec if r["batch"] == b), key=lambda r: r["context"])
        for name, color in PEERS:
            pts = [(r["context"], r[name]) for r in sub if isinstance(r.get(name), float)]
            if pts:
                ax.plot(*zip(*pts), marker="o", color=color, label=name)
        ax.axhline(ceil["copy_gbs"], color="k", ls="--", label="copy ceiling")
        ax.set_xscale("log", base=2)
        ax.set_title(f"decode B={b}")
        ax.set_xlabel("context")
    axes[0][0].set_ylabel("GB/s of K/V read")
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_lines()}
    axes[0][-1].legend(handles.values(), handles.keys(), fontsize=7)
    fig.suptitle(data.get("environment", ""), fontsize=7)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json")
    ap.add_argument("-o", "--out", help="PNG path (default: decode_gbs.png next to the JSON)")
    args = ap.parse_args()
    plot(args.json, args.out or os.path.join(os.path.dirname(args.json) or ".", "decode_gbs.png"))


if __name__ == "__main__":
    main()
