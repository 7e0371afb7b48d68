#!/usr/bin/env bash
# Issue 29's FLUX.1 bar on the H200 in one call (<= 100 s): every DiT row and kernel form timed
# by one method (attnkit.tune.timing.measure: CUDA-graph replays, the eager call beside, cold L2,
# medians), peers (cuDNN and flash SDPA, attnkit's sdpa backend) in the same process, each output
# checked against flash SDPA's before it is timed (a wrong one is never timed; a form that fails
# to compile is a cell, the others go on).
#   1. bench_dit, FLUX.1: every varlen cell (tile, gluon, persistent, split, the plan's table, sdpa) and
#      the GPU kernels each SDPA cell ran (torch.profiler)                        cap 30 s
#   2. sweep_dit, FLUX.1: the persistent form, then with the split tail (the last wave's items
#      cut along the keys over every program), tiles, orders                      cap 30 s
#   3. bench_dit, Wan2.1 720p, Wan2.1 480p, HunyuanVideo 720p: the gluon and plan cells
#                                                                                 cap 25 s
#   4. GPU tests, the rest of the 96 s (8 workers): the split tail against SDPA, no sync inside
#      a varlen call (torch's sync debug mode), the Gluon forms (causal too: _block changed)
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_flux.sh
# Writes $OUT/flux.tar.gz holding run.log (versions first), dit_flux.json, sweep_flux.json,
# dit_more.json, gpu_tests.log, dit_table.md (bench_dit --table of both bench runs),
# sweep_flux.md (sweep_dit --summary).
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-flux}; mkdir -p "$OUT"
W=$(mktemp -d)
FLUX_FORMS=persistent_block_major,persistent_split_block_major,persistent_split_block_major_128_2_2,persistent_block_major_128_2_2,persistent_split_head_major,block_major_128_2_2

main() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  start=$SECONDS
  t0=$SECONDS
  timeout 30 python3 benchmarks/bench_dit.py --rows flux.1-1024 --reps 20 --no-flex --no-forward \
    --out "$W/dit_flux.json" 2>&1 | tail -n 4
  echo "1. bench_dit flux rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
  t0=$SECONDS
  timeout 30 python3 benchmarks/sweep_dit.py --rows flux.1-1024 --forms "$FLUX_FORMS" --reps 20 \
    --budget-s 24 --out "$W/sweep_flux.json" 2>&1 | tail -n 12
  echo "2. sweep flux rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
  t0=$SECONDS
  timeout 25 python3 benchmarks/bench_dit.py --rows wan2.1-720p,wan2.1-480p,hunyuanvideo-720p --reps 5 \
    --no-flex --no-forward --cells gluon,plan --out "$W/dit_more.json" 2>&1 | tail -n 5
  echo "3. bench_dit wan / hunyuan rc=${PIPESTATUS[0]} $((SECONDS - t0))s"
  t0=$SECONDS
  left=$((96 - (SECONDS - start))); [ "$left" -lt 5 ] && left=5
  timeout "$left" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/triton_kernels/test_split_tail.py \
    tests/backends/test_varlen_host_work.py tests/triton_kernels/test_prefill_gluon_forms_gpu.py \
    > "$W/gpu_tests.log" 2>&1
  echo "4. gpu tests rc=$? $((SECONDS - t0))s"; tail -n 3 "$W/gpu_tests.log"
  python3 benchmarks/bench_dit.py --table "$W/dit_flux.json" "$W/dit_more.json" > "$W/dit_table.md" 2>&1
  python3 benchmarks/sweep_dit.py --summary "$W/sweep_flux.json" > "$W/sweep_flux.md" 2>&1
  cat "$W/dit_table.md" "$W/sweep_flux.md"
  echo "total $((SECONDS - start))s"
}

main 2>&1 | tee "$W/run.log"
tar -czf "$OUT/flux.tar.gz" -C "$W" .
echo "wrote $OUT/flux.tar.gz"
