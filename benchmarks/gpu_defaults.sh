#!/usr/bin/env bash
# Issue 24 on the GPU machine: bench_triton, bench_mla and bench_runner run by the previous code
# (.prev/: git archive of the commit before the plan chose kernels, carried by the call) and by
# this one, alternating prev / new ROUNDS times in the same call, then compared row by row, each
# row's best run per side (compare_defaults.py).
# Usage (repository root): ROUNDS=2 bash benchmarks/gpu_defaults.sh [SCRIPTS...]   (default: all three)
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-defaults}; mkdir -p "$OUT"
SCRIPTS=${*:-bench_triton bench_mla bench_runner}
ROUNDS=${ROUNDS:-1}; RUN_S=${RUN_S:-200}
prev_dirs=""; new_dirs=""
for r in $(seq 1 "$ROUNDS"); do
  for side in prev new; do
    dir="$OUT/$side$r"; mkdir -p "$dir"
    [ $side = prev ] && prev_dirs="$prev_dirs${prev_dirs:+,}$dir" || new_dirs="$new_dirs${new_dirs:+,}$dir"
  done
done
for s in $SCRIPTS; do
  for r in $(seq 1 "$ROUNDS"); do
    for side in prev new; do
      root=.; [ $side = prev ] && root=.prev
      dir="$OUT/$side$r"
      case $s in
        bench_runner) args=(--json "$dir/bench_runner.json" --out "$dir/bench_runner.md" --no-peer --no-compile --no-greedy-check) ;;
        *) args=(--out "$dir") ;;
      esac
      t0=$SECONDS
      PYTHONPATH=$root/src timeout "$RUN_S" python3 $root/benchmarks/$s.py "${args[@]}" > "$dir/$s.log" 2>&1
      echo "$s $side round $r rc=$? $((SECONDS - t0))s"
    done
  done
done
python3 benchmarks/compare_defaults.py "$prev_dirs" "$new_dirs" --out "$OUT/compare_defaults.md"
cd "$OUT" && tar czf defaults.tgz prev* new* && rm -rf prev* new*
