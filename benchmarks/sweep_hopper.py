"""Issue 17's sweep: the Hopper kernel variants against the existing kernels and the peers,
checked first, then timed in one run on one GPU by one method (common.time_ms: warm-up,
median of 20, L2 flushed; attnkit rows are CUDA-graph replays of ``backend.forward``, peers
run on contiguous K/V).

    PYTHONPATH=src python3 benchmarks/sweep_hopper.py --only SECTION[,SECTION] [--out DIR]

Sections (SECTIONS below): prefill 16k at d128 / d64 / d256 with the tensor-descriptor
kernel ("tma") at several tiles, each default tile also with FUSED_SCALE (one multiply-add a
logit; NOTES-hopper.md version 2); extend 2048 over a 32k prefix (with FlexAttention) and
over 8k; decode B=1 (ctx 4k, 32k) and B=16 / 64 with the in-kernel merge ("fused") and split
counts; MLA decode (v2 vs tma); a race check of the fused merge (bitwise-stable outputs).
Run each section in its own process (see run_sweep_hopper.sh): rows are merged into
$OUT/sweep_hopper.json as they come, and a watchdog ends a process whose kernel stops
making progress (a hung launch cannot be interrupted otherwise), recording where.
Warp-specialised variants run last in each section: the first GPU run of this script hung
in one (a host descriptor whose box Triton 3.6 did not split with the tile; fixed since).

Correctness: every attnkit variant is compared with a float32 reference (SDPA's efficient
kernel on float32 inputs, K/V repeated per query head; MLA: the torch-bmm peer), its output
buffer poisoned with NaN first; a row that fails is reported, not timed.
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
from torch.nn.attention.bias import causal_lower_right

sys.path.insert(0, os.path.dirname(__file__))
import bench_mla  # noqa: E402
from bench_triton import Setup, flex_peer, rel_err, sdpa_peer  # noqa: E402
from common import ceilings, environment, graphed, time_ms  # noqa: E402

from attnkit.backends.triton.backend import TritonBackend  # noqa: E402
from attnkit.backends.triton_mla.backend import TritonMLABackend  # noqa: E402

START = time.time()
ROWS: list[dict] = []
OUT = "."
TOL = 2e-2          # relative L2 error of a bf16 kernel against the float32 reference

# (label, TritonBackend options) per prefill head dim; the first of each list is the
# tma_path Triton tile, the second the same tile with FUSED_SCALE (NOTES-hopper.md version 2),
# the third GLUON (prefill_gluon.py: tma_config's default at d128 / d256). T() sets GLUON=False:
# extend_config is merged over tma_config's defaults. WS = Triton's warp specialisation.
T = lambda bm, bn, ws, w, s: dict(BLOCK_M=bm, BLOCK_N=bn, WS=ws, GLUON=False, num_warps=w,  # noqa: E731
                                  num_stages=s)
FUSED = lambda cfg: dict(cfg, FUSED_SCALE=True)  # noqa: E731
GLUON = lambda cfg: dict(cfg, GLUON=True)  # noqa: E731  prefill_gluon.py (one request, causal)
TMA = {
    128: [T(128, 64, False, 8, 3), FUSED(T(128, 64, False, 8, 3)), GLUON(T(128, 64, False, 8, 3)),
          T(128, 128, False, 8, 2),
          T(128, 128, True, 4, 2), T(128, 64, True, 4, 2)],
    64: [T(128, 64, False, 8, 3), FUSED(T(128, 64, False, 8, 3)), GLUON(T(128, 64, False, 8, 3)),
         FUSED(T(128, 128, False, 8, 3)),
         FUSED(T(64, 128, False, 4, 3)), T(128, 128, False, 8, 2), T(128, 128, True, 4, 2)],
    256: [T(128, 64, False, 8, 2), FUSED(T(128, 64, False, 8, 2)), GLUON(T(128, 64, False, 8, 2)),
          T(64, 64, False, 4, 2),
          T(128, 32, False, 8, 3), T(128, 32, True, 4, 2)],
}
# extend: the default, it with FUSED_SCALE, and two warp-specialised tiles. Warp-specialised
# tiles at 3 stages returned NaN on 2026-12-01 and the backend refuses them (AK407): not here.
EXTEND_TMA = TMA[128][:2] + [T(128, 128, True, 4, 2), T(128, 64, True, 4, 2)]


def _path():
    return os.path.join(OUT, "sweep_hopper.json")


def load_previous() -> dict:
    """Rows and ceilings of the sections that ran before in earlier processes."""
    try:
        with open(_path()) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def save():
    data = dict(PREVIOUS, environment=ENV, ceilings=CEIL)
    data["rows"] = PREVIOUS.get("rows", []) + ROWS
    data["wall_s"] = PREVIOUS.get("wall_s", 0.0) + time.time() - START
    with open(_path() + ".tmp", "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(_path() + ".tmp", _path())


LAST = {"t": time.time(), "who": "start"}


def emit(row):
    ROWS.append(row)
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}),
          flush=True)
    save()
    LAST.update(t=time.time(), who=f"{row.get('section')} / {row.get('who')}")


def note(who):
    """Mark what is about to run, for the watchdog's record."""
    LAST.update(who=who)


