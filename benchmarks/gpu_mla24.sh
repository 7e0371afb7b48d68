#!/usr/bin/env bash
# GPU run of branch mla24 (issue 24's bench_mla row: decode 128 heads B=1 ctx 1k, forward 1.6 µs
# slower than the previous default), <= 90 s on an H200, from the repository root:
#   bash benchmarks/gpu_mla24.sh        (writes $OUT/gpu_mla24.tar.gz: mla24/*)
# Needs the previous default's tree (git archive fb7aab7 src benchmarks) at .prev/, carried by the
# call as for gpu_defaults.sh (PREV=dir overrides; ../.prev and ../../.prev are looked at too);
# without it only this tree's sides run (plan / new / ws), which still lists the kernels.
# 1. probe_mla_forward.py at 128x1x1024 and 128x128x1024 (<= 62 s): both trees in one process
#    (sides prev, plan, ws: round 1 measured the no-tables default, column_split, apart):
#    outputs checked (float64 reference at B=1, each other at B=128), core and forward timed by
#    bench_mla's method in rotating rounds, torch.profiler kernel tables of forward and core;
#    then bench_mla's own decode_row of each tree (16x1x1024, 128x1x1024, 128x128x1024, in its
#    run's order), alternating trees;
# 2. with B32K=1 (round 1 ran it: same kernels both trees, noise), 128x128x32768 in the rest.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_mla24_out}
D="$OUT/mla24"
mkdir -p "$D"
PREV=${PREV:-}
for c in .prev ../.prev ../../.prev; do
  [ -z "$PREV" ] && [ -d "$c/src/attnkit" ] && PREV=$c
done
export PYTHONPATH="$PWD/src"
{ date -u; nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)";
  echo "prev tree: ${PREV:-none}"; } > "$D/env.txt" 2>&1
t0=$SECONDS
timeout 62 python3 benchmarks/probe_mla_forward.py --prev "${PREV:-none}/src" --prev-bench "${PREV:-none}/benchmarks" \
    --out "$D/b1" --shapes 128x1x1024,128x128x1024 --sides prev,plan,ws --rounds 5 --bench-rows 16x1x1024,128x1x1024,128x128x1024 \
    --bench-rounds 4 > "$D/probe_b1.log" 2>&1
echo "rc=$? $((SECONDS - t0))s" >> "$D/probe_b1.log"
left=$((88 - (SECONDS - t0)))
if [ "${B32K:-0}" = 1 ] && [ $left -ge 15 ]; then
  t1=$SECONDS
  timeout $left python3 benchmarks/probe_mla_forward.py --prev "${PREV:-none}/src" --out "$D/b128" \
      --shapes 128x128x32768 --rounds 3 --reps 10 --replays 5 > "$D/probe_b128.log" 2>&1
  echo "rc=$? $((SECONDS - t1))s" >> "$D/probe_b128.log"
fi
rm -rf "$D"/*/_pkg
tail -n 2 "$D"/probe_*.log
tar czf "$OUT/gpu_mla24.tar.gz" -C "$OUT" mla24 && rm -rf "$D"     # one file comes back
