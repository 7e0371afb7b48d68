"""Benchmark triton_mla (MLA over a paged latent cache) against the peers a user has here,
in one run on one GPU, next to the machine's measured ceilings.

    PYTHONPATH=src python3 benchmarks/bench_mla.py [--quick] [--sweep] [--fp8] [--skip-decode] [--out DIR]

Besides the default backend's rows, every run times the absorbed split-kernel VARIANTS
(decode.VARIANTS: v1 = measured version, v2 = column-split / page-local, see NOTES-mla.md)
on the target rows and prints one "VARIANTS" comparison line per row.

DeepSeek-V3 sizes: kv_lora_rank 512, rope 64, nope 128, v 128, page 64, bf16.
Decode: heads {16, 128} x batch {1, 32, 128} x context {1k, 4k, 32k}; reports TFLOP/s of the
absorbed FLOPs (2 * H * ctx * (576 + 512) per request) and GB/s of latent cache read
(ctx * 576 * 2 bytes per request), for the attention core (the Triton kernels alone) and the
whole forward (cache write + q_nope @ w_kc + core + @ w_vc, replayed as a CUDA graph).
Peers: attnkit torch_native (float32 loop over requests); "torch bmm": the latent gathered
densely, then absorbed attention as two batched matmuls; SDPA over K/V decompressed per head
(skipped when K/V would pass 24 GB). Extend: q 2048 over a 32k prefix, MHA form vs absorbed.
Every triton_mla row is checked against the torch-bmm result first. Decode timings flush L2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from common import ceilings, environment, graphed, planned_options, time_ms  # noqa: E402

from attnkit.backends.base import RuntimeLayer  # noqa: E402
from attnkit.backends.batch import Request, build_batch  # noqa: E402
from attnkit.backends.torch_native.backend import TorchNativeBackend  # noqa: E402
from attnkit.backends.triton_mla.backend import TritonMLABackend  # noqa: E402
from attnkit.kvcache.paged import PagedKVCache  # noqa: E402
from attnkit.model.spec import LayerAttention, MLAConfig  # noqa: E402

DT = torch.bfloat16      # compute and cache dtype (fp16 under --smoke: the interpreter's bf16 dot is wrong)
DEV = "cuda"
L, R, NOPE, DV = 512, 64, 128, 128
DSV3 = MLAConfig(kv_lora_rank=L, qk_rope_head_dim=R, qk_nope_head_dim=NOPE, v_head_dim=DV)
SDPA_MAX_BYTES = 24e9
SWEEP_SHAPE = (128, 4096)      # batch, context of the tile sweep
PAGE = 64                      # the page size of every row (Setup's default)


class Setup:
    """One paged MLA step: latent cache (random rows, shuffled pages), metadata, q, latent k."""

    def __init__(self, batch, prefix, new, *, heads, page=PAGE, kv_dtype=None):
        self.spec = LayerAttention(layer_id=0, num_heads=heads, num_kv_heads=1, head_dim=NOPE + R,
                                   v_head_dim=DV, kind="mla", mla=DSV3)
        g = lambda *s: torch.randn(*s, device=DEV, dtype=DT) / L ** 0.5  # noqa: E731
        self.layer = RuntimeLayer(spec=self.spec, w_kc=g(heads, NOPE, L), w_vc=g(heads, L, DV))
        per = -(-(prefix + new) // page)
        self.cache = PagedKVCache([self.spec], num_pages=batch * per, page_size=page,
                                  dtype=kv_dtype or DT, device=DEV)
        self.cache.latent[0].copy_(torch.randn_like(self.cache.latent[0], dtype=DT))
        perm = torch.randperm(batch * per).view(batch, per)
        self.meta = build_batch([Request(prefix, new, row) for row in perm.tolist()],
                                page_size=page, device=DEV)
        t = batch * new
        self.q = torch.randn(t, heads, NOPE + R, device=DEV, dtype=DT)
        self.k = torch.randn(t, L + R, device=DEV, dtype=DT)
        self.table = perm.to(DEV)
        self.batch, self.prefix, self.new, self.heads, self.page = batch, prefix, new, heads, page

    def dense_latent(self):
        """[B, S, L + R] every request's latent rows in order (the cache after the write)."""
        S = self.prefix + self.new
        pos = torch.arange(S, device=DEV)
        slots = self.table[:, pos // self.page] * self.page + pos % self.page
        return self.cache.dequant(self.cache.latent[0].view(-1, L + R)[slots], self.cache.k_scales[0], DT)


def graph_ms(fn, **kw):
    """Time ``fn`` replayed as a CUDA graph (launch gaps out); eager if capture fails."""
    if DEV != "cuda":
        return time_ms(fn, **kw), "eager"
    run, note = graphed(fn)
    return time_ms(run, **kw), "graph" if note is None else "eager"


def torch_bmm_decode(s: Setup):
    """Peer: gather the latent densely, absorbed attention as batched matmuls. -> [B, H*Dv]."""
    lat = s.dense_latent()                                              # [B, S, L+R]
    q = s.q.view(s.batch, s.heads, NOPE + R)
    q_lat = torch.einsum("bhd,hdl->bhl", q[..., :NOPE], s.layer.w_kc)
    qf = torch.cat([q_lat, q[..., NOPE:]], dim=-1)                      # [B, H, L+R]
    p = torch.softmax((qf @ lat.transpose(1, 2)).float() * s.spec.softmax_scale, -1).to(DT)
    out_lat = p @ lat[..., :L]                                          # [B, H, L]
    return torch.einsum("bhl,hlv->bhv", out_lat, s.layer.w_vc).reshape(s.batch, -1)


def sdpa_decompressed(s: Setup, q_len: int):
    """Peer: decompress per-head K/V from the gathered latent, then SDPA (bottom-right causal)."""
    lat = s.dense_latent()
    S, H = lat.shape[1], s.heads
    k_nope = torch.einsum("bsl,hdl->bhsd", lat[..., :L], s.layer.w_kc)
    k = torch.cat([k_nope, lat[:, None, :, L:].expand(-1, H, -1, -1)], dim=-1)
    v = torch.einsum("bsl,hlv->bhsv", lat[..., :L], s.layer.w_vc)
    q = s.q.view(s.batch, q_len, H, NOPE + R).transpose(1, 2)
    if q_len == 1:
        o = F.scaled_dot_product_attention(q, k, v, scale=s.spec.softmax_scale)
    else:
        from torch.nn.attention.bias import causal_lower_right
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q_len, S),
                                           scale=s.spec.softmax_scale)
    return o.transpose(1, 2).reshape(s.batch * q_len, H * DV)


