"""Sweep the sparse MLA decode kernels of triton_dsa (issue 27's bar: >= 350 TFLOP/s at 128
heads, top-k 2048, B 64, ctx 32k, bf16 latent) on one GPU, peers in the same process.

    PYTHONPATH=src:tests/triton_dsa python3 benchmarks/sweep_dsa.py --forms current,peers,gluon --state FILE --out DIR
    TRITON_INTERPRET=1 PYTHONPATH=src:tests/triton_dsa python3 benchmarks/sweep_dsa.py --smoke --forms current,peers

Forms, run in the order given: "current" = sparse_mla.py's Triton kernel at the tile
sparse_tile picks (the current triton_dsa kernel); "peers" = "torch gather" (the selected rows
gathered, two batched matmuls) and dense triton_mla over the whole context (the plan's
variant); "gluon" = sparse_gluon.py's forms (configs.GLUON_FORMS: warp-specialised, cp.async
gathers); "fp8" = the Triton kernel over an fp8 e4m3 latent cache; "tiles" = other Triton tiles.

Every variant is first checked against the float64 oracle of tests/triton_dsa/
dsa_kernel_cases.py on a small case (3 tokens, 128 heads, NaN in every unowned page and in the
stale slots of each request's last page, -1 pads) with its split count and with one split;
then, at every timed shape, against torch gather (relative error < 2e-2). A variant that
fails to compile or to check is a row with its error; the others still run. Timed shapes:
B {64, 128, 8} x ctx 32k, one token a request, random distinct top-k positions; CUDA-graph
replays, L2 flushed between repetitions (bench_mla.graph_ms).

``--state FILE``: each variant's name is appended before it runs and variants named there
are skipped, so a run killed in a hung kernel can be restarted past it (gpu_dsakern2.sh).
Rows go to sweep_dsa.jsonl under --out as they come (one JSON object a line).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_mla as mla  # noqa: E402
from bench_mla import L, NOPE, R, Setup, _planned  # noqa: E402
from common import failure_reason  # noqa: E402

from attnkit.backends.triton_dsa.configs import GLUON_FORMS  # noqa: E402,F401
from attnkit.backends.triton_dsa.sparse_mla import sparse_mla, sparse_tile, ws_tile  # noqa: E402

HEADS, TOPK = 128, 2048
SHAPES = [(64, 32768), (128, 32768), (8, 32768)]     # (batch, ctx): the target first
# (block_h, block_n, num_warps, num_stages, num_splits or None = sparse_tile's count)
TRITON_TILES = [(64, 64, 8, 2, None)]
# (form, num_splits or None = the count that fills the SMs)
GLUON_VARIANTS = [("ws64x2", None), ("ws3_32x4", None), ("ws32x4", None), ("ws64x2", 2),
                  ("ws3_64x2", None), ("ws32x3", None)]


def flops(batch: int) -> int:
    return batch * (2 * HEADS * TOPK * (L + R) + 2 * HEADS * TOPK * L)


def variants(forms: list[str]) -> list[tuple[str, dict | None]]:
    """(name, sparse_mla options; num_splits None = chosen per shape), in the order of
    ``forms``: "current" (the tile sparse_tile picks), "tiles" (the other Triton tiles),
    "gluon" (every Gluon variant), "peers" and "fp8" (options None: rows of their own)."""
    out = []
    for f in forms:
        if f == "current":
            out.append(("triton current (sparse_tile)", dict(kernel="triton", tile="auto")))
        elif f == "tiles":
            for bh, bn, w, st, sp in TRITON_TILES:
                out.append((f"triton h{bh} n{bn} w{w} s{st} splits {sp or 'auto'}",
                            dict(kernel="triton", block_h=bh, block_n=bn, num_warps=w,
                                 num_stages=st, num_splits=sp)))
        elif f == "gluon":
            for form, sp in GLUON_VARIANTS:
                out.append((f"gluon {form} splits {sp or 'auto'}", dict(kernel=form, num_splits=sp)))
        elif f in ("peers", "fp8"):
            out.append((f, None))
        else:
            raise SystemExit(f"unknown form {f!r}")
    return out


def options(opts: dict, T: int) -> dict:
    """The concrete sparse_mla keywords of a variant for T tokens."""
    o = dict(opts)
    if o.pop("tile", None) == "auto":
        return dict(sparse_tile(torch.empty(T, HEADS, L + R, device=mla.DEV, dtype=mla.DT),
                                TOPK, L=L), kernel="triton")
    if o["kernel"] != "triton" and o["num_splits"] is None:
        q = torch.empty(T, HEADS, L + R, device=mla.DEV, dtype=mla.DT)
        o["num_splits"] = ws_tile(q, TOPK, form=o["kernel"])["num_splits"]
    elif o["num_splits"] is None:
        auto = sparse_tile(torch.empty(T, HEADS, L + R, device=mla.DEV, dtype=mla.DT), TOPK, L=L)
        o["num_splits"] = auto["num_splits"]
    return o


class Small:
    """The oracle case: 3 decode tokens over 5000 / 300 / 2047 cached positions, 2048 indices
    each (a short request's every position, -1 padded), float64 references."""

    def __init__(self):
        from dsa_kernel_cases import make, ref_attention
        self.case = c = make(prefix=[5000, 300, 2047], new=[1, 1, 1], page=64, heads=HEADS,
                             L=L, R=R, idx_heads=64, idx_dim=128, dtype=mla.DT, device=mla.DEV,
                             seed=2)
        g = torch.Generator().manual_seed(3)
        idx = torch.full((3, TOPK), -1, dtype=torch.int32)
        for t, s in enumerate(c.seq_lens):
            n = min(TOPK, s)
            idx[t, torch.randperm(TOPK, generator=g)[:n]] = torch.randperm(s, generator=g)[:n].int()
        self.idx = idx.to(mla.DEV)
        self.want = torch.stack([ref_attention(c, t, [int(i) for i in idx[t] if i >= 0])
                                 for t in range(3)])

    def check(self, opts: dict) -> float:
        """The largest |error| - (2e-2 + 2e-2 * |want|) over the variant's splits and one split
        (<= 0: within the GPU tests' tolerance; NaN: a non-finite output)."""
        worst = 0.0
        for o in (opts, dict(opts, num_splits=1)):
            c = self.case
            out = sparse_mla(c.q_lat, c.latent, c.block_table, c.token_request, self.idx,
                             scale=c.scale, L=L, **o).double().cpu()
            if not torch.isfinite(out).all():
                return float("nan")
            worst = max(worst, float(((out - self.want).abs() - 2e-2 - 2e-2 * self.want.abs()).max()))
        return worst


class Timed:
    """One timed shape: bench_mla.Setup's paged latent (shuffled pages) and random distinct
    top-k positions per token."""

    def __init__(self, batch: int, ctx: int, kv_dtype=None):
        self.s = s = Setup(batch, ctx - 1, 1, heads=HEADS, kv_dtype=kv_dtype)
        q_lat = torch.bmm(s.q[..., :NOPE].transpose(0, 1), s.layer.w_kc)    # [H, T, L]
        self.q_lat_hf = q_lat
        self.q_cat = torch.cat([q_lat.transpose(0, 1), s.q[..., NOPE:]], -1).contiguous()
        self.table = s.meta.block_tables.to(torch.int32)
        self.req = torch.arange(batch, device=mla.DEV, dtype=torch.int32)
        self.idx = torch.rand(batch, ctx, device=mla.DEV).topk(TOPK, dim=1).indices.int()
        self.batch, self.ctx = batch, ctx
        self._ref = None

    def run(self, opts):
        cache = self.s.cache
        return sparse_mla(self.q_cat, cache.latent[0], self.table, self.req, self.idx,
                          scale=self.s.spec.softmax_scale, L=L,
                          kv_scale=float(cache.k_scales[0]) if cache.is_fp8 else 1.0, **opts)

    def torch_gather(self):
        cache = self.s.cache
        lat = cache.latent[0]
        page = lat.shape[1]
        pos = self.idx.long()
        slots = self.table.long()[self.req.long()[:, None], pos // page] * page + pos % page
        rows = cache.dequant(lat.view(-1, L + R)[slots], cache.k_scales[0], mla.DT)   # [T, K, L+R]
        sc = (self.q_cat @ rows.transpose(1, 2)).float() * self.s.spec.softmax_scale
        return torch.softmax(sc, -1).to(mla.DT) @ rows[..., :L]

    def ref(self):
        if self._ref is None:
            self._ref = self.torch_gather().float()
        return self._ref


def rel_err(out, ref) -> float:
    return ((out.float() - ref).norm() / ref.norm()).item()


def sweep(args, forms, emit):
    small = Small()
    timed = {}
    state = set()
    if args.state and os.path.exists(args.state):
        state = set(open(args.state).read().splitlines())
    reps = dict(warmup=3, reps=args.reps, cold_l2=True)
    for name, opts in variants(forms):
        if name in state:
            emit(dict(kind="skipped", variant=name, why="started in an earlier run (hung or killed)"))
            continue
        if args.state:
            with open(args.state, "a") as f:
                f.write(name + "\n")
        if opts is None:
            (peers if name == "peers" else fp8_row)(timed, reps, emit)
            continue
        t0 = time.time()
        try:
            err = small.check(options(opts, 3))
        except Exception as exc:  # noqa: BLE001 - a variant that does not compile is a result
            emit(dict(kind="check", variant=name, error=failure_reason(exc)))
            _exit_if_poisoned(emit)
            continue
        ok = err <= 0.0
        emit(dict(kind="check", variant=name, excess=err, ok=ok, s=time.time() - t0))
        if not ok:
            continue
        for batch, ctx in SHAPES:
            d = timed.get((batch, ctx)) or timed.setdefault((batch, ctx), Timed(batch, ctx))
            o = options(opts, batch)
            try:
                e = rel_err(d.run(o), d.ref())
                if not e < 2e-2:
                    emit(dict(kind="time", variant=name, batch=batch, ctx=ctx, rel_err=e,
                              error="relative error vs torch gather"))
                    continue
                ms, how = mla.graph_ms(lambda: d.run(o), **reps)
            except Exception as exc:  # noqa: BLE001
                emit(dict(kind="time", variant=name, batch=batch, ctx=ctx, error=failure_reason(exc)))
                _exit_if_poisoned(emit)
                continue
            o.pop("kernel", None)
            emit(dict(kind="time", variant=name, batch=batch, ctx=ctx, ms=ms,
                      tflops=flops(batch) / ms / 1e9, timing=how, rel_err=e, opts=o))


def fp8_row(timed, reps, emit):
    """The Triton kernel over an fp8 e4m3 latent cache (the Gluon kernel reads bf16 only) at
    the target shape, checked against torch gather of the dequantised rows."""
    name = "triton current (sparse_tile), fp8 e4m3 latent"
    batch, ctx = SHAPES[0]
    try:
        d = Timed(batch, ctx, kv_dtype=torch.float8_e4m3fn)
        o = options(dict(kernel="triton", tile="auto"), batch)
        e = rel_err(d.run(o), d.ref())
        if not e < 2e-2:
            emit(dict(kind="time", variant=name, batch=batch, ctx=ctx, rel_err=e,
                      error="relative error vs torch gather"))
            return
        ms, how = mla.graph_ms(lambda: d.run(o), **reps)
        emit(dict(kind="time", variant=name, batch=batch, ctx=ctx, ms=ms,
                  tflops=flops(batch) / ms / 1e9, timing=how, rel_err=e))
    except Exception as exc:  # noqa: BLE001 - a row that fails is a result
        emit(dict(kind="time", variant=name, batch=batch, ctx=ctx, error=failure_reason(exc)))


def _exit_if_poisoned(emit):
    """A CUDA fault (illegal address, ...) poisons the context for every later call: exit 3 so
    that gpu_dsakern2.sh restarts the sweep past this variant (--state)."""
    if mla.DEV != "cuda":
        return
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        emit(dict(kind="poisoned", error=failure_reason(exc)))
        sys.exit(3)


def peers(timed, reps, emit):
    from attnkit.backends.triton_mla.backend import TritonMLABackend
    batch, ctx = SHAPES[0]
    d = timed.get((batch, ctx)) or Timed(batch, ctx)
    try:
        ms = mla.time_ms(d.torch_gather, warmup=2, reps=5, cold_l2=True)
        emit(dict(kind="peer", variant="torch gather", batch=batch, ctx=ctx, ms=ms,
                  tflops=flops(batch) / ms / 1e9))
    except Exception as exc:  # noqa: BLE001
        emit(dict(kind="peer", variant="torch gather", error=failure_reason(exc)))
    try:
        dense = TritonMLABackend(**(_planned(HEADS) if mla.DEV == "cuda" else {}))
        s = d.s
        step = dense.prepare(s.meta, s.cache)
        q_pe = s.q[..., NOPE:]
        ms, how = mla.graph_ms(lambda: dense.attend_latent(d.q_lat_hf, q_pe, s.cache.latent[0],
                                                           s.layer, step), **reps)
        emit(dict(kind="peer", variant="dense triton_mla (plan's variant), whole context",
                  batch=batch, ctx=ctx, ms=ms, timing=how,
                  tflops=batch * 2 * HEADS * ctx * (2 * L + R) / ms / 1e9))
    except Exception as exc:  # noqa: BLE001
        emit(dict(kind="peer", variant="dense triton_mla", error=failure_reason(exc)))


def table(rows) -> str:
    """Markdown: one line a variant, TFLOP/s per timed shape."""
    heads = " | ".join(f"B {b} ctx {c // 1024}k ms (TFLOP/s)" for b, c in SHAPES)
    out = [f"| variant | check | {heads} |", "|---" * (2 + len(SHAPES)) + "|"]
    names = list(dict.fromkeys(r["variant"] for r in rows))
    for n in names:
        mine = [r for r in rows if r["variant"] == n]
        chk = next((r for r in mine if r["kind"] in ("check", "skipped")), {})
        cell = chk.get("error") or chk.get("why") or (
            f"ok ({chk['excess']:.2g})" if chk.get("ok") else f"FAILED ({chk.get('excess')})")
        if chk.get("kind") is None:
            cell = "peer" if all(r["kind"] == "peer" for r in mine) else "vs torch gather only"
        cols = []
        for b, c in SHAPES:
            r = next((r for r in mine if r.get("batch") == b and r.get("ctx") == c), None)
            cols.append("" if r is None else r.get("error", f"{r['ms']:.3f} ({r['tflops']:.0f})"))
        out.append(f"| {n} | {cell} | " + " | ".join(cols) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--forms", default="current,peers,gluon,fp8,tiles")
    ap.add_argument("--state", default=None)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=".")
    ap.add_argument("--table", action="store_true", help="only print the table of --out's rows")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU + Triton interpreter, tiny shapes, Triton forms: the script runs")
    args = ap.parse_args()
    if args.smoke:
        _smoke()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "sweep_dsa.jsonl")
    if not args.table:
        def emit(row):
            print(row, flush=True)
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
        sweep(args, args.forms.split(","), emit)
    rows = [json.loads(x) for x in open(path)] if os.path.exists(path) else []
    text = table(rows)
    with open(os.path.join(args.out, "sweep_dsa.md"), "w") as f:
        f.write(text + "\n")
    print(text)


def _smoke():
    """bench_mla's CPU stand-ins, a top-k of 64, one tiny timed shape, the first Triton tile."""
    global TOPK, SHAPES
    mla._smoke()
    TOPK, SHAPES = 64, [(2, 300)]


if __name__ == "__main__":
    main()