def watchdog(stall_s: float):
    """End the process if nothing was emitted for stall_s seconds (a hung kernel)."""
    import threading

    def run():
        while True:
            time.sleep(2)
            if time.time() - LAST["t"] > stall_s:
                ROWS.append(dict(section=LAST.get("section"), who=LAST["who"],
                                 result=f"STALLED: no progress for {stall_s:.0f} s; process ended"))
                save()
                print(f"WATCHDOG: stalled at {LAST['who']}", flush=True)
                os._exit(3)
    threading.Thread(target=run, daemon=True).start()


def timed_ms(fn, *, graph=True):
    run, why = graphed(fn) if graph else (fn, "eager")
    return time_ms(run, warmup=3, reps=20, cold_l2=True), why or ("graph" if graph else "eager")


def poisoned(fn, shape, dtype):
    """Run fn once with the allocator's next block of ``shape`` pre-filled with NaN, so an
    output element the kernel never writes shows as NaN."""
    junk = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    del junk
    return fn()


def reference(s, causal):
    """float32 attention over the gathered K/V (after the step's write): [B*new, H*D]."""
    k, v = s.gather()
    q = s.q_bhsd().float()
    g = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(g, dim=1)
    v = v.float().repeat_interleave(g, dim=1)
    mask = causal_lower_right(s.new, s.prefix + s.new) if causal and s.prefix else None
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and not s.prefix)
    return o.transpose(1, 2).reshape(s.batch * s.new, -1)


def checked_row(make, ref, units, **info):
    """make() -> (first(): the output as ref's shape, fn: what to time). A row whose output is
    off the reference (or that raises) is reported, not timed."""
    note(f"{info.get('section')} / {info.get('who')}")
    row = dict(info)
    try:
        first, fn = make()
        err = rel_err(first(), ref)
        row["rel_err"] = err
        if not err < TOL:
            row["result"] = f"WRONG (rel err {err:.3g})"
        else:
            ms, how = timed_ms(fn)
            row.update(ms=ms, rate=units(ms), timing=how)
    except Exception as exc:  # noqa: BLE001 - a variant that fails is reported, not fatal
        torch.cuda.synchronize()
        row["result"] = f"FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    emit(row)
    return row


def attnkit_row(s, backend, ref, units, **info):
    """backend.forward on setup s; its output buffer starts as NaN (poisoned)."""
    def make():
        step = backend.prepare(s.meta, s.cache)
        fwd = lambda: backend.forward(s.q, s.k, s.v, s.layer, s.cache, step)  # noqa: E731
        shape = (s.q.shape[0], s.spec.num_heads * s.spec.value_dim)
        return (lambda: poisoned(fwd, shape, s.q.dtype).view(ref.shape)), fwd
    return checked_row(make, ref, units, **info)


