#!/usr/bin/env bash
# Issue 28 (session 2026-12-04e), call 2: the ws test fixed in call 1 (a 64-key tile on 32-key
# pages falls back), then Nsight Compute profiles of the missed rows (benchmarks/probe_ncu28.py:
# the chained prefill at 8 x 2k and 16 x 1k, the B 16 ctx 1k decode beside cuDNN's, the ws MLA
# kernel at B 128 ctx 4k). Each op in its own ncu process; details text and SASS source pages
# exported. Files in $OUT/c.tgz.
. benchmarks/gpu_common.sh
timeout ${TEST_S:-90} python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider \
  tests/triton_mla/test_gluon_gpu.py > "$W/ws_tests.log" 2>&1
echo "ws tests rc $? ($(tail -1 "$W/ws_tests.log")) at $((SECONDS - T0)) s"
grep -E "^FAILED|^ERROR" "$W/ws_tests.log" | head
R=$(mktemp -d)   # the reports themselves stay on the machine (large); their pages come back
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU $($NCU --version 2>&1 | tail -1)"
for op in ${OPS:-chain8x2k decode16x1k cudnn16x1k ws128 chain16x1k}; do
  timeout ${OP_S:-100} "$NCU" --profile-from-start off --clock-control none --set full \
    --import-source yes -o "$R/$op" python3 benchmarks/probe_ncu28.py "$op" > "$W/$op.log" 2>&1
  echo "$op rc $? at $((SECONDS - T0)) s: $(grep -E 'profiled|wrong|Error|ERR' "$W/$op.log" | head -3 | tr '\n' ' ')"
  if [ -f "$R/$op.ncu-rep" ]; then
    "$NCU" --import "$R/$op.ncu-rep" --page details --print-units base > "$W/$op.details.txt" 2>&1
    "$NCU" --import "$R/$op.ncu-rep" --page source --csv --print-source sass > "$W/$op.source.csv" 2>&1
    gzip -f "$W/$op.source.csv"
    grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput" "$W/$op.details.txt" | head -24
  fi
  save
done
ls -la "$R"
