#!/usr/bin/env bash
# Issue 29, the DiT kernel sweep on the H200 in one call (< 4 minutes): the Gluon kernel's GPU
# tests (the shipped causal kernel changed shape: ring counters carry a base; the new forms),
# then benchmarks/sweep_dit.py's main set (one program a block: orders, tiles) and, in a process
# and timeout of its own, the persistent kernel's set; cuDNN and flash SDPA are re-timed in each.
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_dit_sweep.sh
# Writes under $OUT: env.txt, gluon_tests.log, sweep_dit.json, sweep_dit_persistent.json, sweep.log,
# sweep_dit.md (the table printed last)
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-dit}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
t0=$SECONDS
timeout 60 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
  tests/triton_kernels/test_prefill_gluon_forms_gpu.py tests/triton_kernels/test_prefill_gluon_gpu.py \
  tests/conformance/test_varlen.py \
  > "$OUT/gluon_tests.log" 2>&1
echo "gluon tests rc=$? $((SECONDS - t0))s"; tail -n 8 "$OUT/gluon_tests.log"
t0=$SECONDS
timeout 120 python3 benchmarks/sweep_dit.py --set main --budget-s 100 --out "$OUT/sweep_dit.json" 2>&1 | tee "$OUT/sweep.log"
echo "main set rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
t0=$SECONDS
timeout 60 python3 benchmarks/sweep_dit.py --set persistent --budget-s 40 --out "$OUT/sweep_dit_persistent.json" 2>&1 | tee -a "$OUT/sweep.log"
echo "persistent set rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
python3 benchmarks/sweep_dit.py --summary "$OUT/sweep_dit.json" "$OUT/sweep_dit_persistent.json" | tee "$OUT/sweep_dit.md"
