#!/usr/bin/env bash
# Issue 28 after the round, for the lead (one call, ~4-6 min): the H200 profile resumed with the
# gluon_rows / gluon_rows_persistent entries (attnkit tune measures only what the shipped profile
# lacks: 20 jobs, the triton prefill / extend buckets), then the plan's kernel tables for
# Llama-3.1-8B printed, then bench_prefill28.py again (8 x 2k, 2k over 32k, 16k d128: tma, gluon,
# both rows forms, cuDNN / flash / Flex in one process; the kernel alone on 16 x 1k .. 1 x 16k).
# Usage (repository root, CUDA machine): bash benchmarks/gpu_prefill28_tune.sh. Writes under $OUT: env.txt, tune.log, nvidia-h200.json
# (the resumed profile: copy it over the shipped one), plan.txt, bench_prefill28.md / .jsonl,
# bench.log.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-prefill28-tune}; mkdir -p "$OUT"
PROFILE=src/attnkit/planning/profiles/nvidia-h200.json
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
timeout 240 python3 -m attnkit tune --backends triton --phase prefill --out "$PROFILE" 2> "$OUT/tune.log"
echo "tune rc=$?"; tail -n 3 "$OUT/tune.log"; cp "$PROFILE" "$OUT/"
python3 -m attnkit plan llama-3.1-8b --device h200 > "$OUT/plan.txt" 2>&1; grep -A4 "kernels for" "$OUT/plan.txt" | head -20
timeout 90 python3 benchmarks/bench_prefill28.py --out "$OUT" --budget-s 80 --lengths > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; tail -n 30 "$OUT/bench.log"
