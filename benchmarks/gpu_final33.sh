#!/usr/bin/env bash
# Issue 28 (session 2026-12-03e), call 5: the session's final tree. The GPU suite (every gpu
# test: one-row products of at most 4096 columns now on stream_mm by default, the kernels
# between the products PDL 3), then the engine at B=1 and B=64: the new default against the
# old (ATTNKIT_STREAM_MM=0-0 restores it: skinny's products, PDL 2 between them), 3 rounds
# interleaved, with each LLM's GPU busy a step. Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${SUITE_S:-300} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests > "$W/gpu_suite.log" 2>&1
echo "suite rc $? ($(tail -1 "$W/gpu_suite.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_suite.log" | head -20
REST=$(( ${END_S:-560} - (SECONDS - T0) ))
timeout $REST python3 benchmarks/bench_switch.py --var env --busy --rounds ${ROUNDS:-3} --reps 5 \
  --batches 1 64 --values - ATTNKIT_STREAM_MM=0-0 --out "$W" > "$W/bench_switch.log" 2>&1
echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
grep round "$W/bench_switch.log" | sed 's/ATTNKIT_//g'; grep -A6 "^| B" "$W/bench_switch.log" | sed 's/ATTNKIT_//g'
grep -E "Error|error" "$W/bench_switch.log" | tail -3
save
