#!/usr/bin/env bash
# Issue 28 (session 2026-12-04e), call 3: the chained prefill's geometry table (NOTES-hopper.md
# version 14) tested (test_prefill_gluon_chain_gpu.py, geo cases beside the rest) and timed
# (bench_batched28.py: gluon_rows_chain with and without configs.GLUON_CHAIN_GEO through the
# backend, and the kernel alone "lpt+geo", cuDNN / flash in the same process), and call 2's
# ws test fix re-run. Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${TEST_S:-150} python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
  tests/triton_kernels/test_prefill_gluon_chain_gpu.py tests/triton_mla/test_gluon_gpu.py \
  > "$W/tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/tests.log")) at $((SECONDS - T0)) s"
grep -E "^FAILED|^ERROR" "$W/tests.log" | head -20
timeout ${BENCH_S:-200} python3 benchmarks/bench_batched28.py --out "$W" --budget-s ${BUDGET_S:-170} \
  > "$W/bench.log" 2>&1
echo "bench rc $? at $((SECONDS - T0)) s"; save
cat "$W/bench_batched28.md" 2>/dev/null | cut -c1-220