def check(out, ref, what):
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    if not err < 2e-2:
        raise SystemExit(f"{what}: relative error {err:.3g} against the torch peer")
    return err


def _planned(heads: int, kv: str = "bf16") -> dict:
    """The plan's kernel tables for triton_mla at this shape and PAGE (what the runner hands it)."""
    from attnkit.planning.profile import Shape
    return planned_options("triton_mla", Shape("mla", heads, 1, NOPE + R, DV, "bf16", kv, L, R),
                           page_size=PAGE)


def decode_row(heads, batch, ctx, args, backend, kv_dtype=None):
    s = Setup(batch, ctx - 1, 1, heads=heads, kv_dtype=kv_dtype)
    step = backend.prepare(s.meta, s.cache)
    fwd = lambda: backend.forward(s.q, s.k, None, s.layer, s.cache, step)  # noqa: E731
    out = fwd()
    err = check(out, torch_bmm_decode(s), f"decode H={heads} B={batch} ctx={ctx}")
    q_lat = torch.bmm(s.q[..., :NOPE].transpose(0, 1), s.layer.w_kc)
    q_pe = s.q[..., NOPE:]
    kv_scale = s.cache.k_scales[0] if s.cache.is_fp8 else 1.0
    core = lambda: backend.attend_latent(q_lat, q_pe, s.cache.latent[0], s.layer, step,  # noqa: E731
                                         kv_scale=kv_scale)
    reps = dict(warmup=3, reps=args.reps, cold_l2=True)
    t_core, _ = graph_ms(core, **reps)
    t_fwd, how = graph_ms(fwd, **reps)
    flops = 2 * heads * ctx * (L + R + L) * batch
    nbytes = batch * ctx * (L + R) * s.cache.latent[0].element_size()
    row = dict(kind="decode", heads=heads, batch=batch, ctx=ctx, core_ms=t_core, fwd_ms=t_fwd,
               kv=str(s.cache.dtype).replace("torch.", ""),
               timing=how, core_tflops=flops / t_core / 1e9, core_gbs=nbytes / t_core / 1e6,
               fwd_tflops=flops / t_fwd / 1e9, rel_err=err)
    row["bmm_ms"] = time_ms(lambda: torch_bmm_decode(s), warmup=2, reps=5, cold_l2=True)
    sd_bytes = batch * ctx * heads * (NOPE + R + DV) * 2 * 2
    row["sdpa_ms"] = (time_ms(lambda: sdpa_decompressed(s, 1), warmup=1, reps=3)
                      if sd_bytes < SDPA_MAX_BYTES else None)
    native_work = batch * ctx * heads
    if native_work <= 128 * 4096 * 128 and not args.quick:
        tn = TorchNativeBackend()
        tstep = tn.prepare(s.meta, s.cache)
        row["native_ms"] = time_ms(lambda: tn.forward(s.q, s.k, None, s.layer, s.cache, tstep),
                                   warmup=1, reps=3)
    else:
        row["native_ms"] = None
    del s
    torch.cuda.empty_cache()
    return row


