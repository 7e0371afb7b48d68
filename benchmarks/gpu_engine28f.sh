#!/usr/bin/env bash
# Issue 28, engine (session 2026-12-03b): o_proj's weight prefetched into L2 during the
# attention (runner/layers/prefetch.py). The GPU tests of the change and of the runner's graphs,
# then bench_prefetch (modes 0 / 1 / last interleaved, B = 1, 16, 64), then the step's profile
# at B=1 with the prefetch off and on while the call has time. Files in $OUT/c.tgz.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_engine28f.sh
. benchmarks/gpu_common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout ${TEST_S:-150} python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/runner/test_prefetch.py \
  tests/runner/test_runner_graphs_gpu.py tests/runner/test_skinny.py tests/runner/test_fused_layers.py \
  > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR" "$W/gpu_tests.log" | head -10
timeout ${BENCH_S:-240} python3 benchmarks/bench_prefetch.py --rounds ${ROUNDS:-3} \
  --modes ${MODES:-0 1 last} --batches ${BATCHES:-1 16 64} --out "$W" > "$W/bench_prefetch.log" 2>&1
echo "bench_prefetch rc $? at $((SECONDS - T0)) s"; save
tail -14 "$W/bench_prefetch.log"
for mode in ${PROFILE_MODES:-0 1}; do
  [ $((SECONDS - T0)) -lt ${PROFILE_BY_S:-420} ] || break
  mkdir -p "$W/profile_$mode"
  ATTNKIT_L2_PREFETCH=$mode timeout 40 python3 benchmarks/profile_engine_step.py --batches 1,64 --steps 16 \
    --out "$W/profile_$mode" > "$W/profile_$mode/profile.log" 2>&1
  echo "profile prefetch=$mode rc $? at $((SECONDS - T0)) s"; save
  grep -E "^### " "$W/profile_$mode/profile_engine_step.md"
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
save
