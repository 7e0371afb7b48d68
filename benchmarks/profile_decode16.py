"""Issue 28's B=16 decode rows (d128, 32 / 8 heads, bf16, page 16): where the time goes, in one
process per part, on one GPU (benchmarks/gpu_decode16.sh runs every part).

    PYTHONPATH=src python3 benchmarks/profile_decode16.py --part kernels  [--rows R,..] [--out DIR]
    PYTHONPATH=src python3 benchmarks/profile_decode16.py --part ceilings [--rows R,..] [--out DIR]
    ncu ... python3 benchmarks/profile_decode16.py --part ncu [--rows R,..] [--out DIR]
    python3 benchmarks/profile_decode16.py --part ncu-table --csv FILE [--out DIR]

kernels   torch.profiler over 5 eager calls each of the plan's decode (TritonBackend with the
          plan's kernel tables, as bench_triton runs it) and of cuDNN / flash SDPA: every kernel
          a call launches, its device time; -> profile16_kernels.{json,md}, calls16.json
          (kernels per call, which the ncu table uses to name the launches it profiled).
ceilings  per row, the read-only probes of read_probe.py (each checked against its torch
          reference first; unpipelined, so patterns compared, not ceilings: NOTES-triton.md
          version 6) next to the plan's decode and cuDNN, timed alike (bench_triton's
          ``timed``: CUDA-graph replay, L2 flushed, median of 20) -> profile16_ceilings.{json,md}.
ncu       one launch each of the plan, cuDNN, variant split_heads (decode_heads.py) and two
          probes per row inside
          cudaProfilerStart / Stop (run under ``ncu --profile-from-start off``); writes
          ncu16_order.json.
ncu-table the ncu raw CSV -> ncu16.{json,md}: per kernel time, DRAM bytes and throughput, grid,
          registers, waves, achieved occupancy and the largest stall reasons.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.nn.attention import SDPBackend  # noqa: E402

ROWS = {"b16-1k": (16, 1024), "b16-4k": (16, 4096), "b16-32k": (16, 32768), "b64-4k": (64, 4096)}
PEERS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def row_setup(row: str):
    """(setup, nbytes, plan forward, plan splits, reference [B, H, 1, D], q, k, v) of a row."""
    from bench_triton import Setup, _planned, sdpa_peer

    from attnkit.backends.triton.backend import TritonBackend

    batch, ctx = ROWS[row]
    s = Setup(batch, ctx - 1, 1, heads=32, dim=128)
    nbytes = 2 * batch * ctx * 8 * 128 * 2
    be = TritonBackend(**_planned(32, 128))
    step = be.prepare(s.meta, s.cache)
    fwd = lambda: be.forward(s.q, s.k, s.v, s.layer, s.cache, step)  # noqa: E731
    out = fwd()                                         # the step's K/V written: the peers see it
    k_c, v_c = s.gather()
    q = s.q_bhsd()
    ref = sdpa_peer(None, q, k_c, v_c, None, False)()
    splits = sorted({n for n, _ in step.prepared.splits.values()}) or [1]
    info = dict(variants=list(step.prepared.variants), splits=splits,
                err=_rel(out.reshape(batch, -1), ref.transpose(1, 2).reshape(batch, -1)))
    return s, nbytes, fwd, info, ref, q, k_c, v_c


def _rel(a, b):
    a, b = a.float().reshape(-1), b.float().reshape(-1)
    return ((a - b).norm() / b.norm()).item()


def peer(kind, q, k_c, v_c):
    from bench_triton import sdpa_peer
    return sdpa_peer(PEERS[kind], q, k_c, v_c, None, False)


def kernels_part(rows, out_dir):
    from torch.profiler import ProfilerActivity, profile
    result, counts = {}, {}
    for row in rows:
        s, nbytes, fwd, info, ref, q, k_c, v_c = row_setup(row)
        calls = {"plan": fwd} | {k: peer(k, q, k_c, v_c) for k in PEERS}
        result[row] = dict(plan=info, calls={})
        for who, fn in calls.items():
            try:
                fn(), fn()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        fn()
                    torch.cuda.synchronize()
                per = defaultdict(lambda: [0, 0.0])
                for e in prof.events():
                    if e.device_type == torch.autograd.DeviceType.CUDA:
                        per[e.name][0] += 1
                        per[e.name][1] += e.device_time_total
                listed = [dict(kernel=n[:90], per_call=c / 5, us=round(t / c, 2)) for n, (c, t) in per.items()]
                result[row]["calls"][who] = listed
                counts[f"{row}:{who}"] = round(sum(k["per_call"] for k in listed   # ncu: kernels only
                                                   if not k["kernel"].startswith(("Memset", "Memcpy"))))
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported
                result[row]["calls"][who] = f"n/a ({type(exc).__name__}: {str(exc)[:100]})"
        print(json.dumps({row: result[row]}, default=str), flush=True)
        del s
        torch.cuda.empty_cache()
    json.dump(result, open(os.path.join(out_dir, "profile16_kernels.json"), "w"), indent=1)
    json.dump(counts, open(os.path.join(out_dir, "calls16.json"), "w"), indent=1)
    lines = ["| row | who | kernel | per call | us |", "|---|---|---|---:|---:|"]
    for row, r in result.items():
        for who, listed in r["calls"].items():
            for k in listed if isinstance(listed, list) else [dict(kernel=listed, per_call="", us="")]:
                lines.append(f"| {row} | {who} | {k['kernel']} | {k['per_call']} | {k['us']} |")
    open(os.path.join(out_dir, "profile16_kernels.md"), "w").write("\n".join(lines) + "\n")


def probes(s, ctx, plan_splits):
    """[(label, make, heads, chunk)] of the read-only probes for one row."""
    import read_probe as rp
    k, v = s.cache.k[0], s.cache.v[0]
    bt = s.table.to(torch.int32).contiguous()              # the step's block tables
    pages = s.table.shape[1]
    ident = torch.arange(s.batch * pages, device="cuda", dtype=torch.int32).view(s.batch, pages)
    k_c, v_c = (t.transpose(1, 2).contiguous().view(s.batch * pages, s.page, 8, 128) for t in s.gather())
    n = plan_splits
    out = []
    for label, kc, vc, table, heads, splits, cfg in (
            ("paged h1 (64,4,4)", k, v, bt, 1, n, (64, 4, 4)),
            ("paged h1 (64,4,4) heads fastest", k, v, bt, -1, n, (64, 4, 4)),
            ("paged h1 (32,4,5)", k, v, bt, 1, n, (32, 4, 5)),
            ("paged h1 (64,4,4) 4x splits", k, v, bt, 1, 4 * n, (64, 4, 4)),
            ("cuDNN layout h1 (64,4,4)", k_c, v_c, ident, 1, n, (64, 4, 4)),
            ("cuDNN layout h1 (32,4,5)", k_c, v_c, ident, 1, n, (32, 4, 5)),
            ("paged h2 (32,4,5) 2x splits", k, v, bt, 2, 2 * n, (32, 4, 5)),
            ("paged h4 (16,4,5) 4x splits", k, v, bt, 4, 4 * n, (16, 4, 5)),
            ("paged h8 (16,4,4) 8x splits", k, v, bt, 8, 8 * n, (16, 4, 4)),
            ("paged h8 (16,8,3) 8x splits", k, v, bt, 8, 8 * n, (16, 8, 3))):
        bn, w, st = cfg
        make = lambda kc=kc, vc=vc, table=table, heads=heads, splits=splits, bn=bn, w=w, st=st: rp.read_paged(  # noqa: E731
            kc, vc, table, ctx, splits=splits, heads=abs(heads), block_n=bn, num_warps=w,
            num_stages=st, heads_fastest=heads < 0)
        out.append((label, make, kc, vc, table, abs(heads), rp.split_chunk(ctx, splits, bn)))
    for st in (4, 8):
        make = lambda st=st: rp.read_pages_tma(k, v, bt, ctx, splits=n, num_stages=st)  # noqa: E731
        out.append((f"paged TMA per page, {st} stages", make, k, v, bt, 1, rp.split_chunk(ctx, n, s.page)))
    return out


def warm_part(rows, out_dir):
    """Every probe, the plan and the peers once, untimed (Triton's on-disk cache)."""
    for row in rows:
        batch, ctx = ROWS[row]
        s, nbytes, fwd, info, ref, q, k_c, v_c = row_setup(row)
        for kind in PEERS:
            peer(kind, q, k_c, v_c)()
        for label, make, *_ in probes(s, ctx, info["splits"][-1]):
            try:
                make()[0]()
            except Exception as exc:  # noqa: BLE001 - reported by the timed part
                print(row, label, type(exc).__name__, str(exc)[:200], flush=True)
        del s
        torch.cuda.empty_cache()


def ceilings_part(rows, out_dir):
    import read_probe as rp
    from bench_triton import timed
    from common import environment
    result = {"environment": environment(), "rows": {}}
    for row in rows:
        batch, ctx = ROWS[row]
        s, nbytes, fwd, info, ref, q, k_c, v_c = row_setup(row)
        gbs = lambda ms: round(nbytes / ms / 1e6, 1)  # noqa: E731
        r = dict(plan=info | {"gbs": gbs(timed(fwd)[0])}, probes={})
        for kind in PEERS:
            try:
                fn = peer(kind, q, k_c, v_c)
                r[kind] = gbs(timed(fn)[0]) if _rel(fn(), ref) < 2e-2 else "n/a (disagrees)"
            except Exception as exc:  # noqa: BLE001
                r[kind] = f"n/a ({type(exc).__name__})"
        for label, make, kc, vc, table, heads, chunk in probes(s, ctx, info["splits"][-1]):
            try:
                run, _ = make()
                err = _rel(run(), rp.reference(kc, vc, table, ctx, heads=heads, chunk=chunk))
                r["probes"][label] = gbs(timed(run)[0]) if err < 1e-4 else f"n/a (wrong: {err:.2g})"
            except Exception as exc:  # noqa: BLE001 - one probe failing must not stop the others
                torch.cuda.synchronize()
                r["probes"][label] = f"n/a ({type(exc).__name__}: {str(exc).splitlines()[0][:90] if str(exc) else ''})"
            print(row, label, r["probes"][label], flush=True)
        result["rows"][row] = r
        json.dump(result, open(os.path.join(out_dir, "profile16_ceilings.json"), "w"), indent=1)
        del s
        torch.cuda.empty_cache()
    lines = [result["environment"], "", "| row | plan (splits) | cuDNN | flash | probe | GB/s | probe / plan |",
             "|---|---|---:|---:|---|---:|---:|"]
    for row, r in result["rows"].items():
        p = r["plan"]["gbs"]
        for label, g in r["probes"].items():
            ratio = f"{g / p:.2f}" if isinstance(g, float) else ""
            lines.append(f"| {row} | {p} {r['plan']['variants'][:1]} {r['plan']['splits']} | {r.get('cudnn')} "
                         f"| {r.get('flash')} | {label} | {g} | {ratio} |")
    open(os.path.join(out_dir, "profile16_ceilings.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


def ncu_part(rows, out_dir):
    order = []
    for row in rows:
        batch, ctx = ROWS[row]
        s, nbytes, fwd, info, ref, q, k_c, v_c = row_setup(row)
        calls = [("plan", fwd), ("cudnn", peer("cudnn", q, k_c, v_c))]
        try:                                  # variant split_heads at its rule and tile
            from attnkit.backends.triton.backend import TritonBackend
            heads = TritonBackend(decode_variant="split_heads")
            hstep = heads.prepare(s.meta, s.cache)
            calls.append(("split_heads", lambda: heads.forward(s.q, s.k, s.v, s.layer, s.cache, hstep)))
        except Exception as exc:  # noqa: BLE001 - the profile of the others still runs
            print("split_heads:", type(exc).__name__, str(exc)[:200], flush=True)
        for label, make, *_ in probes(s, ctx, info["splits"][-1]):
            if label in ("paged h1 (64,4,4)", "cuDNN layout h1 (64,4,4)"):
                calls.append((label, make()[0]))
        for _, fn in calls:                   # compile and plan outside the profiled range
            fn(), fn()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for who, fn in calls:
            fn()
            torch.cuda.synchronize()
            order.append(dict(row=row, who=who, bytes=nbytes))
        torch.cuda.cudart().cudaProfilerStop()
        del s, calls
        torch.cuda.empty_cache()
    json.dump(order, open(os.path.join(out_dir, "ncu16_order.json"), "w"), indent=1)


SCALE = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "nsecond": 1e-3, "usecond": 1.0,
         "msecond": 1e3, "ns": 1e-3, "us": 1.0, "ms": 1e3}
COLUMNS = {"us": "gpu__time_duration.sum", "dram_read_MB": "dram__bytes_read.sum",
           "dram_write_MB": "dram__bytes_write.sum",
           "dram_pct": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                        "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
           "mem_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
           "grid": "launch__grid_size", "block": "launch__block_size",
           "regs": "launch__registers_per_thread", "waves": "launch__waves_per_multiprocessor",
           "occ_limit_regs": "launch__occupancy_limit_registers",
           "achieved_occ_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
           "issue_active_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active"}


def ncu_table(csv_path, out_dir):
    from ncu_table import STALL, number, rows as ncu_rows
    order = json.load(open(os.path.join(out_dir, "ncu16_order.json"))) if os.path.exists(
        os.path.join(out_dir, "ncu16_order.json")) else []
    counts = json.load(open(os.path.join(out_dir, "calls16.json"))) if os.path.exists(
        os.path.join(out_dir, "calls16.json")) else {}
    labels = []                                 # one label per profiled kernel, in launch order
    for o in order:
        n = counts.get(f"{o['row']}:{o['who']}", 1)
        labels += [f"{o['row']} {o['who']}" + (f" #{i + 1}" if n > 1 else "") for i in range(n)]
    out = []
    for i, k in enumerate(ncu_rows(csv_path)):
        rec = dict(label=labels[i] if i < len(labels) else "?", kernel=k["Kernel Name"][0][:50])
        for col, names in COLUMNS.items():
            metric = next((m for m in ((names,) if isinstance(names, str) else names) if m in k), None)
            if metric is not None:
                val, unit = k[metric]
                x = number(val)
                if x is not None and unit in SCALE:
                    x = x * SCALE[unit] / (1e6 if col.endswith("_MB") else 1)
                rec[col] = round(x, 2) if isinstance(x, float) else x
        stalls = {m.group(1): number(v[0]) for name, v in k.items() if (m := STALL.match(name))
                  and number(v[0]) is not None and m.group(1) != "selected"}
        rec["stalls"] = [[s, round(v, 2)] for s, v in sorted(stalls.items(), key=lambda kv: -kv[1])[:5]]
        out.append(rec)
    json.dump(out, open(os.path.join(out_dir, "ncu16.json"), "w"), indent=1)
    cols = ["label", "kernel"] + list(COLUMNS) + ["stalls"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in out]
    open(os.path.join(out_dir, "ncu16.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", required=True,
                    help="kernels, ceilings, warm, ncu, ncu-table, or a comma list of the first three")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--csv", help="ncu-table: the raw CSV of the ncu run")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = args.rows.split(",")
    if args.part == "ncu-table":
        return ncu_table(args.csv, args.out)
    torch.manual_seed(0)
    parts = {"kernels": kernels_part, "ceilings": ceilings_part, "warm": warm_part, "ncu": ncu_part}
    for part in args.part.split(","):
        parts[part](rows, args.out)


if __name__ == "__main__":
    main()