def extend_rows(heads, q_len, prefix, args):
    s = Setup(1, prefix, q_len, heads=heads)
    rows = []
    mha_flops = 2 * heads * (q_len * prefix + q_len * (q_len + 1) / 2) * (NOPE + R + DV)
    forms = {"mha": TritonMLABackend(mha_form_min_query=1),
             "absorbed": TritonMLABackend(mha_form_min_query=None)}
    s.cache.write(0, s.meta.slot_mapping, s.k, None)     # the peer reads the new rows too
    try:
        ref, sdpa_err = sdpa_decompressed(s, q_len), None
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run this shape is a result
        ref, sdpa_err = None, f"{type(exc).__name__}: {str(exc)[:120]}"
    for name, be in forms.items():
        step = be.prepare(s.meta, s.cache)
        fn = lambda: be.forward(s.q, s.k, None, s.layer, s.cache, step)  # noqa: E731
        out = fn()
        ref = out if ref is None else ref      # without SDPA the two forms check each other
        err = check(out, ref, f"extend {name} H={heads}")
        t = time_ms(fn, warmup=1, reps=3)
        rows.append(dict(kind="extend", form=name, heads=heads, q=q_len, prefix=prefix, ms=t,
                         mha_tflops=mha_flops / t / 1e9, rel_err=err))
    if sdpa_err is None:
        t = time_ms(lambda: sdpa_decompressed(s, q_len), warmup=1, reps=3)
        rows.append(dict(kind="extend", form="sdpa-decompressed", heads=heads, q=q_len,
                         prefix=prefix, ms=t, mha_tflops=mha_flops / t / 1e9, rel_err=0.0))
    else:
        rows.append(dict(kind="extend", form="sdpa-decompressed", heads=heads, q=q_len,
                         prefix=prefix, ms=float("nan"), mha_tflops=float("nan"), error=sdpa_err))
    del s
    torch.cuda.empty_cache()
    return rows


