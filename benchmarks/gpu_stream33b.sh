#!/usr/bin/env bash
# Issue 28 (session 2026-12-03e), call 2: (1) why the engine's B=1 step moves by ~5 % from one
# LLM build to the next with the same code (probe_llm_variance: 5 LLMs, their own products
# in a graph, a profile each, where the stacked weights lie); (2) stream_mm at one row for
# o_proj and down_proj only (ATTNKIT_STREAM_MM_N=4096: bench_skinny call 1 had them 1.18x /
# 1.17x skinny's rule in a chain; all products through it lost 3 % in the engine).
. benchmarks/gpu_common.sh
timeout ${PROBE_S:-230} python3 benchmarks/probe_llm_variance.py --llms ${LLMS:-5} --batch 1 --out "$W" \
  > "$W/probe.log" 2>&1
echo "probe rc $? at $((SECONDS - T0)) s"; save
grep '^{' "$W/probe.log"; grep -E "Error|error" "$W/probe.log" | tail -3
REST=$(( ${END_S:-540} - (SECONDS - T0) ))
if [ $REST -gt 80 ]; then
  ATTNKIT_STREAM_MM_N=4096 timeout $REST python3 benchmarks/bench_switch.py --var ATTNKIT_STREAM_MM \
    --values 0-0 1-1 --rounds ${ROUNDS:-4} --batches 1 --out "$W" > "$W/bench_switch.log" 2>&1
  echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
  grep round "$W/bench_switch.log"; tail -4 "$W/bench_switch.log"
fi
save
