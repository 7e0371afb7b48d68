#!/usr/bin/env bash
# Issue 17's GPU sweep in one call: each section of sweep_hopper.py in its own process, so a
# kernel that hangs costs one section (its watchdog records where), not the run. Rows merge
# into $OUT/sweep_hopper.json; the merged table goes to $OUT/sweep_hopper.md and stdout.
#   cd <repo root> && OUT=/some/dir bash benchmarks/run_sweep_hopper.sh
set -u
OUT=${OUT:-.}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-$PWD/src} PYTHONUNBUFFERED=1
for s in ${SECTIONS:-prefill128 extend32k decode mla race prefill64 prefill256 extend8k}; do
  timeout "${SECTION_S:-170}" python3 benchmarks/sweep_hopper.py --only "$s" --out "$OUT" \
    >> "$OUT/sweep.log" 2>&1
  echo "section $s rc $?" | tee -a "$OUT/sweep.log"
done
python3 benchmarks/sweep_hopper.py --table --out "$OUT"
