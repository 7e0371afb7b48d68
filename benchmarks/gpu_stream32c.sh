#!/usr/bin/env bash
# Issue 28 (session 2026-12-03d), call 3: stream_mm with programs_for's ranges (a multiple of
# the column tiles) and every partial's load at once. Its GPU tests and skinny's, the probe,
# bench_skinny's stream forms at 64 rows, the engine (ATTNKIT_STREAM_MM 0-0 / 33-64), then
# 32 rows. Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${TEST_S:-120} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_stream_mm_gpu.py \
  tests/runner/test_skinny.py > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^E  " "$W/gpu_tests.log" | head -12
timeout ${PROBE_S:-100} python3 benchmarks/probe_stream_mm.py --out "$W" > "$W/probe.log" 2>&1
echo "probe rc $? at $((SECONDS - T0)) s"; save
grep -v end_us "$W/probe.log" | tail -3; probe_rows "$W/probe.log"
mkdir -p "$W/m64" "$W/m32"
timeout ${SKINNY_S:-110} python3 benchmarks/bench_skinny.py --ms 64 --configs stream \
  --shapes o,down,qkv,gate_up,lm_head --out "$W/m64" --budget-s $(( ${SKINNY_S:-110} - 10 )) > "$W/m64/log" 2>&1
echo "bench_skinny 64 rc $? at $((SECONDS - T0)) s"; save
skinny_rows "$W/m64/bench_skinny.json"
REST=$(( ${END_S:-560} - (SECONDS - T0) ))
if [ $REST -gt 200 ]; then
  timeout 190 python3 benchmarks/bench_switch.py --var ATTNKIT_STREAM_MM --values 0-0 33-64 \
    --rounds ${ROUNDS:-2} --batches ${BATCHES:-64 48} --out "$W" > "$W/bench_switch.log" 2>&1
  echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
  tail -8 "$W/bench_switch.log"
fi
REST=$(( ${END_S:-560} - (SECONDS - T0) ))
if [ $REST -gt 40 ]; then
  timeout $REST python3 benchmarks/bench_skinny.py --ms 32 --configs stream \
    --shapes o,down,qkv,gate_up --out "$W/m32" --budget-s $(( REST - 10 )) > "$W/m32/log" 2>&1
  echo "bench_skinny 32 rc $? at $((SECONDS - T0)) s"; save
  cat "$W/m32/bench_skinny.md"
fi
save
