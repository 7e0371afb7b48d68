#!/usr/bin/env bash
# Issue 28 (session 2026-12-03d), call 4: stream_mm's measured tile (64, 128, 6) as its
# default and, under ATTNKIT_FUSED_PDL=auto, early programmatic dependent launch for the rows
# it serves. GPU tests, then the engine: ATTNKIT_STREAM_MM 0-0 / 33-64 / 17-64 at B = 64, 48,
# 32, values interleaved; then profile_engine_step at B=64 with 33-64. Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${TEST_S:-100} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_stream_mm_gpu.py \
  tests/runner/test_skinny.py > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^E  " "$W/gpu_tests.log" | head -12
timeout ${SWITCH_S:-300} python3 benchmarks/bench_switch.py --var ATTNKIT_STREAM_MM --values 0-0 33-64 17-64 \
  --rounds ${ROUNDS:-2} --batches ${BATCHES:-64 48 32} --out "$W" > "$W/bench_switch.log" 2>&1
echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
grep "^round" "$W/bench_switch.log"; tail -12 "$W/bench_switch.log"
REST=$(( ${END_S:-560} - (SECONDS - T0) ))
if [ $REST -gt 60 ]; then
  mkdir -p "$W/profile"
  ATTNKIT_STREAM_MM=33-64 timeout $REST python3 benchmarks/profile_engine_step.py --batches 64 --out "$W/profile" > "$W/profile/log" 2>&1
  echo "profile rc $? at $((SECONDS - T0)) s"; save
  head -30 "$W/profile/profile_engine_step.md"
fi
save
