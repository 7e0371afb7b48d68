#!/usr/bin/env bash
# Issue 28 (session 2026-12-03b), last call: the runner's GPU tests on the final tree (the L2
# prefetch off by default), then bench_switch over ATTNKIT_FUSED_PDL (auto = early for one-row
# launches, against 0), values interleaved, ROUNDS rounds; ATTNKIT_SKINNY 1 against 0 while
# there is time. Files in $OUT/c.tgz.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_final28c.sh
. benchmarks/gpu_common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout ${TEST_S:-150} python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/runner > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_tests.log" | head -10
timeout ${BENCH_S:-300} python3 benchmarks/bench_switch.py --var ATTNKIT_FUSED_PDL --values auto 0 \
  --rounds ${ROUNDS:-6} --batches ${BATCHES:-1 16 64} --out "$W" > "$W/bench_switch.log" 2>&1
echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
grep "^round" "$W/bench_switch.log" | tail -40; tail -12 "$W/bench_switch.log"
# Then, while the call has time: the few-row products (ATTNKIT_SKINNY 1 against 0) the same way.
if [ $((SECONDS - T0)) -lt ${SKINNY_BY_S:-330} ]; then
  timeout ${SKINNY_S:-150} python3 benchmarks/bench_switch.py --var ATTNKIT_SKINNY --values 1 0 \
    --rounds ${ROUNDS:-6} --batches 1 16 --out "$W" > "$W/bench_switch_skinny.log" 2>&1
  echo "bench_switch skinny rc $? at $((SECONDS - T0)) s"; save
  tail -8 "$W/bench_switch_skinny.log"
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
save
