"""
First contact with a GPU in minutes (an estimated 6-9): no data, no network, one GPU, the server's own python.

    PYTHONPATH=. python -m xsa.gpu_check --quick       # on the GPU (scripts/gpu_check.sh --quick)
    PYTHONPATH=. python -m xsa.gpu_check --quick --dry # on a CPU, tiny shapes (what the tests run)

It needs torch (2.11 or newer, a CUDA build), numpy, tiktoken and tqdm, and writes ONE JSON record,
rewritten as each part finishes, so a check cut short still leaves what it measured: on the GPU
results/gpu/quick-<UTC time>.json, dry in the system's temporary folder (never in the repository),
or --out. A part that fails records its error and the next one runs. Parts:

  versions   python, torch, CUDA, triton, the GPU; the measured bf16 matmul peak beside the datasheet's
  compile    the study's d12 (XSA at every layer) compiled: time of the first step (compile included)
             and of the steps after it
  steps      steps with a changing learning rate (the start of a warm-down): no new compiled graph
  precision  the bf16-autocast compiled loss and gradients against an fp32 eager copy, same weights,
             one batch (|loss difference|, gradient cosine per matrix)
  sdpa       which scaled-dot-product attention kernel ran (flash, efficient, cuDNN or math)
  timing     the baseline (no XSA) against XSA at the preset's real batch (d12: 2^19 tokens, 32 rows a
             micro-batch), one step each in ABBA order, the optimizers timed apart: overhead,
             tokens/s, MFU against the measured and the datasheet peak, the optimizers' share
  xsa_cos    |cos(z, v)| of XSA's output and the token's value per layer, under bf16 autocast
  resume     through the project's checkpoint code: save, run on, load, run the same steps again, twice;
             the two resumes' spread (each tensor's in units of how far the steps moved it) is the noise
             floor, and the resume must agree with the uninterrupted run within 5 times it (at least
             1e-4), while a copy resumed with its optimizer state dropped must miss that (it can fail)
  memory     peak memory of one compiled training step at the presets' device batches (d12 at 32
             rows, d24-nanochat at 16 and 8)
  decode     ChatCORE's greedy decoding: 32 questions of 40-200 tokens, 64 tokens each, one at a
             time against one batch (tokens/s of each, their ratio, the share of replies that agree)

The batch is synthetic (the copy task of xsa.throughput), so nothing is downloaded. Shapes: d12 on
the GPU; the smoke preset in the dry mode, which compiles the XSA arm only (about 40 s of CPU time,
most of it the compile).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from xsa.base.common import autodetect_device
from xsa.gpu.parts import PARTS, Check
from xsa.base.records import REPO_ROOT, provenance


def compiler_problems() -> list[str]:
    """What torch.compile lacks here: triton (its GPU kernels) and a C compiler (its wrappers)."""
    problems = []
    if importlib.util.find_spec("triton") is None:
        problems.append("triton is not installed (torch.compile's GPU kernels)")
    if not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")):
        problems.append("no C compiler (torch.compile builds its wrappers with one)")
    return problems


def tiny_op(device: str) -> None:
    """One small operation on `device`: a build without kernels for this GPU fails only here."""
    torch.ones(2, device=device).add(1).sum().item()


def cuda_problems(nproc: int | None = None) -> list[str]:
    """What stops training on this machine's GPUs, one sentence each (an empty list: nothing). torch
    falls back to the CPU without a word where it sees no GPU (a driver older than its CUDA build, say),
    so this runs before any GPU work: a CUDA build, a GPU it sees, `nproc` of them where asked, a tiny
    operation on each, and what torch.compile needs."""
    build = f"torch {torch.__version__} (CUDA {torch.version.cuda})"
    if torch.version.cuda is None:
        return [f"torch {torch.__version__} is a CPU build, without CUDA", *compiler_problems()]
    with warnings.catch_warnings(record=True) as said:  # torch only warns why it sees no GPU: keep its words
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if not available:
        # torch's words up to its advice (a download address), so the refusal stays one short line
        why = " ".join(str(w.message) for w in said if "CUDA" in str(w.message)).split(". Please")[0]
        why = " ".join(why.split()) or ("the NVIDIA driver is missing or older than this build needs, "
                                        "or CUDA_VISIBLE_DEVICES hides the GPUs")
        return [f"{build} sees no GPU: {why}", *compiler_problems()]
    problems, seen = [], torch.cuda.device_count()
    if nproc is not None and seen != nproc:
        problems.append(f"{build} sees {seen} GPU(s), {nproc} asked for (NGPU, --nproc; CUDA_VISIBLE_DEVICES "
                        f"chooses which it sees)")
    for i in range(seen):
        try:
            tiny_op(f"cuda:{i}")
        except Exception as e:  # a kernel image missing for this GPU, a driver error: named, not raised
            problems.append(f"{build} cannot run on cuda:{i}: " + " ".join(str(e).split())[:300])
    return problems + compiler_problems()


def run_check(*, dry: bool, out: Path, batch: int | None = None, rounds: int | None = None,
              progress: bool = True) -> dict:
    c = Check(dry=dry, out=Path(out), batch=batch or (4 if dry else 8), rounds=rounds or (4 if dry else 10),
              say=print if progress else (lambda *a, **k: None))
    c.device = torch.device("cpu") if dry else autodetect_device("cuda")
    c.rec = {"kind": "gpu quick check", "dry": dry, "preset": c.preset, "batch": c.batch, "compiled": True,
             "autocast": "bfloat16", "parts": {}, "complete": False}
    for name, fn in PARTS:
        c.part(name, fn)
    c.rec["complete"] = True
    c.rec["ok"] = all(p["ok"] for p in c.rec["parts"].values())
    c.rec["provenance"] = provenance(config_hash=c.config(xsa=True).config_hash(), seed=0,
                                     device=c.rec["parts"]["versions"].get("device", "?"),
                                     wall_time_s=round(time.perf_counter() - c.t_start, 3))
    c.write()
    c.say(f"gpu quick check: {'all parts ok' if c.rec['ok'] else 'SOME PARTS FAILED'} in "
          f"{c.rec['elapsed_s']:.0f}s, record {c.out}")
    return c.rec


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def _out_path(args, p) -> Path:
    """The record's path, checked writable before any work (exit status 2 otherwise)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    if args.out:
        out = Path(args.out).expanduser()
    elif args.dry:  # a CPU rehearsal: never in the repository
        out = Path(tempfile.gettempdir()) / "xsa-gpu-check" / f"quick-dry-{stamp}.json"
    else:
        out = REPO_ROOT / "results" / "gpu" / f"quick-{stamp}.json"
    if out.exists():
        p.exit(2, f"{p.prog}: error: {out} exists (results are never overwritten)\n")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent):
            pass
    except OSError as e:
        p.exit(2, f"{p.prog}: error: --out {out}: cannot write there ({e.strerror or e})\n")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m xsa.gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the quick check (the only mode; accepted for the "
                                                         "commands written with it)")
    p.add_argument("--dry", action="store_true", help="the same parts on a CPU, tiny shapes (about 40 s of CPU time)")
    p.add_argument("--out", default=None, help="the JSON record (default results/gpu/quick-<UTC time>.json; "
                                               "dry: the system's temporary folder)")
    p.add_argument("--batch", type=_positive, default=None,
                   help="rows of 2048 tokens in the compile, steps and precision parts (default 8; dry: 4)")
    p.add_argument("--rounds", type=_positive, default=None, help="ABBA rounds (default 10; dry: 4)")
    args = p.parse_args(argv)
    problems = [] if args.dry else cuda_problems()
    if problems:
        p.exit(2, f"{p.prog}: error: --quick needs a GPU torch can run on: {'; '.join(problems)} "
                  "(--dry runs the parts on a CPU)\n")
    out = _out_path(args, p)
    rec = run_check(dry=args.dry, out=out, batch=args.batch, rounds=args.rounds)
    sys.exit(0 if rec["ok"] else 1)


if __name__ == "__main__":
    main()