def sweep(args):
    """Kernel-core time of a few tile shapes at the two target shapes (B=128, ctx 4k)."""
    rows = []
    shapes = {128: [(64, 16, 8, 2), (64, 32, 8, 2), (64, 32, 8, 3), (64, 64, 8, 2), (64, 64, 8, 3),
                    (32, 64, 8, 2)],
              16: [(16, 64, 4, 3), (16, 32, 4, 3), (16, 64, 8, 3), (16, 128, 8, 2), (16, 32, 8, 4)]}
    batch, ctx = SWEEP_SHAPE
    for heads, cfgs in shapes.items():
        s = Setup(batch, ctx - 1, 1, heads=heads)
        q_lat = torch.bmm(s.q[..., :NOPE].transpose(0, 1), s.layer.w_kc)
        for bh, bn, w, st in cfgs:
            be = TritonMLABackend(block_h=bh, block_n=bn, num_warps=w, num_stages=st)
            step = be.prepare(s.meta, s.cache)
            fn = lambda: be.attend_latent(q_lat, s.q[..., NOPE:], s.cache.latent[0], s.layer, step)  # noqa: E731
            try:
                t, _ = graph_ms(fn, warmup=3, reps=20, cold_l2=True)
            except Exception as exc:  # noqa: BLE001 - a tile that fails to compile is a result
                rows.append(dict(kind="sweep", heads=heads, cfg=[bh, bn, w, st], error=str(exc)[:200]))
                continue
            flops = 2 * heads * ctx * (2 * L + R) * batch
            rows.append(dict(kind="sweep", heads=heads, cfg=[bh, bn, w, st], core_ms=t,
                             tflops=flops / t / 1e9, gbs=batch * ctx * (L + R) * 2 / t / 1e6))
            print(rows[-1], flush=True)
        del s
        torch.cuda.empty_cache()
    return rows


# (heads, batch, ctx) of the variant comparison, and extra v2 tiles tried at B 128, ctx 4k:
# (block_h, block_n, num_warps, num_stages, v_split). v2's default there is 128 heads, 32
# keys, 8 warps, 3 stages, v_split 2; the extras: 64 heads in one warpgroup; 64 heads,
# 64 keys, two warpgroups; version 1's tile with only the page-local addressing of v2.
# At H 16 (v2 default: v1's 16, 64, 4, 3 tile, page-local): 4 stages; 32 keys x 4 stages
VARIANT_SHAPES = [(128, 128, 4096), (16, 128, 4096), (128, 1, 32768), (16, 1, 32768)]
V2_TILES = {(128, 128, 4096): [(64, 32, 4, 3, 2), (64, 64, 8, 3, 2), (64, 32, 8, 3, 1)],
            (16, 128, 4096): [(16, 64, 4, 4, 1), (16, 32, 4, 4, 1)]}


