#!/usr/bin/env bash
# Issue 28 (session 2026-12-04), call 3: where the decode step's time goes past its GPU-busy
# time (probe_step_gaps.py, B=1 and 64, the default). Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout 400 python3 benchmarks/probe_step_gaps.py --batches 1 64 --out "$W" > "$W/probe_step_gaps.log" 2>&1
echo "probe rc $? at $((SECONDS - T0)) s"; save
grep '^{' "$W/probe_step_gaps.log"; grep -E "Error|error" "$W/probe_step_gaps.log" | tail -3
