#!/usr/bin/env bash
# Issue 28 (session 2026-12-03e), call 1: stream_mm at ONE row (the B=1 bar: 225 against 236
# tok/s). stream_mm's GPU tests (the skinny.mm routing test and the plain-product shapes have
# not run on a GPU yet), bench_skinny at 1 row (skinny's rule with its early PDL against
# stream_mm's few-row forms under PDL 2, cuBLAS in the same run), then the engine at B=1:
# ATTNKIT_STREAM_MM 0-0 / 1-1, and 1-1 with ATTNKIT_STREAM_MM_REGS=128; a profile of the
# 1-1 step last. Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${TEST_S:-150} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_stream_mm_gpu.py \
  tests/runner/test_skinny.py > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^E  " "$W/gpu_tests.log" | head -12
mkdir -p "$W/m1"
timeout ${SKINNY_S:-100} python3 benchmarks/bench_skinny.py --ms 1 --configs stream \
  --shapes o,qkv,down,gate_up,lm_head --out "$W/m1" --budget-s $(( ${SKINNY_S:-100} - 10 )) > "$W/m1/log" 2>&1
echo "bench_skinny 1 rc $? at $((SECONDS - T0)) s"; save
skinny_rows "$W/m1/bench_skinny.json"
timeout ${SWITCH_S:-170} python3 benchmarks/bench_switch.py --var ATTNKIT_STREAM_MM --values 0-0 1-1 \
  --rounds ${ROUNDS:-3} --batches 1 --out "$W" > "$W/bench_switch.log" 2>&1
echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
tail -5 "$W/bench_switch.log"
REST=$(( ${END_S:-560} - (SECONDS - T0) ))
if [ $REST -gt 70 ]; then
  ATTNKIT_STREAM_MM=1-1 timeout $(( REST - 40 )) python3 benchmarks/bench_switch.py --var ATTNKIT_STREAM_MM_REGS \
    --values 0 128 --rounds 2 --batches 1 --out "$W" > "$W/bench_switch_regs.log" 2>&1
  echo "bench_switch regs rc $? at $((SECONDS - T0)) s"; save
  tail -4 "$W/bench_switch_regs.log"
fi
REST=$(( ${END_S:-560} - (SECONDS - T0) ))
if [ $REST -gt 30 ]; then
  mkdir -p "$W/profile"
  ATTNKIT_STREAM_MM=1-1 timeout $REST python3 benchmarks/profile_engine_step.py --batches 1 --out "$W/profile" \
    > "$W/profile/log" 2>&1
  echo "profile rc $? at $((SECONDS - T0)) s"; save
  sed -n '/^| kernel/,/^$/p' "$W/profile/profile_engine_step.md" | head -12
fi
save