def peer_row(make_fn, ref, units, **info):
    """make_fn() -> fn; fn() -> [B, H, S, D]. An SDPA kernel with no GQA path for the call is
    retried by the caller with K/V repeated (noted)."""
    def make():
        fn = make_fn()
        return (lambda: fn().transpose(1, 2).reshape(ref.shape)), fn
    return checked_row(make, ref, units, **info)


def attention_section(args, name, setup_kw, variants, peers, flex=False):
    """One extend / prefill shape: reference, then the attnkit variants without warp
    specialisation, the peers (FlexAttention too if asked), and last the warp-specialised
    variants (the kind that hung once)."""
    s = Setup(**setup_kw)
    flops = 4 * s.spec.head_dim * s.spec.num_heads * s.batch * (
        s.new * s.prefix + s.new * (s.new + 1) / 2)
    units = lambda ms: flops / ms / 1e9  # noqa: E731
    # the reference needs this step's K/V in the cache: one forward of the v1 kernel
    base = TritonBackend(extend_variant="v1")
    base.forward(s.q, s.k, s.v, s.layer, s.cache, base.prepare(s.meta, s.cache))
    note(f"{name} / float32 reference")
    ref = reference(s, True)
    info = dict(section=name, unit="TFLOP/s", flops=flops)
    is_ws = lambda opts: (opts.get("extend_config") or {}).get("WS", False)  # noqa: E731
    for label, opts in [v for v in variants if not is_ws(v[1])]:
        attnkit_row(s, TritonBackend(**opts), ref, units, who=f"attnkit {label}", **info)
    k_c, v_c = s.gather()
    q = s.q_bhsd()
    mask = causal_lower_right(s.new, s.prefix + s.new) if s.prefix else None
    sdpa_rows(peers, s, q, k_c, v_c, mask, not s.prefix, ref, units, info)
    if flex:
        LAST["t"] = time.time() + 120            # its compile takes a while: give it room
        peer_row(lambda: flex_peer(q, k_c, v_c, s.prefix, True), ref, units, who="flex", **info)
    for label, opts in [v for v in variants if is_ws(v[1])]:
        attnkit_row(s, TritonBackend(**opts), ref, units, who=f"attnkit {label}", **info)
    del s
    torch.cuda.empty_cache()


def sdpa_rows(peers, s, q, k_c, v_c, mask, is_causal, ref, units, info):
    for pname, kernel in peers:
        if kernel is None:      # gather the pages inside the timing, then SDPA's own choice
            make = lambda: (lambda: sdpa_peer(None, q, *s.gather(), mask, is_causal)())  # noqa: E731
        else:
            make = lambda: sdpa_peer(kernel, q, k_c, v_c, mask, is_causal)  # noqa: E731
        row = peer_row(make, ref, units, who=pname, **info)
        if "FAILED" in row.get("result", "") and kernel is not None:
            peer_row(lambda: sdpa_peer(kernel, q, k_c, v_c, mask, is_causal, expand=True), ref,
                     units, who=f"{pname} (K/V repeated: no GQA path)", **info)


SDPA_PEERS = [("sdpa cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa flash", SDPBackend.FLASH_ATTENTION)]


def prefill(args, dim):
    heads = 16 if dim == 256 else 32
    variants = [("v2 (default before)", dict(extend_variant="v2"))]
    variants += [(f"tma {c}", dict(extend_variant="tma", extend_config=c)) for c in TMA[dim]]
    attention_section(args, f"prefill 16k d{dim}",
                      dict(batch=1, prefix=0, new=16384, heads=heads, dim=dim), variants, SDPA_PEERS)


