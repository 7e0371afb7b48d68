#!/usr/bin/env bash
# Issue 28, engine (session 2026-12-02g, second call): which of skinny.py's prologue folds pay.
# bench_fold.py (a layer's products, 32 layers in one graph, five ways) with the PDL switch
# off and on; then bench_runner with ATTNKIT_SKINNY=0 and with each ATTNKIT_SKINNY_FOLD.
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_engine28c.sh
set -u
OUT=${OUT:-.}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/runner/test_skinny.py > "$OUT/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$OUT/gpu_tests.log")) at $((SECONDS - T0)) s"
for pdl in 0 1; do
  ATTNKIT_FUSED_PDL=$pdl timeout 120 python3 benchmarks/bench_fold.py --ms ${MS:-1,4,16} --out "$OUT" > "$OUT/bench_fold_$pdl.log" 2>&1
  echo "bench_fold pdl=$pdl rc $? at $((SECONDS - T0)) s"
done
run() {   # run NAME SKINNY FOLD PDL
  ATTNKIT_SKINNY=$2 ATTNKIT_SKINNY_FOLD=$3 ATTNKIT_FUSED_PDL=$4 timeout 100 python3 benchmarks/bench_runner.py --no-peer \
    --no-compile --no-greedy-check --json "$OUT/runner_$1.json" > "$OUT/runner_$1.log" 2>&1
  echo "bench_runner $1 rc=$? at $((SECONDS - T0)) s"
}
for spec in ${RUNS:-off:0:none:0 none:1:none:0 norm:1:norm:0 silu:1:silu:0 both:1:norm,silu:0}; do
  IFS=: read -r name sk fold pdl <<< "$spec"
  run "$name" "$sk" "$fold" "$pdl"
done
python3 - "$OUT" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/runner_*.json")):
    rows = json.load(open(f))["rows"]
    print(f.rsplit("/", 1)[1], [(r["case"][:14], r["peer"][13:], round(r["tok_s"])) for r in rows if r.get("tok_s")])
PY
cat "$OUT"/bench_fold*.md
tail -3 "$OUT"/bench_fold_*.log
grep -E "passed|failed|Error" "$OUT/gpu_tests.log" | tail -5
cd "$OUT" && tar czf runner.tgz runner_*.json runner_*.log && rm -f runner_*.json runner_*.log
