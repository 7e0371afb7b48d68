#!/usr/bin/env bash
# Issue 28 on the H200 in one call (<= 100 s): the Gluon rows kernel's GPU tests (and the
# gluon_rows rows of test_triton_gpu.py::test_page_sizes: pages of 1 to 128; batched fresh
# prefills of unequal lengths, cached prefixes with NaN / inf in unowned pages, GQA / MQA, fp16,
# d64 / d128 / d256, the grid forms) against the float64 reference, then bench_prefill28.py:
# 8 x 2k prefill, extend 2k over 32k and 1 x 16k, tma / gluon / gluon_rows /
# gluon_rows_persistent with cuDNN and flash SDPA (FlexAttention if time is left) in one process.
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_prefill28.sh
# Writes $OUT/prefill28.tar.gz holding env.txt, rows_tests.log, bench.log, bench_prefill28.jsonl,
# bench_prefill28.md (also copied to $OUT as they are).
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-prefill28}; mkdir -p "$OUT"
W="$OUT/prefill28"; mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$W/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$W/env.txt"
t0=$SECONDS
timeout 45 python3 -m pytest -v --tb=short -m gpu -n 8 -p no:cacheprovider \
  tests/triton_kernels/test_prefill_gluon_rows_gpu.py \
  "tests/triton_kernels/test_triton_gpu.py::test_page_sizes" -k "gluon_rows or prefill_gluon_rows" > "$W/rows_tests.log" 2>&1
echo "rows tests rc=$? $((SECONDS - t0))s" | tee -a "$W/env.txt"; grep -E "FAILED|ERROR|passed|failed" "$W/rows_tests.log" | tail -n 30
t0=$SECONDS
timeout 50 python3 benchmarks/bench_prefill28.py --out "$W" --budget-s 40 > "$W/bench.log" 2>&1
echo "bench rc=$? $((SECONDS - t0))s" | tee -a "$W/env.txt"; tail -n 40 "$W/bench.log"
tar czf "$OUT/prefill28.tar.gz" -C "$OUT" prefill28
cp "$W/bench_prefill28.md" "$W/rows_tests.log" "$OUT/" 2>/dev/null || true
