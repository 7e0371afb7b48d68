#!/usr/bin/env bash
# Issue 29: measure the varlen call's kernel variants (triton: varlen_tile, varlen_gluon,
# varlen_gluon_persistent; sdpa beside them) at the DiT buckets of tune/grid.py (VARLEN_DIT),
# into a copy of the shipped H200 profile (attnkit tune resumes: only the new buckets are
# measured), so that `attnkit plan flux.1-dev --device h200` prints the measured varlen table.
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_tune_varlen.sh   (~2 min)
# Writes under $OUT: nvidia-h200.json (the shipped profile plus the varlen entries), tune_varlen.log
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-tune-varlen}; mkdir -p "$OUT"
cp src/attnkit/planning/profiles/nvidia-h200.json "$OUT/nvidia-h200.json"
t0=$SECONDS
timeout 150 python3 -m attnkit tune --phase varlen --backends triton,sdpa --out "$OUT/nvidia-h200.json" \
  2> "$OUT/tune_varlen.log"
rc=$?
if grep -q AK232 "$OUT/tune_varlen.log"; then   # another environment than the shipped profile's: a file of its own
  echo "the shipped profile was measured elsewhere (AK232): writing $OUT/nvidia-h200-varlen.json instead"
  timeout 150 python3 -m attnkit tune --phase varlen --backends triton,sdpa --out "$OUT/nvidia-h200-varlen.json" \
    2>> "$OUT/tune_varlen.log"
  rc=$?
fi
echo "tune rc=$rc $((SECONDS - t0))s"; tail -n 12 "$OUT/tune_varlen.log"
