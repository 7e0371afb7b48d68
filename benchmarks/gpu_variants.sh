#!/usr/bin/env bash
# Issue 24 on the GPU machine, one call: the GPU tests of the backends whose kernels the plan now
# chooses (tables of variants), then the H200 profile re-tuned with every variant timed.
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_variants.sh [TESTS...]
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-variants}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
TESTS=${*:-tests/triton_kernels tests/triton_mla tests/conformance tests/backends tests/dual_chunk}
t0=$SECONDS
timeout 240 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider $TESTS > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? $((SECONDS - t0))s"; tail -n 15 "$OUT/gpu_tests.log"
rm -f /tmp/nvidia-h200.json; t0=$SECONDS
timeout 330 python3 -m attnkit tune --out /tmp/nvidia-h200.json 2> "$OUT/tune.log"
echo "tune rc=$? $((SECONDS - t0))s"; tail -n 3 "$OUT/tune.log"
cp /tmp/nvidia-h200.json "$OUT/nvidia-h200.json"
gzip -f "$OUT/tune.log"
