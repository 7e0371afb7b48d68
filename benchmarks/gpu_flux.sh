#!/usr/bin/env bash
# Issue 29's FLUX.1 bar on the H200 in one call (<= 100 s): DiT rows timed by one method
# (attnkit.tune.timing.measure: CUDA-graph replays, the eager call beside, cold L2, medians),
# peers (cuDNN and flash SDPA, attnkit's sdpa backend) in the same process, each output checked
# against flash SDPA's before it is timed (a wrong one is never timed; a cell that fails is a
# cell, the others go on).
#   1. bench_dit, FLUX.1: the varlen cells gluon, persistent, plan, sdpa, split (the declared
#      varlen_gluon_split, head-major) and the GPU kernels each SDPA cell ran     cap 30 s
#   2. GPU tests (8 workers): the split tail against SDPA (FLUX, ragged, fewer items than SMs),
#      no sync inside a varlen call (sync debug mode), the Gluon forms (causal too) cap 40 s
#   3. bench_dit, Wan2.1 720p: gluon, plan, split                                 cap 25 s
# (round 1, 04:29 UTC, ran the kernel sweep at FLUX: sweep_dit.py --forms, RESULTS.md)
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_flux.sh
# Writes $OUT/flux.tar.gz holding run.log (versions first), dit_flux.json, dit_wan.json,
# gpu_tests.log, dit_table.md (bench_dit --table of both bench runs).
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-flux}; mkdir -p "$OUT"
W=$(mktemp -d)

main() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  start=$SECONDS
  t0=$SECONDS
  timeout 30 python3 benchmarks/bench_dit.py --rows flux.1-1024 --reps 20 --no-flex --no-forward \
    --cells gluon,persistent,plan,sdpa,split --out "$W/dit_flux.json" 2>&1 | tail -n 4
  echo "1. bench_dit flux rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
  t0=$SECONDS
  timeout 40 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/triton_kernels/test_split_tail.py \
    tests/backends/test_varlen_host_work.py tests/triton_kernels/test_prefill_gluon_forms_gpu.py \
    > "$W/gpu_tests.log" 2>&1
  echo "2. gpu tests rc=$? $((SECONDS - t0))s"; tail -n 5 "$W/gpu_tests.log"
  t0=$SECONDS
  timeout 25 python3 benchmarks/bench_dit.py --rows wan2.1-720p --reps 5 --no-flex --no-forward \
    --cells gluon,plan,split --out "$W/dit_wan.json" 2>&1 | tail -n 3
  echo "3. bench_dit wan 720p rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
  python3 benchmarks/bench_dit.py --table "$W/dit_flux.json" "$W/dit_wan.json" > "$W/dit_table.md" 2>&1
  cat "$W/dit_table.md"
  echo "total $((SECONDS - start))s"
}

main 2>&1 | tee "$W/run.log"
tar -czf "$OUT/flux.tar.gz" -C "$W" .
echo "wrote $OUT/flux.tar.gz"
