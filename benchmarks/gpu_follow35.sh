#!/usr/bin/env bash
# Issue 28 (session 2026-12-04b), call 4: the scheduler queues the next decode-ahead call
# before it reads the last one back (Scheduler._follow). The GPU suite; probe_step_gaps at
# B=1 and 64 (generate with and without the queued call, interleaved, and at decode_ahead
# 64); bench_runner's runner rows (no peers: the bar is its absolute rate). Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${SUITE_S:-300} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests > "$W/gpu_suite.log" 2>&1
echo "suite rc $? ($(tail -1 "$W/gpu_suite.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_suite.log" | head -20
timeout 150 python3 benchmarks/probe_step_gaps.py --batches 1 64 --out "$W" > "$W/probe_step_gaps.log" 2>&1
echo "probe rc $? at $((SECONDS - T0)) s"; save
grep '^{' "$W/probe_step_gaps.log"; grep -E "Error|error" "$W/probe_step_gaps.log" | tail -3
REST=$(( ${END_S:-570} - (SECONDS - T0) ))
timeout $REST python3 benchmarks/bench_runner.py --no-peer --no-compile --out "$W/bench_runner.md" \
  --json "$W/bench_runner.json" > "$W/bench_runner.log" 2>&1
echo "bench_runner rc $? at $((SECONDS - T0)) s"; save
cat "$W/bench_runner.md" 2>/dev/null | head -30; grep -E "Error|error" "$W/bench_runner.log" | tail -3
