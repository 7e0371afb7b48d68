#!/usr/bin/env bash
# Issue 29, final check on the H200 in one call (~2.5 minutes): the Gluon kernels' GPU tests (the
# shipped causal prefill, the non-causal forms, the plan's varlen variants and their launches)
# and triton's varlen conformance per variant; then bench_dit's Wan2.1 720p and FLUX.1 rows (the
# varlen call: tile / gluon / persistent and the plan's own table, next to cuDNN and flash SDPA).
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_dit_final.sh
# Writes under $OUT: env.txt, gpu_tests.log, dit_rows.json, sweep_dit_flux.json (TUNE=1: tune/nvidia-h200.json, tune/tune_varlen.log)
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-dit-final}; mkdir -p "$OUT"
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)" | tee "$OUT/env.txt"
t0=$SECONDS
timeout 70 python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider \
  tests/triton_kernels/test_prefill_gluon_forms_gpu.py tests/triton_kernels/test_prefill_gluon_gpu.py \
  tests/conformance/test_varlen.py -k "gluon or triton or form or persistent or varlen" > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? $((SECONDS - t0))s"; tail -n 4 "$OUT/gpu_tests.log"
t0=$SECONDS
timeout 55 python3 benchmarks/bench_dit.py --rows wan2.1-720p,flux.1-1024 --reps 5 --no-flex --no-forward \
  --out "$OUT/dit_rows.json" 2>&1 | tail -n 4
echo "bench_dit rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
# FLUX.1's persistent tiles (two forms added after call 3, ~20 s): results/sweep_dit.md's FLUX row
timeout 40 python3 benchmarks/sweep_dit.py --set persistent --rows flux.1-1024 --budget-s 30 \
  --out "$OUT/sweep_dit_flux.json" 2>&1 | tail -n 6
# 3 (TUNE=1, ~1.5 min more): the varlen buckets tuned into a copy of the shipped H200 profile
# ($OUT/tune/nvidia-h200.json: commit it as src/attnkit/planning/profiles/nvidia-h200.json and
# the DiT plans print the measured varlen table)
if [ "${TUNE:-0}" = 1 ]; then OUT="$OUT/tune" bash benchmarks/gpu_tune_varlen.sh; fi
