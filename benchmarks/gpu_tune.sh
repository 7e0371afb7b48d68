#!/usr/bin/env bash
# Issue 14 on the GPU machine, one call: the H200 profile (attnkit tune, resumable), then the
# selection benchmark with it. Run from the repository root; everything lands in $OUT.
# Usage: bash benchmarks/gpu_tune.sh [--full]     (default --quick: an estimated 2-4 minutes of tuning)
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-tune}; mkdir -p "$OUT"
PROFILE=src/attnkit/planning/profiles/nvidia-h200.json
GRID=--quick; [ "${1:-}" = "--full" ] && GRID=""
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
# resumable: a cut run keeps its entries; the same command again measures only what is missing
timeout 400 python3 -m attnkit tune $GRID --out "$PROFILE" 2> "$OUT/tune.log"; echo "tune rc=$?"
tail -n 3 "$OUT/tune.log"; cp "$PROFILE" "$OUT/"
timeout 180 python3 benchmarks/bench_selection.py --quick --out "$OUT" > "$OUT/selection.log" 2>&1
echo "selection rc=$?"; tail -n 30 "$OUT/selection.log"
