"""Benchmark the triton backend against torch SDPA (flash, cuDNN), FlexAttention and
gather-pages-then-SDPA, in one run on one GPU, next to the machine's measured ceilings.

    PYTHONPATH=src python3 benchmarks/bench_triton.py [--quick] [--sweep] [--out DIR]

Decode reports GB/s (bytes of K/V read), extend/prefill TFLOP/s (causal FLOPs counted once).
attnkit is timed as one CUDA-graph replay of ``backend.forward`` (K/V write + kernels), and
also eagerly; peers likewise where they capture. Every attnkit row is checked against the
gather-then-SDPA output before it is timed. Writes a markdown table and JSON to --out or $OUT,
and the decode plot decode_gbs.png drawn from that JSON (plot_decode.py).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

sys.path.insert(0, os.path.dirname(__file__))
from common import ceilings, environment, graphed, time_ms  # noqa: E402

from attnkit.backends.base import RuntimeLayer  # noqa: E402
from attnkit.backends.batch import Request, build_batch  # noqa: E402
from attnkit.backends.triton.backend import TritonBackend  # noqa: E402
from attnkit.backends.triton.decode import DECODE_VARIANTS  # noqa: E402
from attnkit.planning.profile import Shape  # noqa: E402
from common import planned_options  # noqa: E402
from attnkit.kvcache.paged import PagedKVCache  # noqa: E402
from attnkit.model.spec import LayerAttention  # noqa: E402

BF16 = torch.bfloat16
START = time.time()
FLEX_BUDGET_S = 170     # FlexAttention compiles per shape; skip it once the run is this old


class Setup:
    """One paged step: cache (random pages, shuffled block tables), metadata, q/k/v."""

    def __init__(self, batch, prefix, new, *, heads=32, kv_heads=8, dim=128, page=16):
        self.spec = LayerAttention(layer_id=0, num_heads=heads, num_kv_heads=kv_heads, head_dim=dim)
        self.layer = RuntimeLayer(spec=self.spec)
        per = -(-(prefix + new) // page)
        self.cache = PagedKVCache([self.spec], num_pages=batch * per, page_size=page, dtype=BF16,
                                  device="cuda")
        self.cache.k[0].normal_()
        self.cache.v[0].normal_()
        perm = torch.randperm(batch * per).view(batch, per)
        self.meta = build_batch([Request(prefix, new, row) for row in perm.tolist()],
                                page_size=page, device="cuda")
        t = batch * new
        self.q = torch.randn(t, heads, dim, device="cuda", dtype=BF16)
        self.k = torch.randn(t, kv_heads, dim, device="cuda", dtype=BF16)
        self.v = torch.randn(t, kv_heads, dim, device="cuda", dtype=BF16)
        self.batch, self.prefix, self.new, self.page = batch, prefix, new, page
        self.table = perm.to(device="cuda", dtype=torch.int64)

    def gather(self):
        """[B, H_kv, L, D] contiguous K and V of every request (after this step's write)."""
        n = self.prefix + self.new
        pos = torch.arange(n, device="cuda")
        slots = self.table[:, pos // self.page] * self.page + pos % self.page       # [B, L]
        flat_k = self.cache.k[0].view(-1, *self.cache.k[0].shape[2:])
        flat_v = self.cache.v[0].view(-1, *self.cache.v[0].shape[2:])
        return flat_k[slots].transpose(1, 2), flat_v[slots].transpose(1, 2)

    def q_bhsd(self):
        return self.q.view(self.batch, self.new, *self.q.shape[1:]).transpose(1, 2)


def timed(fn, *, graph=True):
    run, note = graphed(fn) if graph else (fn, "eager")
    return time_ms(run, warmup=3, reps=20, cold_l2=True), note


def rel_err(a, b):
    a, b = a.float().reshape(-1), b.float().reshape(-1)
    return ((a - b).norm() / b.norm()).item()


def sdpa_peer(kernel, q, k, v, mask, causal, *, expand=False):
    """SDPA on [B, H, L, D] tensors; GQA through enable_gqa, or (expand) repeated K/V."""
    if expand:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)

    def call():
        with sdpa_kernel([kernel]) if kernel is not None else _null():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                  enable_gqa=not expand)
    return call


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_FLEX = {}


def flex_peer(q, k, v, offset, causal):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if "fn" not in _FLEX:
        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    mask = None
    if causal:
        mask = create_block_mask(lambda b, h, qi, ki: qi + offset >= ki, None, None,
                                 q.shape[2], k.shape[2], device="cuda")
    return lambda: _FLEX["fn"](q, k, v, block_mask=mask, enable_gqa=True)


