#!/usr/bin/env bash
# Issue 28's batched fresh prefill on the H200 in one call (<= 90 s; NOTES-hopper.md version 13):
# the chained rows kernel's GPU tests (test_prefill_gluon_chain_gpu.py: batched fresh prefills of
# unequal lengths, cached prefixes with NaN / inf in unowned pages, GQA / MQA, fp16, d64 / d128,
# every walk at 1 to more-than-items programs) against the float64 reference, then
# bench_batched28.py: 8 x 2k, 4 x 4k, 16 x 1k, 1 x 16k and extend 2k over 32k, the chained
# kernel's walks and tiles against gluon_rows_persistent / gluon / gluon_rows, cuDNN and flash
# SDPA in the same process (graph and eager).
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_batched28.sh
# Writes $OUT/batched28.tar.gz (env.txt, tests.log, bench.log, bench_batched28.jsonl / .md),
# and bench_batched28.md, tests.log beside it.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-batched28}; mkdir -p "$OUT"
W="$OUT/batched28"; mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$W/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$W/env.txt"
git log --oneline -1 2>/dev/null | tee -a "$W/env.txt"
t0=$SECONDS
timeout -k 3 32 python3 -m pytest -v --tb=short -m gpu -n 8 -p no:cacheprovider \
  tests/triton_kernels/test_prefill_gluon_chain_gpu.py > "$W/tests.log" 2>&1
echo "chain tests rc=$? $((SECONDS - t0))s" | tee -a "$W/env.txt"; grep -E "FAILED|ERROR|passed|failed" "$W/tests.log" | tail -n 30
t0=$SECONDS
timeout -k 3 48 python3 benchmarks/bench_batched28.py --out "$W" --budget-s 42 > "$W/bench.log" 2>&1
echo "bench rc=$? $((SECONDS - t0))s" | tee -a "$W/env.txt"; tail -n 45 "$W/bench.log"
tar czf "$OUT/batched28.tar.gz" -C "$OUT" batched28
cp "$W/bench_batched28.md" "$W/tests.log" "$OUT/" 2>/dev/null || true
