#!/usr/bin/env bash
# Issue 28 (session 2026-12-03e), call 3: call 2 found the GPU busy a B=1 step steady across
# LLM builds (4.21-4.25 ms) while bench_runner's rate moved 222-249 within one LLM (timing
# noise), and o_proj / down_proj over the model's own weights at 2,470 / 3,000 GB/s against
# bench_skinny's 2,817 / 3,384 on copies. Here: those two products over their own weights,
# clones, one arena and 5 repeated, skinny against stream_mm (probe_llm_variance, 2 LLMs);
# then bench_runner's B=1 rate with more repetitions (bench_switch, one value, 3 rounds, 9 reps).
. benchmarks/gpu_common.sh
timeout ${PROBE_S:-200} python3 benchmarks/probe_llm_variance.py --llms ${LLMS:-2} --batch 1 --out "$W" \
  > "$W/probe.log" 2>&1
echo "probe rc $? at $((SECONDS - T0)) s"; save
grep '^{' "$W/probe.log" | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l); print(r['llm'], r['tok_s'], r['busy_ms'], r['products_gbs']); print(r.get('weights_ways'))"
grep -E "Error|error" "$W/probe.log" | tail -3
REST=$(( ${END_S:-400} - (SECONDS - T0) ))
if [ $REST -gt 80 ]; then
  timeout $REST python3 benchmarks/bench_switch.py --var ATTNKIT_FUSED_PDL --values auto \
    --rounds 3 --reps 9 --batches 1 --out "$W" > "$W/bench_switch.log" 2>&1
  echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
  grep round "$W/bench_switch.log"
fi
save