def measure(setup, *, kind, backend, units, peers=True, flex=True):
    """One row: attnkit (graph and eager) and each peer; ``units(ms)`` -> GB/s or TFLOP/s."""
    be = backend
    step = be.prepare(setup.meta, setup.cache)
    fwd = lambda: be.forward(setup.q, setup.k, setup.v, setup.layer, setup.cache, step)  # noqa: E731
    out = fwd()
    k_c, v_c = setup.gather()
    q = setup.q_bhsd()
    causal = kind != "decode"
    mask = causal_lower_right(setup.new, setup.prefix + setup.new) if causal and setup.prefix else None
    is_causal = causal and not setup.prefix
    try:
        ref = sdpa_peer(None, q, k_c, v_c, mask, is_causal)()
    except Exception:  # noqa: BLE001 - some SDPA paths take no enable_gqa with a bias
        ref = sdpa_peer(None, q, k_c, v_c, mask, is_causal, expand=True)()
    err = rel_err(out.view(setup.batch, setup.new, -1), ref.transpose(1, 2).reshape(setup.batch, setup.new, -1))
    row = {"err_vs_sdpa": err}
    if not err < 2e-2:
        row["attnkit"] = f"n/a (wrong: rel err {err:.3g})"
        return row
    ms, note = timed(fwd)
    row["attnkit"] = units(ms)
    row["attnkit_ms"] = ms
    if note:                     # the graph did not capture: the rate is an eager call's
        row["attnkit_note"] = note
    ran = getattr(step.prepared, "ran", None)
    if ran:                      # the kernel variant(s) the step ran (triton's TritonStep.ran)
        row["ran"] = ",".join(sorted(set(ran.values())))
    row["attnkit_eager"] = units(timed(fwd, graph=False)[0])
    if not peers:
        return row
    named = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}
    for name, kernel in named.items():
        row[name] = _peer(lambda: sdpa_peer(kernel, q, k_c, v_c, mask, is_causal), units, ref)
        if isinstance(row[name], str):   # retry with K/V repeated per query head (reads H_q/H_kv x bytes)
            again = _peer(lambda: sdpa_peer(kernel, q, k_c, v_c, mask, is_causal, expand=True), units, ref)
            if isinstance(again, float):
                row[name], row[name + "_note"] = again, "K/V repeated to H_q heads (no GQA path)"
    gather_sdpa = lambda: (lambda: sdpa_peer(None, q, *setup.gather(), mask, is_causal)())  # noqa: E731
    row["gather_sdpa"] = _peer(gather_sdpa, units, ref)
    if flex and time.time() - START < FLEX_BUDGET_S:
        row["flex"] = _peer(lambda: flex_peer(q, k_c, v_c, setup.prefix, causal), units, ref)
    else:
        row["flex"] = "n/a (skipped: compile-time budget)" if flex else "n/a (not run)"
    return row


def guarded(fn):
    """A row that fails (compile error, out of memory) is reported, not fatal."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return {"attnkit": f"n/a ({type(exc).__name__}: {str(exc).splitlines()[0][:100]})"}


def _peer(make, units, ref):
    try:
        fn = make()
        got = fn()
        if rel_err(got, ref) > 2e-2:
            return f"n/a (disagrees: rel err {rel_err(got, ref):.3g})"
        return units(timed(fn)[0])
    except Exception as exc:  # noqa: BLE001 - a peer that errors is reported, not fatal
        torch.cuda.synchronize()
        return f"n/a ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})"


def _planned(heads: int, dim: int) -> dict:
    """The plan's kernel tables for triton at this shape (what the runner would hand it)."""
    return planned_options("triton", Shape("mha", heads, 8, dim, dim, "bf16", "bf16"))


