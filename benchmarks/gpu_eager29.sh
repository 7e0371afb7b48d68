#!/usr/bin/env bash
# Issue 29, eager29 on the H200 in one call (<= 90 s): the eager varlen call's host time.
# (Round 1, 06:32 UTC: results/eager29/; its step 4 was cut at 22 s, now 38 s.)
#   1. GPU tests (8 workers): no sync inside a varlen call (sync debug mode), repeated calls of
#      several shapes / bases (the cached decisions and descriptors), the split tail against
#      SDPA, triton's varlen conformance per variant                              cap 12 s
#   2. profile_varlen_host.py, FLUX.1: host us of one call per cell (GPU idle; GPU busy: a sync
#      shows as ~10-20 ms), with this branch's caches off (merge28's per-call work) and on, the
#      split call piece by piece (validation, decision, descriptors, Triton's launcher, merge),
#      cProfile in us a call                                                      cap 22 s
#   3. bench_dit FLUX.1 (cuDNN and flash peers, attnkit gluon / split / plan / sdpa: graph
#      replays and eager, host us a call; its kernels compiled by step 2)        cap 16 s
#   4. bench_dit Wan2.1 720p and HunyuanVideo 720p (peers, plan / split)          cap 38 s
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_eager29.sh
# Writes $OUT/eager29.tar.gz: run.log (versions first), gpu_tests.log, varlen_host.json,
# dit_flux.json, dit_video.json, dit_table.md (bench_dit --table of both bench runs).
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-eager29}; mkdir -p "$OUT"
W=$(mktemp -d)

main() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  start=$SECONDS
  t0=$SECONDS
  timeout 12 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/backends/test_varlen_host_work.py \
    tests/triton_kernels/test_split_tail.py tests/triton_kernels/test_gluon_host.py \
    tests/conformance/test_varlen.py -k "triton or split_tail or repeated" > "$W/gpu_tests.log" 2>&1
  echo "1. gpu tests rc=$? $((SECONDS - t0))s"; tail -n 6 "$W/gpu_tests.log"
  t0=$SECONDS
  timeout 22 python3 benchmarks/profile_varlen_host.py --row flux.1-1024 --out "$W/varlen_host.json" 2>&1 | tail -n 40
  echo "2. profile_varlen_host rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
  t0=$SECONDS
  timeout 16 python3 benchmarks/bench_dit.py --rows flux.1-1024 --reps 10 --no-flex --no-forward \
    --cells gluon,split,plan,sdpa --out "$W/dit_flux.json" 2>&1 | grep -v Warn | tail -n 3
  echo "3. bench_dit flux rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
  t0=$SECONDS
  timeout 38 python3 benchmarks/bench_dit.py --rows wan2.1-720p,hunyuanvideo-720p --reps 3 --no-flex \
    --no-forward --cells plan,split --out "$W/dit_video.json" 2>&1 | grep -v Warn | tail -n 3
  echo "4. bench_dit wan / hunyuan rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
  python3 benchmarks/bench_dit.py --table "$W/dit_flux.json" "$W/dit_video.json" > "$W/dit_table.md" 2>&1
  cat "$W/dit_table.md"
  echo "total $((SECONDS - start))s"
}

main 2>&1 | tee "$W/run.log"
tar -czf "$OUT/eager29.tar.gz" -C "$W" .
echo "wrote $OUT/eager29.tar.gz"
