#!/usr/bin/env bash
# GPU round of branch mla28 (issue 28, MLA decode), <= 100 s on an H200, from the repository root:
#   bash benchmarks/gpu_mla28.sh        (writes $OUT/gpu_mla28.tar.gz: mla28/*)
# 1. the Gluon (ws) kernel's GPU tests: float64 reference, NaN stale slots, splits, verify,
#    fallback; time-boxed (the 2026-12-02 round ran the seesaw candidate's here: commit 9eaf465);
# 2. bench_mla_candidates.py: each candidate checked against the float64 reference on a small
#    case, then timed with the current default in one process (bars first).
set -u
OUT=${OUT:-/tmp/gpu_mla28_out}
D="$OUT/mla28"
mkdir -p "$D"
export PYTHONPATH="$PWD/src:$PWD/tests"
{ date -u; nvidia-smi -L; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > "$D/env.txt" 2>&1
timeout 35 python3 -m pytest -q -m gpu tests/triton_mla/test_gluon_gpu.py -v -p no:cacheprovider \
    > "$D/pytest_gluon.txt" 2>&1
echo "rc=$?" >> "$D/pytest_gluon.txt"
timeout 58 python3 benchmarks/bench_mla_candidates.py --out "$D/candidates.json" --budget 38 \
    > "$D/candidates.log" 2>&1
echo "rc=$?" >> "$D/candidates.log"
tail -3 "$D/pytest_gluon.txt"; grep -c '"us"' "$D/candidates.log"
tar czf "$OUT/gpu_mla28.tar.gz" -C "$OUT" mla28 && rm -rf "$D"     # one file comes back
