#!/usr/bin/env bash
# Issue 28 (session 2026-12-02f), last call: the GPU suite (every gpu test), the runner's graph
# tests again with ATTNKIT_FUSED_PDL=1, then bench_runner with the fused kernels' PDL switch off
# and on, alternating ROUNDS times (no peers), and the engine step's profile with it on.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_final28.sh
set -u
OUT=${OUT:-.}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
timeout ${SUITE_S:-260} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests > "$OUT/gpu_suite.log" 2>&1
echo "suite rc $? ($(tail -1 "$OUT/gpu_suite.log")) at $((SECONDS - T0)) s"
ATTNKIT_FUSED_PDL=1 timeout 90 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_runner_graphs_gpu.py \
  tests/runner/test_fused_layers.py tests/runner/test_runner_gpu.py > "$OUT/gpu_pdl_tests.log" 2>&1
echo "pdl tests rc $? ($(tail -1 "$OUT/gpu_pdl_tests.log")) at $((SECONDS - T0)) s"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for pdl in 0 1; do
    ATTNKIT_FUSED_PDL=$pdl timeout 90 python3 benchmarks/bench_runner.py --no-peer --no-compile --no-greedy-check \
      --json "$OUT/runner_pdl${pdl}_r$r.json" > /dev/null 2>&1
    echo "bench_runner pdl=$pdl round $r rc=$? at $((SECONDS - T0)) s"
  done
done
ATTNKIT_FUSED_PDL=1 timeout 60 python3 benchmarks/profile_engine_step.py --batches 1,64 --steps 16 --out "$OUT" > /dev/null 2>&1
echo "profile rc $? at $((SECONDS - T0)) s"
python3 - "$OUT" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/runner_pdl*.json")):
    rows = json.load(open(f))["rows"]
    print(f.rsplit("/", 1)[1], [(r["case"][:14], r["peer"][13:], round(r["tok_s"])) for r in rows if r.get("tok_s")])
PY
grep -E "^### " "$OUT/profile_engine_step.md"
cd "$OUT" && tar czf runner_pdl.tgz runner_pdl*.json && rm -f runner_pdl*.json