def variant_rows(args):
    """Kernel-core time of each variant's default tile (and a few v2 tiles at H=128, B=128)."""
    rows = []
    shapes = [(16, 2, 40), (128, 1, 70)] if args.smoke else VARIANT_SHAPES
    for heads, batch, ctx in shapes:
        s = Setup(batch, ctx - 1, 1, heads=heads)
        s.cache.write(0, s.meta.slot_mapping, s.k, None)
        q_lat = torch.bmm(s.q[..., :NOPE].transpose(0, 1), s.layer.w_kc)
        ref = None
        kinds = [("v1", {}), ("v2", {})]
        kinds += [(f"v2 {t}", dict(block_h=t[0], block_n=t[1], num_warps=t[2], num_stages=t[3],
                                   v_split=t[4])) for t in V2_TILES.get((heads, batch, ctx), [])]
        line = []
        for name, opts in kinds:
            be = TritonMLABackend(variant=name.split()[0], **opts)
            step = be.prepare(s.meta, s.cache)
            fn = lambda: be.attend_latent(q_lat, s.q[..., NOPE:], s.cache.latent[0], s.layer, step)  # noqa: E731
            try:
                out = fn()
                ref = out if ref is None else ref          # v1 (measured, tested) is the yardstick
                err = check(out, ref, f"variant {name} H={heads} B={batch} ctx={ctx}")
                t, _ = graph_ms(fn, warmup=3, reps=args.reps, cold_l2=True)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - a failing variant is a result
                rows.append(dict(kind="variant", variant=name, heads=heads, batch=batch, ctx=ctx,
                                 error=str(exc)[:200]))
                line.append(f"{name} FAILED {str(exc)[:80]}")
                continue
            flops = 2 * heads * ctx * (2 * L + R) * batch
            rows.append(dict(kind="variant", variant=name, heads=heads, batch=batch, ctx=ctx,
                             core_ms=t, tflops=flops / t / 1e9,
                             gbs=batch * ctx * (L + R) * 2 / t / 1e6, rel_err_vs_v1=err))
            line.append(f"{name} {t * 1e3:.0f} us {flops / t / 1e9:.0f} TFLOP/s "
                        f"{rows[-1]['gbs']:.0f} GB/s")
        base = next((r["core_ms"] for r in rows if r.get("variant") == "v1" and "core_ms" in r
                     and (r["heads"], r["batch"], r["ctx"]) == (heads, batch, ctx)), None)
        v2 = next((r["core_ms"] for r in rows if r.get("variant") == "v2" and "core_ms" in r
                   and (r["heads"], r["batch"], r["ctx"]) == (heads, batch, ctx)), None)
        ratio = f"v2 speed-up over v1 {base / v2:.2f}x" if base and v2 else "no ratio"
        print(f"VARIANTS H={heads} B={batch} ctx={ctx}: " + " | ".join(line) + f" -> {ratio}",
              flush=True)
        del s
        torch.cuda.empty_cache() if DEV == "cuda" else None
    return rows