def decode_rows(args, ceil, out, tuned):
    batches, contexts = ((1, 64), (4096, 32768)) if args.quick else ((1, 16, 64, 128), (1024, 4096, 32768))
    for dim, heads, shapes in ((128, 32, [(b, c) for b in batches for c in contexts]),
                               (64, 32, [(64, 4096)]), (256, 16, [(64, 4096)])):
        for b, ctx in shapes:
            s = Setup(b, ctx - 1, 1, heads=heads, dim=dim)
            nbytes = 2 * b * ctx * s.spec.num_kv_heads * dim * 2
            be = TritonBackend(decode_config=tuned.get(f"decode-d{dim}"), **_planned(heads, dim))
            row = guarded(lambda: measure(s, kind="decode", backend=be,
                                          units=lambda ms: nbytes / ms / 1e6,
                                          flex=(b, ctx) == (64, 4096) and dim == 128))
            row.update(kind="decode", batch=b, context=ctx, head_dim=dim, unit="GB/s", bytes=nbytes,
                       floor_us=nbytes / ceil["copy_gbs"] / 1e3)
            out.append(row)
            _print(row)
            if dim == 128 and (b, ctx) in ((1, 32768), (64, 4096)):
                for other in DECODE_VARIANTS:     # each variant explicitly, next to the default
                    alt = TritonBackend(decode_config=tuned.get("decode-d128"), decode_variant=other)
                    vrow = guarded(lambda: measure(s, kind="decode", backend=alt, peers=False,
                                                   units=lambda ms: nbytes / ms / 1e6))
                    vrow.update(kind="variant", op="decode", variant=other, config="default",
                                shape=f"B={b} ctx={ctx} d=128")
                    out.append(vrow)
                    _print(vrow)
                    _compare(f"decode B={b} ctx={ctx} d128", "the plan's", row, vrow, other, "GB/s")
            del s
            torch.cuda.empty_cache()


def prefill_rows(args, ceil, out, tuned):
    # (prefix, new, head dim, heads, requests): the last is issue 28's batched fresh prefill
    shapes = [(8192, 2048, 128, 32, 1), (32768, 2048, 128, 32, 1), (0, 16384, 128, 32, 1),
              (0, 16384, 64, 32, 1), (0, 16384, 256, 16, 1), (0, 2048, 128, 32, 8)]
    if args.quick:
        shapes = shapes[1:3]
    for prefix, new, dim, heads, batch in shapes:
        s = Setup(batch, prefix, new, heads=heads, dim=dim)
        flops = batch * 4 * dim * heads * (new * prefix + new * (new + 1) / 2)
        be = TritonBackend(extend_config=tuned.get(f"extend-d{dim}"), **_planned(heads, dim))
        row = guarded(lambda: measure(s, kind="extend", backend=be,
                                      units=lambda ms: flops / ms / 1e9,
                                      flex=dim == 128 and prefix in (0, 32768)))
        row.update(kind="extend" if prefix else "prefill", prefix=prefix, new=new, head_dim=dim, batch=batch,
                   unit="TFLOP/s", flops=flops, floor_us=flops / ceil["matmul_tflops"] / 1e6)
        out.append(row)
        _print(row)
        if dim == 128 and new >= 2048 and prefix in (0, 32768):
            variant_rows(s, out, row, units=lambda ms: flops / ms / 1e9, tuned=tuned)
        del s
        torch.cuda.empty_cache()


# The default row above runs the plan's kernel table at its default config; these
# time each variant explicitly (and v2 at v1's config, to separate kernel from config).
VARIANT_RUNS = [("v1", None), ("v2", None),
                ("v2", dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3)),
                ("gluon_rows", None), ("gluon_rows_persistent", None)]


def variant_rows(s, out, default_row, *, units, tuned):
    for variant, cfg in VARIANT_RUNS:
        be = TritonBackend(extend_variant=variant, extend_config=cfg or tuned.get("extend-d128"))
        row = guarded(lambda: measure(s, kind="extend", backend=be, units=units, peers=False))
        row.update(kind="variant", op="extend", variant=variant, config=cfg or "default",
                   shape=f"B={s.batch} prefix={s.prefix} new={s.new} d=128")
        out.append(row)
        _print(row)
        _compare(f"extend B={s.batch} prefix={s.prefix} new={s.new} d128", "the plan's", default_row, row,
                 f"{variant} {cfg or 'default cfg'}", "TFLOP/s")


def _compare(what, default, default_row, row, other, unit):
    ours, theirs = default_row.get("attnkit"), row.get("attnkit")
    if isinstance(ours, float) and isinstance(theirs, float):
        print(f"COMPARE {what}: default ({default}) {ours:.0f} vs {other} {theirs:.0f} {unit} "
              f"= {ours / theirs:.2f}x", flush=True)
    else:
        print(f"COMPARE {what}: default ({default}) {ours} vs {other} {theirs}", flush=True)


