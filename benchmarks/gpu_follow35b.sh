#!/usr/bin/env bash
# Issue 28 (session 2026-12-04b), call 5: the GPU tests that patch decode_ahead (the dsa one
# failed in call 4: its stand-in took no wait=); the GPU's idle gaps in one generate with and
# without the queued call (probe_generate_gaps); the rates, 5 rounds interleaved
# (probe_step_gaps --rounds 5). Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_runner_dsa_triton.py \
  tests/runner/test_runner_graphs_gpu.py > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_tests.log" | head
timeout 200 python3 benchmarks/probe_generate_gaps.py --batches 1 64 --out "$W" > "$W/probe_generate_gaps.log" 2>&1
echo "gaps rc $? at $((SECONDS - T0)) s"; save
grep '^{' "$W/probe_generate_gaps.log"; grep -E "Error|error" "$W/probe_generate_gaps.log" | tail -3
timeout 220 python3 benchmarks/probe_step_gaps.py --batches 1 64 --rounds 5 --out "$W" > "$W/probe_step_gaps.log" 2>&1
echo "probe rc $? at $((SECONDS - T0)) s"; save
grep '^{' "$W/probe_step_gaps.log"; grep -E "Error|error" "$W/probe_step_gaps.log" | tail -3
