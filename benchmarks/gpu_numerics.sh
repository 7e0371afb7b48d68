#!/usr/bin/env bash
# The numerics GPU checks (issue 30), in one call: the bitwise suite's CUDA cases (batch
# invariance, determinism, CUDA-graph replay = eager), sdpa at extreme logits, the runner's
# deterministic mode (alone / in a batch of 64 / twice), then the mode's throughput cost on a
# Llama-3-8B-shaped model, written to benchmarks/results/bench_deterministic.json.
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_numerics.sh [LAYERS]
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
LAYERS=${1:-32}
FINAL=${OUT:-/tmp/attnkit-gpu}; mkdir -p "$FINAL"
python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 \
  tests/conformance/test_bitwise.py tests/backends/test_sdpa_extreme_logits.py \
  tests/runner/test_deterministic_mode.py 2>&1 | tee "$FINAL/numerics_gpu_tests.log" | tail -n 25
timeout 540 python3 benchmarks/bench_deterministic.py --layers "$LAYERS" \
  --json benchmarks/results/bench_deterministic.json 2>&1 | tee "$FINAL/bench_deterministic.log" | tail -n 8
cp benchmarks/results/bench_deterministic.json "$FINAL"/ 2>/dev/null