def extend(args, prefix):
    variants = [("v1 (default before)", dict(extend_variant="v1"))]
    variants += [(f"tma {c}", dict(extend_variant="tma", extend_config=c)) for c in EXTEND_TMA]
    attention_section(args, f"extend 2048 over {prefix // 1024}k d128",
                      dict(batch=1, prefix=prefix, new=2048, heads=32, dim=128),
                      variants, SDPA_PEERS + [("gather+sdpa", None)], flex=prefix == 32768)


# prefill_gluon.py's tiles measured directly ((BN, K slots, V slots)); the first of each list is
# its TILES entry. (Version 5's second form, "wide", one 8-warp partition, left the code in
# version 7: benchmarks/results/sweep_hopper_gluon_v6.md, NOTES-hopper.md.)
GLUON_VARIANTS = {
    128: [(128, 4, 2), (128, 3, 3), (64, 6, 6)],
    256: [(64, 2, 2), (64, 3, 2), (32, 5, 5)],
    64: [(128, 4, 4), (128, 6, 6), (64, 8, 8)],
}


def gluon_variants(args, dim):
    """prefill_gluon_attention called directly (the direct route's own arguments) for each of
    GLUON_VARIANTS[dim], with the shipped Triton tile and cuDNN in the same process."""
    from attnkit.backends.triton.prefill_gluon import prefill_gluon_attention
    from attnkit.backends._triton import kernel_scales
    heads = 16 if dim == 256 else 32
    s = Setup(batch=1, prefix=0, new=16384, heads=heads, dim=dim)
    flops = 4 * dim * heads * 16384 * 16385 / 2
    units = lambda ms: flops / ms / 1e9  # noqa: E731
    base = TritonBackend(extend_variant="v1")
    base.forward(s.q, s.k, s.v, s.layer, s.cache, base.prepare(s.meta, s.cache))
    ref = reference(s, True)
    info = dict(section=f"gluon variants d{dim}", unit="TFLOP/s", flops=flops)
    qk_scale, _, v_scale = kernel_scales(s.layer, s.cache, None)
    for tiles in GLUON_VARIANTS[dim]:
        def make(tiles=tiles):
            out = torch.empty_like(s.q)
            fn = lambda: prefill_gluon_attention(s.q, s.k, s.v, out, qk_scale=qk_scale,  # noqa: E731
                                                 v_scale=v_scale, tiles=tiles)
            return (lambda: poisoned(fn, tuple(s.q.shape), s.q.dtype).reshape(ref.shape)), fn
        checked_row(make, ref, units, who=f"gluon {tiles}", **info)
    for label, cfg in (("default", {}), ("Triton tile", dict(GLUON=False))):
        attnkit_row(s, TritonBackend(extend_variant="tma", extend_config=cfg), ref, units,
                    who=f"attnkit tma ({label})", **info)
    k_c, v_c = s.gather()
    sdpa_rows(SDPA_PEERS[:1], s, s.q_bhsd(), k_c, v_c, None, True, ref, units, info)
    del s
    torch.cuda.empty_cache()


def decode(args):
    shapes = [(1, 4096, (None, 32, 64)), (1, 32768, (None, 48, 64)), (16, 4096, (None,)),
              (64, 4096, (None,))]
    for batch, ctx, splits in shapes:
        s = Setup(batch, ctx - 1, 1)
        nbytes = 2 * batch * ctx * 8 * 128 * 2
        units = lambda ms: nbytes / ms / 1e6  # noqa: E731
        base = TritonBackend(decode_variant="v1")
        base.forward(s.q, s.k, s.v, s.layer, s.cache, base.prepare(s.meta, s.cache))
        ref = reference(s, False)
        info = dict(section=f"decode B={batch} ctx={ctx // 1024}k d128", unit="GB/s", bytes=nbytes)
        variants = [("auto (default before)", dict())]
        for n in splits:
            for var in ("v2", "fused") if batch <= 16 else ("v1", "fused"):
                variants.append((f"{var} splits={n or 'heuristic'}",
                                 dict(decode_variant=var, num_splits=n)))
        for label, opts in variants:
            attnkit_row(s, TritonBackend(**opts), ref, units, who=f"attnkit {label}", **info)
        k_c, v_c = s.gather()
        sdpa_rows(SDPA_PEERS, s, s.q_bhsd(), k_c, v_c, None, False, ref, units, info)
        del s
        torch.cuda.empty_cache()


