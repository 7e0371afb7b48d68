#!/usr/bin/env bash
# Issue 28, engine (session 2026-12-03a, second call): programmatic dependent launch with the
# early trigger (ATTNKIT_FUSED_PDL=early) and deeper W prefetch (ATTNKIT_SKINNY_PREFETCH).
# The PDL tests; bench_fold (cublas and the default way) under each switch; bench_runner
# alternating PDL 0 / 1 / early / early with 4 tiles ROUNDS times; the step's profile under
# PDL 0 and early. Everything lands in $OUT/c.tgz (the device returns a few files only).
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_engine28e.sh
set -u
OUT=${OUT:-.}
W=$(mktemp -d)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$SECONDS
save() { tar czf "$OUT/c.tgz" -C "$W" .; }          # after every step: a cut-off call keeps its rows
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
timeout 100 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/runner/test_skinny.py \
  tests/runner/test_fused_layers.py -k "programmatic or pdl" > "$W/gpu_tests.log" 2>&1
echo "tests rc $? ($(tail -1 "$W/gpu_tests.log")) at $((SECONDS - T0)) s"; save
for spec in 0:1 1:1 1:4 early:1 early:2 early:4; do
  IFS=: read -r pdl pf <<< "$spec"
  ATTNKIT_FUSED_PDL=$pdl ATTNKIT_SKINNY_PREFETCH=$pf timeout 40 python3 benchmarks/bench_fold.py \
    --ms 1,4,16 --ways cublas none --out "$W" > "$W/fold_${pdl}_$pf.log" 2>&1
  echo "bench_fold pdl=$pdl prefetch=$pf rc $? at $((SECONDS - T0)) s"; save
done
run() {   # run NAME PDL PREFETCH
  ATTNKIT_FUSED_PDL=$2 ATTNKIT_SKINNY_PREFETCH=$3 timeout 60 python3 benchmarks/bench_runner.py --no-peer \
    --no-compile --no-greedy-check --json "$W/runner_$1.json" > "$W/runner_$1.log" 2>&1
  echo "bench_runner $1 (pdl=$2 prefetch=$3) rc=$? at $((SECONDS - T0)) s"; save
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  run "pdl0_r$r" 0 1
  run "pdl1_r$r" 1 1
  run "early_r$r" early 1
  run "early4_r$r" early 4
done
for pdl in 0 early; do
  mkdir -p "$W/profile_$pdl"
  ATTNKIT_FUSED_PDL=$pdl timeout 40 python3 benchmarks/profile_engine_step.py --batches 1,16,64 --steps 16 \
    --out "$W/profile_$pdl" > "$W/profile_$pdl/profile.log" 2>&1
  echo "profile pdl=$pdl rc $? at $((SECONDS - T0)) s"; save
done
python3 - "$W" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/runner_*.json")):
    rows = json.load(open(f))["rows"]
    print(f.rsplit("/", 1)[1], [(r["case"][:14], r["peer"][13:], round(r["tok_s"])) for r in rows if r.get("tok_s")])
PY
for pdl in 0 early; do grep -E "^### " "$W/profile_$pdl/profile_engine_step.md"; done
grep -h -E "^## |^\| [0-9]" "$W"/bench_fold*.md
grep -E "passed|failed|Error" "$W/gpu_tests.log" | tail -8
tar czf "$OUT/c.tgz" -C "$W" .
