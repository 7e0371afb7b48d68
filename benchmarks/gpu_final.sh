#!/usr/bin/env bash
# A session's last GPU calls, in two parts run back to back on one warm machine (each < 10 min):
#   PART=a: the whole GPU suite on the tree as merged, then the H200 profile re-tuned where kernels
#           changed (DROP: backends whose entries are dropped first; TUNE_ARGS: ';'-separated `attnkit tune` argument lists, each measuring only the
#           variants the profile lacks) -> $OUT/final_a.tgz (gpu_all.log, nvidia-h200.json, tune_*.log)
#   PART=b: bench_dit's FLUX / Wan rows, bench_selection over every row with the shipped profile,
#           and issue 24's second prev / new round (bench_triton's prefill rows, bench_mla) against
#           .prev/ -> $OUT/final_b.tgz
# Usage (repository root, on the CUDA machine): PART=a TUNE_ARGS="..." bash benchmarks/gpu_final.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-final}; PART=${PART:-a}; W=$OUT/final_$PART; mkdir -p "$W"
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)" | tee "$W/env.txt"
box() {  # box NAME SECONDS CMD...: run CMD under a time box, its output to $W/NAME.log
  local name=$1 secs=$2; shift 2; local t0=$SECONDS
  timeout -k 5 "$secs" "$@" > "$W/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0))s"; grep -E "^(FAILED|ERROR)| passed| failed|^wrote|row\(s\)|within" "$W/$name.log" | tail -n 30
}
if [ "$PART" = a ]; then
  PYTHONPATH=src box gpu_all "${SUITE_S:-200}" python3 -m pytest -q -m gpu -n "${SUITE_N:-16}" -p no:cacheprovider -rfE tests
  P=$W/nvidia-h200.json
  # DROP: comma-separated backends whose entries are measured again from scratch (their kernels changed)
  python3 - "$P" "${DROP:-}" <<'PY'
import json, sys
p = json.load(open("src/attnkit/planning/profiles/nvidia-h200.json"))
drop = {b for b in sys.argv[2].split(",") if b}
p["entries"] = [e for e in p["entries"] if e["backend"] not in drop]
json.dump(p, open(sys.argv[1], "w"), indent=1)
print("profile entries kept:", len(p["entries"]), "dropped backends:", sorted(drop))
PY
  i=0; IFS=';' read -ra tunes <<< "${TUNE_ARGS:-}"
  for t in "${tunes[@]}"; do
    i=$((i + 1)); read -ra a <<< "$t"
    PYTHONPATH=src box "tune_$i" "${TUNE_S:-40}" python3 -m attnkit tune "${a[@]}" --out "$P"
    head -n 3 "$W/tune_$i.log"
  done
else
  PYTHONPATH=src box bench_dit "${DIT_S:-40}" python3 benchmarks/bench_dit.py --rows flux.1-1024,wan2.1-720p --reps 10 \
    --no-flex --no-forward --out "$W/dit_rows.json"
  tail -n 14 "$W/bench_dit.log"
  PYTHONPATH=src box bench_selection "${SEL_S:-170}" python3 benchmarks/bench_selection.py --out "$W/selection"
  for side in prev new; do
    root=.; [ $side = prev ] && root=.prev
    PYTHONPATH=$root/src box "prefill_rows_$side" 60 python3 benchmarks/rerun_rows.py $root --out "$W/$side"
    PYTHONPATH=$root/src box "bench_mla_$side" 60 python3 $root/benchmarks/bench_mla.py --out "$W/$side"
  done
  python3 benchmarks/compare_defaults.py "$W/prev" "$W/new" --out "$W/compare_defaults.md" | tail -n 3
fi
cd "$OUT" && tar czf "final_$PART.tgz" "final_$PART" && rm -rf "final_$PART"
