#!/usr/bin/env bash
# GPU round of the 16-head MLA decode work (issue 28; NOTES-mla.md versions 8 and 9), <= 4 min
# on an H200, from the repository root:
#   bash benchmarks/gpu_mla16.sh        (writes $OUT/gpu_mla16.tar.gz: mla16/*)
# 1. GPU tests of column_split's fused split merge (version 9), time-boxed:
#    tests/triton_mla/test_merge_gpu.py (float64 reference, NaN stale slots, 16 / 64 / 128 heads,
#    3 / 8 / 40 splits, no reduce launch, tickets left zero, two calls and two CUDA-graph replays
#    bitwise equal), the static-step capture case of the switch (tests/conformance), the plan's
#    tiles on this GPU (test_launch_configs), and the pdl option's tests (version 8);
# 2. bench_mla16.py: readers of the same latent bytes (torch sum / copy, a Triton page read)
#    and the decode default + candidates (each checked against the float64 reference on a
#    small poisoned case first), under three L2 flush modes, one process; profiler splits of
#    the default's and the fused merge's kernels at H 16 B 32 ctx 4k; the v2 kernels' registers.
#    bench_mla16.json is rewritten after every shape.
set -u
OUT=${OUT:-/tmp/gpu_mla16_out}
D="$OUT/mla16"
mkdir -p "$D"
export PYTHONPATH="$PWD/src:$PWD/tests"
{ date -u; nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > "$D/env.txt" 2>&1
CAPTURE="tests/conformance/test_capture.py::test_static_step_replays_match_the_reference"
CAPTURE="$CAPTURE[triton_mla-cuda-mla-bf16-p16-plain-variantv2-num_splits3-merge_splits256]"
timeout 150 python3 -m pytest -q -m gpu tests/triton_mla/test_merge_gpu.py tests/triton_mla/test_pdl_gpu.py \
    tests/triton_mla/test_launch_configs.py "$CAPTURE" -v -p no:cacheprovider > "$D/pytest_gpu.txt" 2>&1
echo "rc=$?" >> "$D/pytest_gpu.txt"
timeout 75 python3 benchmarks/bench_mla16.py --out "$D/bench_mla16.json" --budget 55 \
    > "$D/bench_mla16.log" 2>&1
echo "rc=$?" >> "$D/bench_mla16.log"
tail -3 "$D/pytest_gpu.txt"; grep -c '"us"' "$D/bench_mla16.log"
tar czf "$OUT/gpu_mla16.tar.gz" -C "$OUT" mla16 && rm -rf "$D"     # one file comes back