def race_check(args):
    """The fused merge picks its merging program at run time: replay one step 200 times and
    require bitwise-identical outputs (the merge sums the splits in a fixed order)."""
    for batch, ctx, splits in ((1, 4096, 32), (4, 32768, 64)):
        note(f"race check B={batch} ctx={ctx}")
        s = Setup(batch, ctx - 1, 1)
        be = TritonBackend(decode_variant="fused", num_splits=splits)
        step = be.prepare(s.meta, s.cache)
        fwd = lambda: be.forward(s.q, s.k, s.v, s.layer, s.cache, step)  # noqa: E731
        first = fwd().clone()
        run, _ = graphed(fwd)
        for _ in range(200):
            run()
        torch.cuda.synchronize()
        outs = []
        g_out = fwd()
        for _ in range(50):
            outs.append(fwd().clone())
        bad = sum(int(not o.equal(first)) for o in outs) + int(not g_out.equal(first))
        emit(dict(section="race check (fused decode)", who=f"B={batch} ctx={ctx} splits={splits}",
                  result="stable" if bad == 0 else f"UNSTABLE: {bad} of 51 outputs differ",
                  counters_zero=int(step.prepared.counters.abs().sum()) == 0))
        del s
        torch.cuda.empty_cache()


def mla(args):
    # v1 at 64-key tiles: 64 heads a program on two warpgroups, 254-255 registers, no spills
    # (Triton 3.6, sm_90); both warpgroups compute the whole Q.K tile (NOTES-mla.md, version 4)
    mla_variants = {128: [("v2", dict(variant="v2")), ("v2 2 stages", dict(variant="v2", num_stages=2)),
                          ("tma", dict(variant="tma")),
                          ("v1 64 keys 2 stages", dict(variant="v1", block_n=64, num_stages=2)),
                          ("v1 64 keys 3 stages", dict(variant="v1", block_n=64, num_stages=3)),
                          ("auto (default)", dict()),       # auto -> v1, V1_WIDE_TILE_SM90
                          # Gluon, warp-specialised (decode_gluon.py): last, a hang costs one row
                          ("ws (Gluon)", dict(variant="ws"))],
                    16: [("v2", dict(variant="v2")), ("auto (default)", dict())]}
    for heads, variants in sorted(mla_variants.items()):     # 16 heads first: a hang later costs less
        s = bench_mla.Setup(128, 4095, 1, heads=heads)
        first = TritonMLABackend(variant="v2")     # writes the step's latent row into the cache
        first.forward(s.q, s.k, None, s.layer, s.cache, first.prepare(s.meta, s.cache))
        ref = bench_mla.torch_bmm_decode(s).float()
        flops = 2 * heads * 4096 * (512 + 64 + 512) * 128
        nbytes = 128 * 4096 * 576 * 2
        for var, opts in variants:
            note(f"MLA H={heads} / {var}")
            LAST["t"] = time.time() + 30         # a first compile of a new variant: room
            row = dict(section=f"MLA decode H={heads} B=128 ctx=4k", who=f"attnkit {var}",
                       unit="TFLOP/s (core)", flops=flops, bytes=nbytes)
            try:
                be = TritonMLABackend(**opts)
                step = be.prepare(s.meta, s.cache)
                out = be.forward(s.q, s.k, None, s.layer, s.cache, step)
                err = rel_err(out, ref)
                row["rel_err"] = err
                if err < TOL:
                    q_lat = torch.bmm(s.q[..., :128].transpose(0, 1), s.layer.w_kc)
                    q_pe = s.q[..., 128:]
                    core = lambda: be.attend_latent(q_lat, q_pe, s.cache.latent[0], s.layer, step)  # noqa: E731
                    ms, how = timed_ms(core)
                    row.update(ms=ms, rate=flops / ms / 1e9, gbs=nbytes / ms / 1e6, timing=how)
                    fwd_ms, _ = timed_ms(lambda: be.forward(s.q, s.k, None, s.layer, s.cache, step))
                    row.update(fwd_ms=fwd_ms, fwd_tflops=flops / fwd_ms / 1e9)
                else:
                    row["result"] = f"WRONG (rel err {err:.3g})"
            except Exception as exc:  # noqa: BLE001
                torch.cuda.synchronize()
                row["result"] = f"FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            emit(row)
        del s
        torch.cuda.empty_cache()