def table(rows, ceil):
    out = ["| H | B | ctx | kv | core µs | core TFLOP/s | core GB/s (% copy) | fwd µs | fwd TFLOP/s | "
           "torch bmm µs | SDPA decompr. µs | torch_native µs | bmm/core |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    us = lambda v: "skipped" if v is None else f"{v * 1e3:.0f}"  # noqa: E731
    for r in rows:
        if r["kind"] != "decode":
            continue
        out.append(f"| {r['heads']} | {r['batch']} | {r['ctx']} | {r.get('kv', 'bfloat16')} | {us(r['core_ms'])} | "
                   f"{r['core_tflops']:.0f} | {r['core_gbs']:.0f} ({100 * r['core_gbs'] / ceil['copy_gbs']:.0f}%) | "
                   f"{us(r['fwd_ms'])} | {r['fwd_tflops']:.0f} | {us(r['bmm_ms'])} | "
                   f"{us(r['sdpa_ms'])} | {us(r['native_ms'])} | {r['bmm_ms'] / r['core_ms']:.1f}x |")
    var = [r for r in rows if r["kind"] == "variant"]
    if var:
        out += ["", "| variant (core, L2 flushed) | H | B | ctx | µs | TFLOP/s | GB/s |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {r['variant']} | {r['heads']} | {r['batch']} | {r['ctx']} | "
                + (f"{r['core_ms'] * 1e3:.0f} | {r['tflops']:.0f} | {r['gbs']:.0f} |" if "core_ms" in r
                   else f"failed: {r['error'][:60]} | | |") for r in var]
    sweep = [r for r in rows if r["kind"] == "sweep"]
    if sweep:
        out += ["", f"| tile sweep (core, L2 flushed, B {SWEEP_SHAPE[0]}, ctx {SWEEP_SHAPE[1]}) | H | "
                "BLOCK_H, keys per tile, warps, stages | µs | TFLOP/s | GB/s |", "|---|---|---|---|---|---|"]
        out += [f"| | {r['heads']} | {', '.join(map(str, r['cfg']))} | "
                + (f"{r['core_ms'] * 1e3:.0f} | {r['tflops']:.0f} | {r['gbs']:.0f} |" if "core_ms" in r
                   else f"failed: {r['error'][:60]} | | |") for r in sweep]
    ext = [r for r in rows if r["kind"] == "extend"]
    if ext:
        out += ["", "| extend H | q | prefix | form | ms | TFLOP/s (MHA-form FLOPs) |", "|---|---|---|---|---|---|"]
        out += [f"| {r['heads']} | {r['q']} | {r['prefix']} | {r['form']} | {r['ms']:.2f} | "
                f"{r['mha_tflops']:.0f} |" for r in ext]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="B=128 ctx 4k only, no torch_native")
    ap.add_argument("--sweep", action="store_true", help="also time a few tile shapes")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--fp8", action="store_true", help="also decode over an fp8 e4m3 latent cache")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--render", metavar="JSON", help="print the tables of a bench_mla.json this script wrote")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU + Triton interpreter, tiny shapes: checks the script runs, times nothing real")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            data = json.load(f)
        print(f"{data['env']}\nceilings: {data['ceilings']}\n\n{table(data['rows'], data['ceilings'])}")
        return
    if args.smoke:
        _smoke()
    t0 = time.time()
    env = environment()
    ceil = ceilings()
    print(env, "|", {k: round(v, 1) for k, v in ceil.items()}, flush=True)
    rows = sweep(args) if args.sweep else []
    rows += variant_rows(args)      # first: the comparison the next decision needs
    shapes = [(h, b, c) for h in (16, 128) for b in (1, 32, 128) for c in (1024, 4096, 32768)]
    ext = (2048, 32768)
    if args.quick:
        shapes = [(h, 128, 4096) for h in (16, 128)]
    if args.smoke:
        shapes, ext = [(16, 2, 40), (128, 1, 70)], (5, 40)
    backends = {h: TritonMLABackend(**_planned(h)) for h in (16, 128)}
    for h, b, c in ([] if args.skip_decode else shapes):
        rows.append(decode_row(h, b, c, args, backends[h]))
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in rows[-1].items()}, flush=True)
    if args.fp8:
        for h in (16, 128):
            rows.append(decode_row(h, 2 if args.smoke else 128, 40 if args.smoke else 4096, args,
                                   TritonMLABackend(**_planned(h, kv="fp8_e4m3")),
                                   kv_dtype=torch.float8_e4m3fn))
            print(rows[-1], flush=True)
    for h in (128, 16):
        rows += extend_rows(h, *ext, args)
        print(rows[-3:], flush=True)
    md = table(rows, ceil)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_mla.json"), "w") as f:
        json.dump(dict(env=env, ceilings=ceil, rows=rows, seconds=time.time() - t0), f, indent=1)
    with open(os.path.join(args.out, "bench_mla.md"), "w") as f:
        f.write(f"{env}\nceilings: {ceil}\n\n{md}\n")
    print(f"\n{env}\nceilings: copy {ceil['copy_gbs']:.0f} GB/s, bf16 matmul "
          f"{ceil['matmul_tflops']:.0f} TFLOP/s; {time.time() - t0:.0f} s\n\n{md}")


def _smoke():
    """Swap in CPU stand-ins for the CUDA-only helpers (tiny shapes, wall-clock timing)."""
    global DEV, DT, ceilings, time_ms, SWEEP_SHAPE
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("--smoke needs TRITON_INTERPRET=1 set before python starts")
    DEV, DT = "cpu", torch.float16
    ceilings = lambda: {"copy_gbs": 1.0, "matmul_tflops": 1.0}  # noqa: E731

    def time_ms(fn, **_):
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    SWEEP_SHAPE = (2, 40)


if __name__ == "__main__":
    main()
