#!/usr/bin/env bash
# GPU round of branch mla16 (issue 28, MLA decode at 16 heads), <= 90 s on an H200, from the
# repository root:
#   bash benchmarks/gpu_mla16.sh        (writes $OUT/gpu_mla16.tar.gz: mla16/*)
# 1. GPU tests of the pdl option, time-boxed (tests/triton_mla/test_pdl_gpu.py: float64
#    reference, NaN stale slots, 3 / 40 splits, eager and CUDA graph; round 1 of 2026-12-02
#    also ran ws 32-key-tile tests, commit 4fd4b3f);
# 2. bench_mla16.py: readers of the same latent bytes (torch sum / copy, a Triton page read)
#    and the decode default + candidates (each checked against the float64 reference on a
#    small poisoned case first), under three L2 flush modes, one process; a profiler split of
#    the default's kernels at H 16 B 32 ctx 4k. bench_mla16.json is rewritten after every shape.
set -u
OUT=${OUT:-/tmp/gpu_mla16_out}
D="$OUT/mla16"
mkdir -p "$D"
export PYTHONPATH="$PWD/src:$PWD/tests"
{ date -u; nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > "$D/env.txt" 2>&1
timeout 25 python3 -m pytest -q -m gpu tests/triton_mla/test_pdl_gpu.py -v -p no:cacheprovider \
    > "$D/pytest_pdl.txt" 2>&1
echo "rc=$?" >> "$D/pytest_pdl.txt"
timeout 57 python3 benchmarks/bench_mla16.py --out "$D/bench_mla16.json" --budget 42 \
    > "$D/bench_mla16.log" 2>&1
echo "rc=$?" >> "$D/bench_mla16.log"
tail -3 "$D/pytest_pdl.txt"; grep -c '"us"' "$D/bench_mla16.log"
tar czf "$OUT/gpu_mla16.tar.gz" -C "$OUT" mla16 && rm -rf "$D"     # one file comes back