def table():
    lines = ["| section | variant / peer | rate | unit | ms | rel err | note |",
             "|---|---|---:|---|---:|---:|---|"]
    for r in ROWS:
        rate = f"{r['rate']:.0f}" if isinstance(r.get("rate"), float) else ""
        ms = f"{r['ms']:.4f}" if isinstance(r.get("ms"), float) else ""
        err = f"{r['rel_err']:.2e}" if isinstance(r.get("rel_err"), float) else ""
        note = r.get("result", r.get("timing", ""))
        extra = f" (fwd {r['fwd_tflops']:.0f}; {r['gbs']:.0f} GB/s)" if "fwd_tflops" in r else ""
        lines.append(f"| {r.get('section')} | {r.get('who')} | {rate}{extra} | {r.get('unit', '')} "
                     f"| {ms} | {err} | {note} |")
    return "\n".join(lines)


SECTIONS = {"prefill128": lambda a: prefill(a, 128), "prefill64": lambda a: prefill(a, 64),
            "prefill256": lambda a: prefill(a, 256), "extend32k": lambda a: extend(a, 32768),
            "extend8k": lambda a: extend(a, 8192), "decode": decode, "mla": mla,
            "race": race_check, "gluon128": lambda a: gluon_variants(a, 128),
            "gluon256": lambda a: gluon_variants(a, 256), "gluon64": lambda a: gluon_variants(a, 64)}


def main():
    global OUT, ENV, CEIL, PREVIOUS
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--only", default=",".join(SECTIONS))
    ap.add_argument("--stall-s", type=float, default=60.0,
                    help="end the process after this long with no row (a hung kernel)")
    ap.add_argument("--table", action="store_true", help="only print the merged table")
    args = ap.parse_args()
    OUT = args.out
    os.makedirs(OUT, exist_ok=True)
    PREVIOUS = load_previous()
    if args.table:
        ROWS.extend(PREVIOUS.pop("rows", []))
        ENV, CEIL = PREVIOUS.get("environment", ""), PREVIOUS.get("ceilings", {})
        md = (f"{ENV}\nceilings: {json.dumps(CEIL)}; wall {PREVIOUS.get('wall_s', 0):.0f} s\n\n"
              + table())
        with open(os.path.join(OUT, "sweep_hopper.md"), "w") as f:
            f.write(md + "\n")
        print(md, flush=True)
        return
    torch.manual_seed(0)
    ENV = environment()
    CEIL = PREVIOUS.get("ceilings") or ceilings()     # measured once, by the first process
    print(ENV, json.dumps(CEIL), flush=True)
    watchdog(args.stall_s)
    for name in args.only.split(","):
        LAST.update(t=time.time(), section=name)
        t0 = time.time()
        try:
            SECTIONS[name](args)
        except Exception as exc:  # noqa: BLE001 - the next section still runs
            torch.cuda.synchronize()
            emit(dict(section=name, who=LAST["who"],
                      result=f"SECTION FAILED {type(exc).__name__}: {exc}"[:300]))
        print(f"== {name}: {time.time() - t0:.0f} s", flush=True)
    save()


ENV, CEIL, PREVIOUS = "", {}, {}
if __name__ == "__main__":
    main()
