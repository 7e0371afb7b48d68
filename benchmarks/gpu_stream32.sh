#!/usr/bin/env bash
# Issue 28 (session 2026-12-03d), the engine's B=64 bar: the warp-specialised stream-K Gluon
# product (runner/layers/stream_mm.py). A smoke run, its GPU tests (and skinny's, whose
# counters it shares), bench_skinny's stream tiles at 64 and 32 rows on every Llama-3-8B
# product next to cuBLAS and the skinny rule, then the engine with stream_mm at 33-64 rows
# against without (ATTNKIT_STREAM_MM 33-64 / 0-0), values interleaved. Files in $OUT/c.tgz.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_stream32.sh
. benchmarks/gpu_common.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout 90 python3 - > "$W/smoke.log" 2>&1 <<'PY'
import torch
from attnkit.runner.layers import skinny, stream_mm
x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
print("ready", stream_mm.ready(x, w))
y = stream_mm.mm(x, w, counters=skinny.counters(x.device))
torch.cuda.synchronize()
print("rel err", ((y.float() - x.float() @ w.float().t()).abs().max() / (x.float() @ w.float().t()).abs().max()).item())
PY
echo "smoke rc $? at $((SECONDS - T0)) s"; cat "$W/smoke.log" | tail -5; save
timeout ${TEST_S:-150} python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_stream_mm_gpu.py \
  tests/runner/test_skinny.py > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
grep -E "^FAILED|^ERROR|Error" "$W/gpu_tests.log" | head -12
mkdir -p "$W/m64" "$W/m32"
timeout ${SKINNY_S:-150} python3 benchmarks/bench_skinny.py --ms 64 --configs stream \
  --shapes o,down,qkv,gate_up,lm_head --out "$W/m64" --budget-s $(( ${SKINNY_S:-150} - 15 )) > "$W/m64/log" 2>&1
echo "bench_skinny 64 rc $? at $((SECONDS - T0)) s"; save
cat "$W/m64/bench_skinny.md"; grep -h '"error"' "$W/m64/bench_skinny.json" | head -3
REST=$(( ${END_S:-560} - (SECONDS - T0) ))
if [ $REST -gt 200 ]; then
  timeout 190 python3 benchmarks/bench_switch.py --var ATTNKIT_STREAM_MM --values 0-0 33-64 \
    --rounds ${ROUNDS:-2} --batches ${BATCHES:-64 48} --out "$W" > "$W/bench_switch.log" 2>&1
  echo "bench_switch rc $? at $((SECONDS - T0)) s"; save
  grep "^round" "$W/bench_switch.log" | tail -20; tail -8 "$W/bench_switch.log"
fi
REST=$(( ${END_S:-560} - (SECONDS - T0) ))
if [ $REST -gt 40 ]; then
  timeout $REST python3 benchmarks/bench_skinny.py --ms 32 --configs stream \
    --shapes o,down,qkv,gate_up --out "$W/m32" --budget-s $(( REST - 10 )) > "$W/m32/log" 2>&1
  echo "bench_skinny 32 rc $? at $((SECONDS - T0)) s"; save
  cat "$W/m32/bench_skinny.md"
fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
save
