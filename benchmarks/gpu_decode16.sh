#!/usr/bin/env bash
# Issue 28's B=16 decode rows (d128, ctx 1k / 4k / 32k): profile and candidates in one device
# call, <= 100 s on an H200 (each part time-boxed; a part that fails or runs out leaves the
# others' files). Everything lands in $OUT/decode16/, packed as ONE file $OUT/decode16.tgz:
#   sweep_decode.{json,md}      sweep_decode16.py: candidates vs cuDNN / flash, same process,
#                               each checked against SDPA first; guard rows B=1 / B=64
#   profile16_kernels.{json,md} kernels per decode call (plan, cuDNN, flash), device times
#   profile16_ceilings.{json,md} read-only probes of each access pattern vs plan and cuDNN
#   ncu16.{csv,json,md}         Nsight Compute (if on the device): plan, cuDNN, split_heads, two probes
#   gpu_tests.log               split_heads' CUDA-graph replay test (if time is left)
#   *.log                       each part's log
#   cd <repo root> && OUT=/some/dir bash benchmarks/gpu_decode16.sh
set -u
OUT=${OUT:-.}
D=$OUT/decode16
mkdir -p "$D/warm"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( ${BUDGET_S:-97} - ($(date +%s) - T0) )); }
stamp() { echo "$1 at $(( $(date +%s) - T0 )) s" | tee -a "$D/run.log"; }
PY=python3
G="b1-1k b1-32k b64-1k b64-4k"
# 1. warm Triton's kernel cache in parallel processes (the B=16 rows share their kernels:
#    b16-1k's candidates in 6 slices; each guard row; the probes)
for i in 0 1 2 3 4 5; do
  timeout "${WARM_S:-28}" $PY benchmarks/sweep_decode16.py --only b16-1k --warm --slice $i/6 \
    --out "$D/warm" > "$D/warm_b16_$i.log" 2>&1 &
done
for r in $G; do
  timeout "${WARM_S:-28}" $PY benchmarks/sweep_decode16.py --only $r --warm --out "$D/warm" \
    > "$D/warm_$r.log" 2>&1 &
done
timeout "${WARM_S:-28}" $PY benchmarks/profile_decode16.py --part warm --rows b16-1k \
  --out "$D/warm" > "$D/warm_probes.log" 2>&1 &
wait
stamp "warm done"
# 2. the sweep, timed: B=16 rows, then the guards (one process)
timeout "${SWEEP_S:-38}" $PY benchmarks/sweep_decode16.py --only b16-1k,b16-4k,b16-32k,${G// /,} \
  --budget-s "${ROW_BUDGET_S:-9}" --guard-budget-s "${GUARD_BUDGET_S:-4}" --out "$D" > "$D/sweep.log" 2>&1
stamp "sweep rc $?"
$PY benchmarks/sweep_decode16.py --table --out "$D" > /dev/null 2>&1
# 3. kernels per call and the read ceilings (one process)
timeout "$(( $(left) > 18 ? 18 : $(left) ))" $PY benchmarks/profile_decode16.py --part ceilings,kernels \
  --rows b16-1k,b16-4k,b16-32k,b64-4k --out "$D" > "$D/profile.log" 2>&1
stamp "profile rc $?"
# 4. Nsight Compute, if present and time is left (clocks left alone, as run_ncu_prefill.sh)
NCU_ROWS=b16-1k
[ "$(left)" -gt 26 ] && NCU_ROWS=b16-1k,b16-32k
if command -v ncu > /dev/null && [ "$(left)" -gt 12 ]; then
  timeout "$(left)" ncu --clock-control none --profile-from-start off --csv --page raw \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum \
    $PY benchmarks/profile_decode16.py --part ncu --rows $NCU_ROWS --out "$D" \
    > "$D/ncu16.csv" 2> "$D/ncu16.err"
  stamp "ncu rc $?"
  $PY benchmarks/profile_decode16.py --part ncu-table --csv "$D/ncu16.csv" --out "$D" > /dev/null 2>&1
else
  stamp "ncu skipped ($(command -v ncu || echo 'not on PATH'), $(left) s left)"
fi
# 5. split_heads in a CUDA graph (its GPU test module's replay test), if time is left
if [ "$(left)" -gt 10 ]; then
  timeout "$(left)" $PY -m pytest -q -m gpu -p no:cacheprovider -x \
    tests/triton_kernels/test_triton_decode_heads_gpu.py -k replays > "$D/gpu_tests.log" 2>&1
  stamp "split_heads replay test rc $? ($(tail -1 "$D/gpu_tests.log"))"
fi
rm -rf "$D/warm"
tar czf "$OUT/decode16.tgz" -C "$OUT" decode16 && rm -rf "$D"
tar xzf "$OUT/decode16.tgz" -O decode16/sweep_decode.md 2>/dev/null | sed -n 3,12p
tar xzf "$OUT/decode16.tgz" -O decode16/profile16_ceilings.md 2>/dev/null | cut -c1-150 | head -40
echo "total $(( $(date +%s) - T0 )) s"
