#!/usr/bin/env bash
# Issue 28 (session 2026-12-03c), call 2: the few-row products past 16 rows with the per-shape
# rule (GPU tests, bench_skinny's wide tiles at 64 / 32 rows), the 16-head MLA fused split merge
# (gpu_mla16.sh: its GPU tests and bench_mla16), then the engine with ATTNKIT_SKINNY_ROWS 16 vs
# 64, values interleaved, while there is time. Files in $OUT (c.tgz, gpu_mla16.tar.gz).
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_call31b.sh
. benchmarks/gpu_common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout ${TEST_S:-90} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_skinny.py > "$W/gpu_tests.log" 2>&1
echo "skinny tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_tests.log" | head -10
mkdir -p "$W/wide"
timeout ${WIDE_S:-60} python3 benchmarks/bench_skinny.py --ms 64,32 --configs wide \
  --shapes o,down,qkv,gate_up --out "$W/wide" --budget-s $(( ${WIDE_S:-60} - 10 )) > "$W/wide/log" 2>&1
echo "bench_skinny wide rc $? at $((SECONDS - T0)) s"; save
cat "$W/wide/bench_skinny.md"
OUT=$OUT bash benchmarks/gpu_mla16.sh
echo "gpu_mla16 done at $((SECONDS - T0)) s"
REST=$(( ${END_S:-575} - (SECONDS - T0) ))
if [ $REST -gt 60 ]; then
  timeout $REST python3 benchmarks/bench_switch.py --var ATTNKIT_SKINNY_ROWS --values 16 64 \
    --rounds ${ROUNDS:-4} --batches ${BATCHES:-64 32 48} --out "$W" > "$W/bench_switch.log" 2>&1
  echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
  grep "^round" "$W/bench_switch.log" | tail -24; tail -10 "$W/bench_switch.log"
fi
save
