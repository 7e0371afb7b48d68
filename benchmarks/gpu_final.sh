#!/usr/bin/env bash
# A session's last GPU call, in one command (~9 minutes at most on an H200): the whole GPU suite
# on the tree as merged, then the H200 profile re-tuned where kernels changed (triton's decode
# entries dropped and measured again; the varlen buckets; the DSA buckets of deepseek-v3.2 on
# triton_dsa), then bench_dsa and bench_dit's Wan 720p / FLUX rows. Each step has its own time box.
# Usage (repository root, on the CUDA machine): bash benchmarks/gpu_final.sh
# Writes $OUT/final.tgz: gpu_all.log, nvidia-h200.json, tune_*.log, dsa/bench_dsa.{json,md}, dit_rows.json
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/attnkit-final}; W=$OUT/final; mkdir -p "$W/dsa"
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), 'torch', torch.__version__, 'triton', triton.__version__)" | tee "$W/env.txt"
box() {  # box NAME SECONDS CMD...: run CMD under a time box, its output to $W/NAME.log
  local name=$1 secs=$2; shift 2; local t0=$SECONDS
  timeout "$secs" "$@" > "$W/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc $((SECONDS - t0))s"; grep -E "^(FAILED|ERROR)| passed| failed|^wrote" "$W/$name.log" | tail -n 30
}
box gpu_all "${SUITE_S:-240}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -rfE tests
P=$W/nvidia-h200.json
python3 - "$P" <<'PY'
import json, sys
p = json.load(open("src/attnkit/planning/profiles/nvidia-h200.json"))
p["entries"] = [e for e in p["entries"] if not (e["backend"] == "triton" and e["phase"] == "decode")]
json.dump(p, open(sys.argv[1], "w"), indent=1)
PY
box tune_triton_decode 70 python3 -m attnkit tune --backends triton --phase decode --out "$P"
box tune_varlen 90 python3 -m attnkit tune --phase varlen --backends triton,sdpa --out "$P"
box tune_dsa 60 python3 -m attnkit tune --models deepseek-v3.2 --backends triton_dsa --out "$P"
box bench_dsa 40 python3 benchmarks/bench_dsa.py --out "$W/dsa"
box bench_dit 50 python3 benchmarks/bench_dit.py --rows wan2.1-720p,flux.1-1024 --reps 5 --no-flex \
  --no-forward --out "$W/dit_rows.json"
tail -n 30 "$W/dsa/bench_dsa.md" 2>/dev/null; tail -n 12 "$W/bench_dit.log"
cd "$OUT" && tar czf final.tgz final && rm -rf final
