#!/usr/bin/env bash
# triton_dsa's CUDA graphs (issue 27) in one call, <= 100 s on an H200:
# 1. GPU tests (50 s box, one pytest run): the capture conformance cases of triton_dsa (capture once, replay
#    other lengths / tables / padded rows against the float64 DSA reference), the runner's
#    deepseek_v32 decoding with captured graphs vs eager, triton_dsa's kernel and runner GPU
#    tests; the DSA cases on cuda for non-finite (NaN / inf) index keys;
# 2. bench_dsa.py (45 s box; rows are saved as they come): decode rows ctx 8k/32k/128k x
#    B 1/8/64/128, prefill rows (4k over 32k, fresh 8k), the indexer + top-k share, the
#    whole-layer step as a CUDA graph vs eager, tile rows.
# Usage (repository root, CUDA machine): bash benchmarks/gpu_dsagraph.sh
# Writes under $OUT: dsagraph.tar.gz (env.txt, gpu_tests.log, bench_dsa.log, bench_dsa.json,
# bench_dsa.md, junit.xml), plus bench_dsa.json, bench_dsa.md and summary.txt beside it.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-gpu}; mkdir -p "$OUT"
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$WORK/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$WORK/env.txt"
step() {  # step NAME SECONDS CMD...: one part, time-boxed; its failure does not stop the next
  local name=$1 secs=$2; shift 2
  echo "== $name"; local t0=$SECONDS
  timeout "$secs" "$@" > "$WORK/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0))s" | tee -a "$WORK/summary.txt"; tail -n 30 "$WORK/$name.log"
}
step gpu_tests 50 python3 -m pytest -q -m gpu -n 6 -p no:cacheprovider --junitxml="$WORK/junit.xml" \
  tests/conformance/test_capture.py tests/runner/test_runner_dsa_triton.py \
  tests/runner/test_runner_deepseek_v32_gpu.py tests/triton_dsa tests/conformance/test_dsa_nan_keys.py \
  -k "triton_dsa or test_each or test_cuda"
step bench_dsa 45 python3 benchmarks/bench_dsa.py --out "$WORK"
grep -E "passed|failed|error" "$WORK/gpu_tests.log" | tail -n 2 >> "$WORK/summary.txt"
cp "$WORK"/bench_dsa.json "$WORK"/bench_dsa.md "$OUT"/ 2>/dev/null
cp "$WORK/summary.txt" "$OUT/"
tar -czf "$OUT/dsagraph.tar.gz" -C "$WORK" .
ls -l "$OUT"
