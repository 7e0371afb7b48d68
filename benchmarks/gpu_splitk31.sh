#!/usr/bin/env bash
# Issue 28 (session 2026-12-03c), the engine's B=64 bar: split-K few-row products.
# The split-K GPU tests of layers/skinny.py, bench_skinny's split-K configurations at 64 rows
# on every Llama-3-8B product (then 1, 32, 128 rows while there is time), then the engine
# with the few-row kernel up to 64 rows (ATTNKIT_SKINNY_ROWS 64, config's guessed split rule)
# against cuBLAS past 16 rows (16, the default), values interleaved. Files in $OUT/c.tgz.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_splitk31.sh
. benchmarks/gpu_common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout ${TEST_S:-120} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_skinny.py > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR|Error" "$W/gpu_tests.log" | head -10
mkdir -p "$W/m64" "$W/mrest"
timeout ${SKINNY_S:-170} python3 benchmarks/bench_skinny.py --ms 64 --configs split \
  --shapes o,down,qkv,gate_up,lm_head --out "$W/m64" --budget-s $(( ${SKINNY_S:-170} - 15 )) > "$W/m64/log" 2>&1
echo "bench_skinny 64 rc $? at $((SECONDS - T0)) s"; save
cat "$W/m64/bench_skinny.md"
timeout ${SWITCH_S:-180} python3 benchmarks/bench_switch.py --var ATTNKIT_SKINNY_ROWS --values 16 64 \
  --rounds ${ROUNDS:-3} --batches ${BATCHES:-64 32} --out "$W" > "$W/bench_switch.log" 2>&1
echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
grep "^round" "$W/bench_switch.log" | tail -20; tail -10 "$W/bench_switch.log"
REST=$(( ${END_S:-570} - (SECONDS - T0) ))
if [ $REST -gt 40 ]; then
  timeout $REST python3 benchmarks/bench_skinny.py --ms 1,32,128 --configs split \
    --shapes o,down,qkv,gate_up --out "$W/mrest" --budget-s $(( REST - 15 )) > "$W/mrest/log" 2>&1
  echo "bench_skinny rest rc $? at $((SECONDS - T0)) s"; save
  cat "$W/mrest/bench_skinny.md"
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
save
