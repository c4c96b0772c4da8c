#!/usr/bin/env bash
# The GPU check, one command, sized for one GPU (H200/H100) in at most about 9 minutes:
#   0. prerequisites: a CUDA build of torch that sees a GPU and runs on it, a C compiler and triton for
#      torch.compile, the package itself; what is missing is named and nothing else runs;
#   1. the XSA throughput benchmark at d12 (full 2^19-token steps, 3 warm-up rounds that include
#      compiling both arms, 20 measured ABBA rounds) plus 15 extra training steps of both arms on
#      synthetic copy-task tokens (no data download: GPU machines may have no network);
#   2. the same at d24 with steps of 2 of its micro-batches (2 x 16 x 2048 tokens), so it fits.
# Each stage has its own time limit; the benchmark writes its JSON as rounds arrive, so a stage cut
# short still leaves what it measured. Records (JSON with provenance and hardware) go to OUT_DIR,
# default results/gpu, with nvidia-smi's report; the compiled kernels are cached in
# ~/.cache/xsa/inductor, so a second check starts warm.
#
#   scripts/gpu_check.sh --quick [OUT_JSON]    the first contact (xsa/gpu_check.py, 6-9 min est.): no data,
#                                              no network, the server's own python with PYTHONPATH=.
#   scripts/gpu_check.sh --quick --dry [OUT_JSON]   its parts on a CPU, tiny shapes (exercised by the tests)
#   scripts/gpu_check.sh --prereq              only check the prerequisites
#   scripts/gpu_check.sh [OUT_DIR]             on the GPU
#   scripts/gpu_check.sh --dry-run OUT_DIR     on CPU, smoke preset, a few steps (exercised by the tests)
#
# Real-data training (`python -m xsa.train --preset d12 --max-steps N`) needs the ClimbMix shards
# built beforehand (`python -m xsa.data build --subset climbmix --preset d12`).
set -uo pipefail
cd "$(dirname "$0")/.."

DRY=0; PREREQ_ONLY=0; QUICK=0
if [[ "${1:-}" == "--quick" ]]; then QUICK=1; shift; fi
if [[ $QUICK == 1 && "${1:-}" == "--dry" ]]; then DRY=1; shift; fi
if [[ "${1:-}" == "--dry-run" ]]; then DRY=1; shift; fi
if [[ "${1:-}" == "--prereq" ]]; then PREREQ_ONLY=1; shift; fi
OUT="${1:-results/gpu}"
# a folder (or file) git tracks holds committed records: the check writes only where nothing is tracked,
# judged where the path leads (a symlink to paper/, or a path through one, is paper/)
REAL="$(realpath -m -- "$OUT" 2>/dev/null || printf '%s' "$OUT")"
if [[ $PREREQ_ONLY == 0 && -n "$(git ls-files -- "$REAL" 2>/dev/null | head -1)" ]]; then
  echo "gpu_check.sh: $OUT holds files git tracks (committed records); give a new folder or file" >&2
  exit 2
fi
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi

prereq() {  # prereq cuda|cpu: print what is missing, exit status 1 if anything is
  "$PY" - "$1" <<'PY'
import importlib.util, shutil, sys
need_cuda = sys.argv[1] == "cuda"
missing = []
try:
    import torch
except ImportError:
    print("missing: torch (install a CUDA build first, e.g. conda env create -f environment.yml)"); sys.exit(1)
if importlib.util.find_spec("xsa") is None:
    missing.append("the xsa package (pip install -e '.[test]')")
if need_cuda:
    if torch.version.cuda is None:
        missing.append(f"a CUDA build of torch (this is {torch.__version__}, a CPU build)")
    elif not torch.cuda.is_available():
        missing.append("a visible GPU (torch.cuda.is_available() is False: driver, CUDA_VISIBLE_DEVICES?)")
    else:  # a build without kernels for this GPU, or a driver it cannot use, fails only at the first operation
        try:
            torch.ones(2, device="cuda").add(1).sum().item()
        except Exception as e:
            why = " ".join(str(e).split())[:300]
            missing.append(f"a torch CUDA build that runs on this GPU (a tiny operation fails: {why})")
    if importlib.util.find_spec("triton") is None:
        missing.append("triton (torch.compile's GPU kernels)")
if not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")):
    missing.append("a C compiler (torch.compile builds its wrappers with one; conda: c-compiler, Debian: gcc)")
for m in missing:
    print(f"missing: {m}")
if not missing:
    gpu = torch.cuda.get_device_name(0) if need_cuda else "CPU (dry run)"
    print(f"prerequisites ok: torch {torch.__version__} (CUDA {torch.version.cuda}), {gpu}")
sys.exit(1 if missing else 0)
PY
}

if [[ $PREREQ_ONLY == 1 ]]; then prereq cuda; exit $?; fi
if [[ $QUICK == 1 ]]; then
  export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"  # the checkout itself, installed or not
  export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$HOME/.cache/xsa/inductor}"
  MODE=(--quick); LIMIT=600  # compiles d12 three times and d24-nanochat twice: an estimated 6-9 minutes
  if [[ $DRY == 1 ]]; then MODE=(--dry); LIMIT=420; else prereq cuda || exit 2; fi
  timeout "$LIMIT" "$PY" -m xsa.gpu_check "${MODE[@]}" ${1:+--out "$1"}
  exit $?
fi
if [[ $DRY == 1 ]]; then
  prereq cpu || exit 2
  D12=(--preset smoke --steps 3 --warmup 1 --train-steps 2 --device cpu)
  D24=(--preset smoke --steps 3 --warmup 1 --device cpu)
  LIMIT_D12=300; LIMIT_D24=300
else
  prereq cuda || exit 2
  # d12: compiling two arms from a cold cache is most of the warm-up; then ~0.3 s a step each
  D12=(--preset d12 --steps 20 --warmup 3 --train-steps 15 --device cuda)
  D24=(--preset d24 --steps 20 --warmup 3 --total-batch-size 65536 --device cuda)
  LIMIT_D12=300; LIMIT_D24=360  # d24: an estimated 175-300 s, two compiles included
fi

if compgen -G "$OUT/*.json" > /dev/null; then
  echo "error: $OUT already holds results; choose a new OUT_DIR (results are never overwritten)" >&2
  exit 2
fi
mkdir -p "$OUT"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$HOME/.cache/xsa/inductor}"
{ nvidia-smi 2>/dev/null || echo "no nvidia-smi (dry run or no NVIDIA GPU)"; } > "$OUT/nvidia-smi.txt"

failed=0
stage() {  # stage NAME LIMIT_S ARGS...: one benchmark under its own time limit
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s)"
  local t0=$SECONDS
  timeout "$limit" "$PY" -m xsa.throughput "$@" --out "$OUT/$name.json"
  local rc=$?
  echo "   $name: $((SECONDS - t0))s"
  if [[ $rc != 0 ]]; then
    echo "!! $name failed or ran out of time (exit $rc); $OUT/$name.json holds the rounds measured so far" >&2
    failed=1
  fi
}
start=$SECONDS
stage throughput_d12 "$LIMIT_D12" "${D12[@]}"
stage throughput_d24 "$LIMIT_D24" "${D24[@]}"
echo "gpu_check: $((SECONDS - start))s, records in $OUT"
exit $failed