# Candidate launch configs per (kernel, head dim), the current default first: decode
# (BLOCK_N, warps, stages), extend (BLOCK_M, BLOCK_N, warps, stages).
SWEEP = {
    ("decode", 64): [(64, 4, 3), (64, 4, 4), (128, 4, 3), (128, 8, 3)],
    ("decode", 128): [(64, 4, 4), (64, 4, 3), (128, 8, 3)],
    ("decode", 256): [(32, 4, 4), (64, 4, 2), (64, 8, 3), (32, 8, 4)],
    ("extend", 64): [(128, 64, 4, 3), (128, 128, 4, 3), (128, 64, 8, 3)],
    ("extend", 128): [(128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (128, 64, 8, 2)],
    ("extend", 256): [(64, 32, 4, 2), (64, 64, 4, 2), (128, 32, 8, 2), (64, 64, 8, 2)],
}
HEADS = {64: 32, 128: 32, 256: 16}     # q heads per head dim (8 KV heads throughout)


def _config(kind, t):
    keys = ("BLOCK_N", "num_warps", "num_stages") if kind == "decode" else (
        "BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
    return dict(zip(keys, t))


def sweep(out):
    """Time each candidate config on the target shapes; a candidate replaces the default only
    when its geometric mean over the shapes beats it by more than 3 % (run-to-run noise)."""
    tuned = {}
    for (kind, dim), cands in SWEEP.items():
        shapes = ([(64, 4096)] + ([(1, 32768)] if dim == 128 else [])) if kind == "decode" else [(1, 16384)]
        score = {c: 0.0 for c in cands}
        for b, n in shapes:
            s = Setup(b, n - 1, 1, heads=HEADS[dim], dim=dim) if kind == "decode" else Setup(
                1, 0, n, heads=HEADS[dim], dim=dim)
            work = (2 * b * n * 8 * dim * 2 if kind == "decode"
                    else 4 * dim * HEADS[dim] * n * (n + 1) / 2)
            units = (lambda ms: work / ms / 1e6) if kind == "decode" else (lambda ms: work / ms / 1e9)
            for c in cands:
                opt = {f"{kind}_config": _config(kind, c)}
                row = guarded(lambda: measure(s, kind=kind, backend=TritonBackend(**opt), units=units,
                                              peers=False))
                ok = isinstance(row.get("attnkit"), float)
                score[c] += math.log(row["attnkit"]) if ok else -1e9
                out.append(dict(row, kind="sweep", op=kind, head_dim=dim, batch=b, tokens=n,
                                config=_config(kind, c)))
                _print(out[-1])
            del s
            torch.cuda.empty_cache()
        best = max(cands, key=lambda c: score[c])
        if score[best] > score[cands[0]] + len(shapes) * math.log(1.03):
            tuned[f"{kind}-d{dim}"] = _config(kind, best)
    print("tuned:", json.dumps(tuned), flush=True)
    return tuned


def breakdown(out, tuned):
    """Where the time of one long decode (B=1, 32k) goes: whole step with and without the
    L2 flush (134 MB of K/V is over twice the 60 MB L2, so unflushed reps still stream from
    HBM, while the flush's dirty lines are written back inside the timed region), the K/V
    write alone, the kernels alone, and other split counts."""
    import attnkit.backends.triton.backend as tb
    s = Setup(1, 32767, 1)
    nbytes = 2 * 32768 * 8 * 128 * 2
    cfg = tuned.get("decode-d128")
    be = TritonBackend(decode_config=cfg, decode_variant="v1")    # the write is its own launch
    step = be.prepare(s.meta, s.cache)
    fwd = lambda: be.forward(s.q, s.k, s.v, s.layer, s.cache, step)  # noqa: E731
    fused = TritonBackend(decode_config=cfg, decode_variant="v2")
    fused_step = fused.prepare(s.meta, s.cache)
    fwd2 = lambda: fused.forward(s.q, s.k, s.v, s.layer, s.cache, fused_step)  # noqa: E731
    write = lambda: tb.write_kv(s.cache, 0, s.meta.slot_mapping, s.k, s.v)  # noqa: E731
    parts = {"step (v1), L2 flushed": (fwd, True), "step (v1)": (fwd, False),
             "step (v2: write in the kernel)": (fwd2, False), "K/V write only": (write, False)}
    for name, (fn, cold) in parts.items():
        run, _ = graphed(fn)
        out.append(dict(kind="breakdown", part=name, us=1e3 * time_ms(run, warmup=3, reps=30, cold_l2=cold)))
    real, tb.write_kv = tb.write_kv, lambda *a: None
    try:
        run, _ = graphed(fwd)
        out.append(dict(kind="breakdown", part="kernels only (v1)", us=1e3 * time_ms(run, warmup=3, reps=30)))
        for splits in (16, 48):
            alt = TritonBackend(decode_config=cfg, num_splits=splits, decode_variant="v1")
            st = alt.prepare(s.meta, s.cache)
            run, _ = graphed(lambda: alt.forward(s.q, s.k, s.v, s.layer, s.cache, st))
            out.append(dict(kind="breakdown", part=f"kernels only, {splits} splits",
                            us=1e3 * time_ms(run, warmup=3, reps=30)))
    finally:
        tb.write_kv = real
    for r in out:
        if r["kind"] == "breakdown" and "gbs" not in r:
            r["gbs"] = nbytes / r["us"] / 1e3
            _print(r)


def _print(row):
    keep = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}
    print(json.dumps(keep), flush=True)


def _fmt(v):
    return f"{v:.0f}" if isinstance(v, float) else str(v)


def table(rows, ceil):
    peers = ("sdpa_flash", "sdpa_cudnn", "flex", "gather_sdpa")
    lines = ["| kind | shape | unit | attnkit (graph) | attnkit (eager) | " + " | ".join(peers)
             + " | vs best peer | vs ceiling |", "|" + "---|" * (7 + len(peers))]
    for r in rows:
        if r["kind"] in ("sweep", "breakdown", "variant"):
            continue
        shape = (f"B={r['batch']} ctx={r['context']} d={r['head_dim']}" if r["kind"] == "decode"
                 else f"{r.get('batch', 1)}x prefix={r['prefix']} new={r['new']} d={r['head_dim']}")
        ours = r.get("attnkit")
        nums = [r.get(p) for p in peers if isinstance(r.get(p), float)]
        best = max(nums) if nums else None
        ceiling = ceil["copy_gbs"] if r["unit"] == "GB/s" else ceil["matmul_tflops"]
        ratio = f"{ours / best:.2f}x" if isinstance(ours, float) and best else "n/a"
        frac = f"{100 * ours / ceiling:.0f}%" if isinstance(ours, float) else "n/a"
        cells = [r["kind"], shape, r["unit"], _fmt(ours), _fmt(r.get("attnkit_eager"))]
        cells += [_fmt(r.get(p, "n/a")) for p in peers] + [ratio, frac]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--sweep", action="store_true", help="also sweep launch configs")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    torch.manual_seed(0)
    env = environment()
    ceil = ceilings()
    print(env, json.dumps(ceil), flush=True)
    rows: list[dict] = []
    tuned = sweep(rows) if args.sweep else {}
    guarded(lambda: breakdown(rows, tuned))
    decode_rows(args, ceil, rows, tuned)
    prefill_rows(args, ceil, rows, tuned)
    md = table(rows, ceil)
    parts = [f"| {r['part']} | {r['us']:.1f} | {r.get('gbs', 0):.0f} |" for r in rows
             if r["kind"] == "breakdown"]
    var = [f"| {r['op']} | {r['shape']} | {r['variant']} | {r['config']} | "
           f"{_fmt(r.get('attnkit'))} | {_fmt(r.get('attnkit_eager'))} |"
           for r in rows if r["kind"] == "variant"]
    if var:
        md += (f"\n\nKernel variants not in the table above (it runs the plan's kernel tables, "
               f"default configs); GB/s for decode, TFLOP/s for extend:\n\n"
               "| kernel | shape | variant | config | graph | eager |\n|---|---|---|---|---|---|\n"
               + "\n".join(var))
    if parts:
        md += "\n\nDecode B=1, ctx 32k, d 128 (CUDA-graph replays):\n\n| part | µs | GB/s of K/V |\n|---|---|---|\n"
        md += "\n".join(parts)
    head = (f"{env}\nceilings: copy {ceil['copy_gbs']:.0f} GB/s, bf16 matmul "
            f"{ceil['matmul_tflops']:.0f} TFLOP/s; wall {time.time() - START:.0f} s; "
            f"launch configs: defaults, except {json.dumps(tuned) if tuned else 'none'}; "
            f"kernels: the plan's tables (the shipped profile)\n\n")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_triton.md"), "w") as f:
        f.write(head + md + "\n")
    with open(os.path.join(args.out, "bench_triton.json"), "w") as f:
        json.dump({"environment": env, "ceilings": ceil, "tuned": tuned, "rows": rows}, f, indent=1,
                  default=str)
    try:
        from plot_decode import plot
        plot(os.path.join(args.out, "bench_triton.json"), os.path.join(args.out, "decode_gbs.png"))
    except Exception as exc:  # noqa: BLE001 - the table matters more than the picture
        print(f"plot failed: {exc}", flush=True)
    print(head + md, flush=True)


if __name__ == "__main__":
    main()
