#!/usr/bin/env bash
# Issue 28 (session 2026-12-03d), call 2: stream_mm's GPU tests after the power-of-two rows
# fix, then probe_stream_mm.py (kernel durations and gaps in a graph of products; the
# in-kernel TIMING probe's phases). Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${TEST_S:-150} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_stream_mm_gpu.py \
  > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^E  " "$W/gpu_tests.log" | head -12
timeout ${PROBE_S:-240} python3 benchmarks/probe_stream_mm.py --out "$W" > "$W/probe.log" 2>&1
echo "probe rc $? at $((SECONDS - T0)) s"; save
cat "$W/probe.log" | tail -30
save
