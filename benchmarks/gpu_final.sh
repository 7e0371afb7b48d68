#!/usr/bin/env bash
# A session's last GPU call, in one command (under 10 minutes on an H200), each step time-boxed:
#   1. the whole GPU suite on the tree as merged;
#   2. the H200 profile re-tuned where kernels changed (DROP: comma-separated backends or backend:phase whose entries
#      are dropped and measured again; TUNE_ARGS: ';'-separated `attnkit tune` argument lists, each
#      resuming: only what the profile lacks is measured); the result replaces this copy's shipped
#      profile for the steps below;
#   3. bench_dit's FLUX row (DIT_ROWS), every cell by CUDA-graph replays;
#   4. issue 24's prev / new round where rows moved: bench_triton's prefill rows (rerun_rows.py) and
#      bench_mla, by .prev/ (the previous default's tree, carried) and by this tree;
#   5. bench_selection over every row with the re-tuned profile.
#   6. "benches" (not in the default): bench_triton and bench_mla over all their rows (issue 28).
# STEPS picks steps by name (default: suite tune dit rows selection), so one session's final can be
# two back-to-back calls; a call without "tune" uses the tree's shipped profile as it is.
# Usage (repository root): DROP=... TUNE_ARGS="..." [STEPS="suite tune"] bash benchmarks/gpu_final.sh
#   -> $OUT/final.tgz (with the re-tuned profile, final/nvidia-h200.json, when "tune" ran)
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-final}; W=$OUT/final; mkdir -p "$W"
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)" | tee "$W/env.txt"
box() {  # box NAME SECONDS CMD...: run CMD under a time box, its output to $W/NAME.log
  local name=$1 secs=$2; shift 2; local t0=$SECONDS
  timeout -k 5 "$secs" "$@" > "$W/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0))s"; grep -E "^(FAILED|ERROR)| passed| failed|^wrote|row\(s\)|within" "$W/$name.log" | tail -n 30
}
STEPS=" ${STEPS:-suite tune dit rows selection} "
step() { [[ "$STEPS" == *" $1 "* ]]; }
step suite && PYTHONPATH=src box gpu_all "${SUITE_S:-180}" python3 -m pytest -q -m gpu -n "${SUITE_N:-16}" -p no:cacheprovider -rfE tests
SHIPPED=src/attnkit/planning/profiles/nvidia-h200.json; P=$W/nvidia-h200.json
if step tune; then
python3 - "$P" "${DROP:-}" <<'PY'
import json, sys
p = json.load(open("src/attnkit/planning/profiles/nvidia-h200.json"))
drop = {b for b in sys.argv[2].split(",") if b}       # "backend" or "backend:phase"
p["entries"] = [e for e in p["entries"] if e["backend"] not in drop and f'{e["backend"]}:{e["phase"]}' not in drop]
json.dump(p, open(sys.argv[1], "w"), indent=1)
print("profile entries kept:", len(p["entries"]), "dropped backends:", sorted(drop))
PY
i=0; IFS=';' read -ra tunes <<< "${TUNE_ARGS:-}"
for t in "${tunes[@]}"; do
  i=$((i + 1)); read -ra a <<< "$t"
  PYTHONPATH=src box "tune_$i" "${TUNE_S:-40}" python3 -m attnkit tune "${a[@]}" --out "$P"
  tail -n 4 "$W/tune_$i.log"
done
cp "$P" "$SHIPPED"
fi
if step dit; then
PYTHONPATH=src box bench_dit "${DIT_S:-30}" python3 benchmarks/bench_dit.py --rows "${DIT_ROWS:-flux.1-1024}" --reps 10 \
  --no-flex --no-forward --out "$W/dit_rows.json"
tail -n 14 "$W/bench_dit.log"
fi
if step rows; then
for side in prev new; do
  root=.; [ $side = prev ] && root=.prev
  PYTHONPATH=$root/src box "prefill_rows_$side" 50 python3 benchmarks/rerun_rows.py $root --out "$W/$side"
  PYTHONPATH=$root/src box "bench_mla_$side" 50 python3 $root/benchmarks/bench_mla.py --out "$W/$side"
done
python3 benchmarks/compare_defaults.py "$W/prev" "$W/new" --out "$W/compare_defaults.md" | tail -n 3
fi
if step benches; then
  PYTHONPATH=src box bench_triton "${TRITON_S:-120}" python3 benchmarks/bench_triton.py --out "$W/benches"
  PYTHONPATH=src box bench_mla_all "${MLA_S:-60}" python3 benchmarks/bench_mla.py --out "$W/benches"
fi
(cd "$OUT" && tar czf final.tgz final)        # what is done so far comes back if the box below is cut
step selection && PYTHONPATH=src box bench_selection "${SEL_S:-175}" python3 benchmarks/bench_selection.py --out "$OUT"
tail -n 3 "$OUT/bench_selection.md" 2>/dev/null
cd "$OUT" && tar czf final.tgz final && rm -rf final
