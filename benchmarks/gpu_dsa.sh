#!/usr/bin/env bash
# triton_dsa on the GPU in one call (< 4 min on an H200): its GPU kernel tests and the DSA
# conformance cases on cuda (tests/conformance/test_dsa.py), then bench_dsa.py.
# Usage (repository root, CUDA machine): bash benchmarks/gpu_dsa.sh
# Writes under $OUT: env.txt, gpu_tests.log, bench_dsa.log, bench_dsa.json, bench_dsa.md.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-gpu}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  echo "== $name"; local t0=$SECONDS
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0))s"; tail -n 25 "$OUT/$name.log"
}
step gpu_tests 110 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/triton_dsa tests/runner/test_runner_dsa_triton.py tests/runner/test_runner_deepseek_v32_gpu.py tests/conformance/test_dsa.py -k "triton_dsa or test_gpu or test_cuda or test_each"
step bench_dsa 130 python3 benchmarks/bench_dsa.py --out "$OUT"
