#!/usr/bin/env bash
# GPU round of branch mla24 (issue 24's bench_mla row: decode 128 heads B=1 ctx 1k, forward 1.6 µs
# slower than the previous default), <= 90 s on an H200, from the repository root:
#   bash benchmarks/gpu_mla24.sh        (writes $OUT/gpu_mla24.tar.gz: mla24/*)
# Needs the previous default's tree at .prev/ (git archive fb7aab7 src benchmarks, carried by the
# call as for gpu_defaults.sh; PREV=dir overrides); without it only this tree's sides run.
# 1. probe_mla_forward.py: both trees in one process at 128x1x1024 then 128x128x32768: outputs
#    checked (float64 reference at B=1), core and forward timed by bench_mla's method in rotating
#    rounds, torch.profiler kernel table of the forward and the core (time-boxed);
# 2. count_mla_forward.py is the CPU twin (launch counts through the interpreter), not run here.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_mla24_out}
D="$OUT/mla24"
mkdir -p "$D"
PREV=${PREV:-.prev/src}
export PYTHONPATH="$PWD/src"
{ date -u; nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)";
  ls -d "$PREV/attnkit" 2>&1; } > "$D/env.txt" 2>&1
t0=$SECONDS
timeout 55 python3 benchmarks/probe_mla_forward.py --prev "$PREV" --out "$D/b1" --shapes 128x1x1024 \
    --rounds 7 > "$D/probe_b1.log" 2>&1
echo "rc=$? $((SECONDS - t0))s" >> "$D/probe_b1.log"
t1=$SECONDS
timeout $((85 - t1 + t0 > 10 ? 85 - t1 + t0 : 10)) python3 benchmarks/probe_mla_forward.py --prev "$PREV" \
    --out "$D/b128" --shapes 128x128x32768 --rounds 3 --reps 10 --replays 5 > "$D/probe_b128.log" 2>&1
echo "rc=$? $((SECONDS - t1))s" >> "$D/probe_b128.log"
tail -2 "$D/probe_b1.log" "$D/probe_b128.log"
tar czf "$OUT/gpu_mla24.tar.gz" -C "$OUT" mla24 && rm -rf "$D"     # one file comes back
