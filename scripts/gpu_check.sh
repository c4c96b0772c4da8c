#!/usr/bin/env bash
# The GPU check, one command, at most 8 minutes on one GPU (sized for an H200):
#   1. the XSA throughput benchmark at d12 (full 2^19-token steps) plus a short training of both
#      arms on synthetic copy-task tokens (the benchmark's loss curves; no data download needed,
#      GPU machines may have no network),
#   2. the throughput benchmark at d24 (steps of 2 of its 16 accumulation micro-batches, so it fits),
# writing run records (JSON with provenance and hardware) under OUT_DIR, default results/gpu.
# Every stage has its own time limit; a stage that fails or runs out is reported and the rest go on.
#
#   scripts/gpu_check.sh [OUT_DIR]             on the GPU
#   scripts/gpu_check.sh --dry-run OUT_DIR     on CPU, smoke preset, a few steps (exercised by the tests)
#
# Real-data d12 training (`python -m xsa.train --preset d12 --max-steps N`) needs the ClimbMix
# shards built beforehand and does not fit in this budget with compilation of both arms.
set -uo pipefail
cd "$(dirname "$0")/.."

DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY=1; shift; fi
OUT="${1:-results/gpu}"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi

if [[ $DRY == 1 ]]; then
  D12=(--preset smoke --steps 3 --warmup 1 --train-steps 2 --device cpu)
  D24=(--preset smoke --steps 3 --warmup 1 --device cpu)
  LIMIT_D12=300; LIMIT_D24=300
else
  # d12: 3 warm-up (includes compilation) + 20 measured + 15 training steps per arm at ~1 s each
  D12=(--preset d12 --steps 20 --warmup 3 --train-steps 15 --device cuda)
  D24=(--preset d24 --steps 20 --warmup 3 --total-batch-size 65536 --device cuda)
  LIMIT_D12=260; LIMIT_D24=200
fi

if compgen -G "$OUT/*.json" > /dev/null; then
  echo "error: $OUT already holds results; choose a new OUT_DIR (results are never overwritten)" >&2
  exit 2
fi
mkdir -p "$OUT"
{ nvidia-smi 2>/dev/null || echo "no nvidia-smi (dry run or no NVIDIA GPU)"; } > "$OUT/nvidia-smi.txt"

failed=0
stage() {  # stage NAME LIMIT_S ARGS...: one benchmark under its own time limit
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$PY" -m xsa.throughput "$@" --out "$OUT/$name.json"
  local rc=$?
  if [[ $rc != 0 ]]; then echo "!! $name failed or ran out of time (exit $rc)" >&2; failed=1; fi
}
start=$SECONDS
stage throughput_d12 "$LIMIT_D12" "${D12[@]}"
stage throughput_d24 "$LIMIT_D24" "${D24[@]}"
echo "gpu_check: $((SECONDS - start))s, records in $OUT"
exit $failed
