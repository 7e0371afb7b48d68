#!/usr/bin/env bash
# Nsight Compute counters of the causal 16k prefill kernels (profile_prefill_ncu.py), clocks
# left alone (--clock-control none, per the device's METHOD.md), into $OUT:
#   ncu_prefill.csv (raw), ncu_order.json, ncu_prefill.{json,md} (the table), ncu_metrics.txt.
#   cd <repo root> && OUT=/some/dir bash benchmarks/run_ncu_prefill.sh
set -u
OUT=${OUT:-.}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-$PWD/src} PYTHONUNBUFFERED=1
ncu --query-metrics --chip gh100 2>/dev/null | grep -iE "tensor|gmma|stalled" > "$OUT/ncu_metrics.txt"
timeout "${NCU_S:-240}" ncu --clock-control none --profile-from-start off --csv --page raw \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section Occupancy --section LaunchStats \
  python3 benchmarks/profile_prefill_ncu.py --dims "${DIMS:-128,256}" --order "$OUT/ncu_order.json" \
  > "$OUT/ncu_prefill.csv" 2> "$OUT/ncu_prefill.err"
echo "ncu rc $?"
python3 benchmarks/ncu_table.py "$OUT/ncu_prefill.csv" --order "$OUT/ncu_order.json" --out "$OUT/ncu_prefill"
