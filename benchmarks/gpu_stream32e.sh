#!/usr/bin/env bash
# Issue 28 (session 2026-12-03d), call 5: stream_mm's dynamic form (items from a counter;
# commit b91314e, measured slower, unsafe under PDL, reverted after this call: NOTES-engine.md
# version 7).
# Its GPU tests (both forms), bench_skinny's stream forms at 64 rows, the probe, then the
# engine with the dynamic form (ATTNKIT_STREAM_MM 0-0 / 33-64). Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${TEST_S:-150} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_stream_mm_gpu.py \
  > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^E  " "$W/gpu_tests.log" | head -12
mkdir -p "$W/m64"
timeout ${SKINNY_S:-90} python3 benchmarks/bench_skinny.py --ms 64 --configs stream \
  --shapes o,down,qkv,gate_up,lm_head --out "$W/m64" --budget-s $(( ${SKINNY_S:-90} - 10 )) > "$W/m64/log" 2>&1
echo "bench_skinny 64 rc $? at $((SECONDS - T0)) s"; save
skinny_rows "$W/m64/bench_skinny.json"
timeout ${PROBE_S:-60} python3 benchmarks/probe_stream_mm.py --out "$W" > "$W/probe.log" 2>&1
echo "probe rc $? at $((SECONDS - T0)) s"; save
probe_rows "$W/probe.log"
REST=$(( ${END_S:-400} - (SECONDS - T0) ))
if [ $REST -gt 80 ]; then
  timeout $REST python3 benchmarks/bench_switch.py --var ATTNKIT_STREAM_MM --values 0-0 33-64 \
    --rounds ${ROUNDS:-2} --batches ${BATCHES:-64 48} --out "$W" > "$W/bench_switch.log" 2>&1
  echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
  tail -7 "$W/bench_switch.log"
fi
save
