#!/usr/bin/env bash
# Issue 28 (session 2026-12-04b), call 3: where the GPU idles in generate (probe_generate_gaps.py,
# B=1 and 64, the default). Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout 400 python3 benchmarks/probe_generate_gaps.py --batches 1 64 --out "$W" > "$W/probe_generate_gaps.log" 2>&1
echo "probe rc $? at $((SECONDS - T0)) s"; save
cat "$W/probe_generate_gaps.log" | cut -c1-600 | tail -20
