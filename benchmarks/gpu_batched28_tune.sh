#!/usr/bin/env bash
# Issue 28 after batched28's round, for the lead (one call, ~3-5 min): the H200 profile resumed
# with the gluon_rows_chain entries (attnkit tune measures only what the shipped profile lacks:
# the triton prefill / extend buckets' new variant), the plan's kernel tables for Llama-3.1-8B
# printed, then bench_batched28.py again (8 x 2k, 4 x 4k, 16 x 1k, 1 x 16k, 2k over 32k: the
# chained kernel's walks against gluon_rows_persistent / gluon / gluon_rows, cuDNN and flash in
# one process), then the chained kernel's GPU tests.
# Usage (repository root, CUDA machine): bash benchmarks/gpu_batched28_tune.sh. Writes under
# $OUT: env.txt, tune.log, nvidia-h200.json (the resumed profile: copy it over the shipped one),
# plan.txt, bench_batched28.md / .jsonl, bench.log, tests.log.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-batched28-tune}; mkdir -p "$OUT"
PROFILE=src/attnkit/planning/profiles/nvidia-h200.json
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
timeout -k 5 200 python3 -m attnkit tune --backends triton --phase prefill --out "$PROFILE" 2> "$OUT/tune.log"
echo "tune rc=$?"; tail -n 3 "$OUT/tune.log"; cp "$PROFILE" "$OUT/"
python3 -m attnkit plan llama-3.1-8b --device h200 > "$OUT/plan.txt" 2>&1; grep -A4 "kernels for" "$OUT/plan.txt" | head -20
timeout -k 3 60 python3 benchmarks/bench_batched28.py --out "$OUT" --budget-s 50 > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; tail -n 40 "$OUT/bench.log"
timeout -k 3 45 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/triton_kernels/test_prefill_gluon_chain_gpu.py > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -n 3 "$OUT/tests.log"
