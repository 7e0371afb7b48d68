#!/usr/bin/env bash
# Issue 28 (session 2026-12-03c), call 3: the GPU suite (every gpu test) on the tree with the
# one-pass MLA reduce and the few-row products up to 32 rows; then gpu_mla16.sh (the reduce's
# round: bench_mla16 and its profiler split); then the engine at 32 and 24 rows with
# ATTNKIT_SKINNY_ROWS 32 (the new default) against 16, values interleaved, while there is time.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_final31.sh
. benchmarks/gpu_common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout ${SUITE_S:-300} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests > "$W/gpu_suite.log" 2>&1
echo "suite rc $? ($(tail -1 "$W/gpu_suite.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_suite.log" | head -20
OUT=$OUT bash benchmarks/gpu_mla16.sh
echo "gpu_mla16 done at $((SECONDS - T0)) s"
REST=$(( ${END_S:-575} - (SECONDS - T0) ))
if [ $REST -gt 50 ]; then
  timeout $REST python3 benchmarks/bench_switch.py --var ATTNKIT_SKINNY_ROWS --values 32 16 \
    --rounds ${ROUNDS:-3} --batches ${BATCHES:-32 24} --out "$W" > "$W/bench_switch.log" 2>&1
  echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
  grep "^round" "$W/bench_switch.log" | tail -12; tail -8 "$W/bench_switch.log"
fi
save
