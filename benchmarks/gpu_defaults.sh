#!/usr/bin/env bash
# Issue 24 on the GPU machine: bench_triton, bench_mla and bench_runner run by the previous code
# (.prev/: git archive of the commit before the plan chose kernels, carried by the call) and by
# this one, in the same call, then compared row by row (compare_defaults.py).
# Usage (repository root): bash benchmarks/gpu_defaults.sh [SCRIPTS...]   (default: all three)
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-defaults}; mkdir -p "$OUT/prev" "$OUT/new"
SCRIPTS=${*:-bench_triton bench_mla bench_runner}
for s in $SCRIPTS; do
  for side in prev new; do
    root=.; [ $side = prev ] && root=.prev
    case $s in
      bench_runner) args=(--json "$OUT/$side/bench_runner.json" --out "$OUT/$side/bench_runner.md" --no-compile) ;;
      *) args=(--out "$OUT/$side") ;;
    esac
    t0=$SECONDS
    PYTHONPATH=$root/src timeout 200 python3 $root/benchmarks/$s.py "${args[@]}" > "$OUT/$side/$s.log" 2>&1
    echo "$s $side rc=$? $((SECONDS - t0))s"
  done
done
python3 benchmarks/compare_defaults.py "$OUT/prev" "$OUT/new" --out "$OUT/compare_defaults.md"
cd "$OUT" && tar czf defaults.tgz prev new && rm -rf prev new
