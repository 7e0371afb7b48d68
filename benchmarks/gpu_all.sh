#!/usr/bin/env bash
# Everything the GPU lease must run, in one call: the GPU conformance + backend tests, then
# every benchmark. Each step is time-boxed and logs to $OUT, so a cut run still reports.
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_all.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/attnkit-gpu}; OUT=$(mktemp -d); mkdir -p "$FINAL"
# At most a few files come back from the lease: everything is packed into one archive at the end.
trap 'tar czf "$FINAL/gpu_all.tgz" -C "$OUT" . ; cp "$OUT"/*.png "$FINAL"/ 2>/dev/null' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  echo "== $name"; local t0=$SECONDS
  timeout "$secs" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0))s"; tail -n 3 "$OUT/$name.log"
}
step gpu_tests 150 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests
step bench_mla 70 python3 benchmarks/bench_mla.py --fp8 --out "$OUT"
step bench_triton 75 python3 benchmarks/bench_triton.py --out "$OUT"
step bench_dual_chunk 50 python3 benchmarks/bench_dual_chunk.py --out "$OUT/dual_chunk.md"
step bench_runtime 80 python3 benchmarks/bench_runtime.py --reps 10 --out "$OUT/runtime.md"
step bench_runner 90 python3 benchmarks/bench_runner.py --out "$OUT/runner.md"
ls -la "$OUT"
