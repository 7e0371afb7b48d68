#!/usr/bin/env bash
# Issue 28 (session 2026-12-03e), call 4: call 3 had stream_mm at one row 1.30x / 1.33x
# skinny on o_proj / down_proj over the model's own weights in a chain of products, but the
# engine no faster: between the products sit norm / silu / rope kernels whose PDL 2 lets the
# next product launch only once the product before has ended. ATTNKIT_FUSED_PDL=ahead gives
# those kernels PDL 3 (trigger, then wait). GPU tests (the PDL chain test now at one row, with
# ahead and stream_mm), then the engine at B=1 under five switch sets, with each LLM's GPU
# busy a step (bench_switch --busy: steady across builds, call 2). Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${TEST_S:-150} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_skinny.py \
  tests/runner/test_stream_mm_gpu.py > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^E  " "$W/gpu_tests.log" | head -12
S="ATTNKIT_STREAM_MM=1-1,ATTNKIT_STREAM_MM_N=4096"
REST=$(( ${END_S:-540} - (SECONDS - T0) ))
timeout $REST python3 benchmarks/bench_switch.py --var env --busy --rounds ${ROUNDS:-3} --batches 1 \
  --values - ATTNKIT_FUSED_PDL=ahead "ATTNKIT_FUSED_PDL=ahead,$S" "$S" "ATTNKIT_FUSED_PDL=ahead,ATTNKIT_STREAM_MM=1-1" \
  --out "$W" > "$W/bench_switch.log" 2>&1
echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
grep round "$W/bench_switch.log" | sed 's/ATTNKIT_//g'; grep -A8 "^| B" "$W/bench_switch.log" | sed 's/ATTNKIT_//g'
grep -E "Error|error" "$W/bench_switch.log" | tail -3
save
