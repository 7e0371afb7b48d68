#!/usr/bin/env bash
# Issue 28, engine rows: what a decode step of the runner spends its GPU time on
# (profile_engine_step.py), the decode GEMMs of cuBLAS against the skinny kernel
# (bench_skinny.py), and the stream decode's EARLY prologue (gpu_decodeb16_verify.sh).
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_engine28.sh
set -u
OUT=${OUT:-.}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 150 python3 benchmarks/profile_engine_step.py --batches 1,64 --steps 16 --out "$OUT" > "$OUT/profile_engine_step.log" 2>&1
echo "profile rc $? at $((SECONDS - T0)) s"
timeout ${SKINNY_S:-250} python3 benchmarks/bench_skinny.py --out "$OUT" --budget-s $(( ${SKINNY_S:-250} - 30 )) > "$OUT/bench_skinny.log" 2>&1
echo "skinny rc $? at $((SECONDS - T0)) s"
[ -n "${NO_EARLY:-}" ] || OUT=$OUT bash benchmarks/gpu_decodeb16_verify.sh > "$OUT/decodeb16_verify.log" 2>&1
echo "verify rc $? at $((SECONDS - T0)) s"
grep -v USDT "$OUT/profile_engine_step.md" | head -80
cat "$OUT/bench_skinny.md"
tail -15 "$OUT/decodeb16_verify.log"
