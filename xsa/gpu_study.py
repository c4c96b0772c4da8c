"""
Train a study's runs on one GPU node, one run at a time over every GPU with torchrun (what
`make gpu-study` runs between the data and the evaluations). The ranks are launched by this
interpreter's own torch.distributed.run (`python -m torch.distributed.run`, what `torchrun` runs): the
project's environment is not on PATH on a bare node, so a `torchrun` found there would be another
environment's, or none.

    python -m xsa.gpu_study --study gpu [--nproc 8] [--device-batch-size B] [--print]
    python -m xsa.gpu_study --study d12-test      # the scale study's d12 prediction, tested (adaptive)
    python -m xsa.gpu_study --nproc 8 --check     # the prerequisites alone (make gpu-study runs it first)

Each run trains into its own folder, results/runs/<run id>, under the study's run id and config,
so the pipeline's train stage then finds it done and skips it; a run stopped part-way resumes
from its checkpoint (`--resume`), a finished one (its record complete, its config the study's by
value, as the pipeline judges it) is left alone. A --device-batch-size (or a preset's) that does not
divide a run's batch over --nproc GPUs is refused before anything starts, naming the run. The runs are trained in the
study's order; a failing run stops the loop (rerun to resume). `--print` prints the commands
instead of running them. An adaptive study (d12-test: pairs under a precision rule) is passed
over until its rules declare no run that is not trained.

Before any run, the GPUs are checked (xsa.gpu_check.cuda_problems: a CUDA build of torch that sees
--nproc GPUs and runs on each), and every run is launched with `--device cuda`: where torch sees no
GPU (a driver older than its CUDA build, say) the command stops at once with one line naming why,
instead of torchrun training CPU ranks for days.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys

import torch

from xsa.gpu_check import cuda_problems
from xsa.studies.jobs import recorded_config, trained
from xsa.runs.layout import default_layout
from xsa.runs.runlog import finished_summary
from xsa.stack.spec import format_value
from xsa.studies.registry import ADAPTIVE, STUDIES, get_study

def train_args(run) -> list[str]:
    """`python -m xsa.train` arguments that train `run`: every override as --set (Run.command)."""
    sets = [a for k, v in run.overrides for a in ("--set", f"{k}={format_value(v)}")]
    return ["--preset", run.preset, *sets, "--seed", str(run.seed)]


# the launcher torchrun runs, from this interpreter: the environment's own torch, whatever PATH holds
LAUNCH = [sys.executable, "-m", "torch.distributed.run"]


def finished(folder, run) -> bool:
    """Whether `folder` holds `run` trained to its horizon: its whole log under its config's hash, or
    (a record older than a field added since) a complete record whose config is the run's by value."""
    if finished_summary(folder, run.config()) is not None:
        return True
    return trained(folder) and recorded_config(folder) == run.config()


def check_batch(run, nproc: int, device_batch_size: int | None) -> None:
    """ValueError naming the run unless its batch splits into whole micro-batches over nproc GPUs."""
    cfg = run.config()
    rows = device_batch_size or cfg.device_batch_size
    step = rows * cfg.model.sequence_len * nproc
    if cfg.total_batch_size % step:
        raise ValueError(f"{run.run_id}: its batch of {cfg.total_batch_size} tokens is not a whole number of "
                         f"micro-batches of {rows} rows x {cfg.model.sequence_len} tokens x {nproc} GPUs "
                         "(choose a --device-batch-size that divides it)")


def commands(study, nproc: int, device_batch_size: int | None = None) -> list[list[str]]:
    """The launch command of every run of `study` not yet trained to its horizon."""
    layout = default_layout(study.name)
    out = []
    for run in study.runs:
        folder = layout.run_dir(run)
        if finished(folder, run):
            continue
        check_batch(run, nproc, device_batch_size)
        cmd = [*LAUNCH, "--standalone", f"--nproc_per_node={nproc}", "-m", "xsa.train", *train_args(run),
               "--out", str(folder), "--device", "cuda", "--no-progress"]
        if (folder / "config.json").exists():
            cmd.append("--resume")
        if device_batch_size:
            cmd += ["--device-batch-size", str(device_batch_size)]
        out.append(cmd)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xsa.gpu_study", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", default="gpu", choices=sorted(STUDIES), help="the study (default gpu)")
    p.add_argument("--nproc", type=int, default=None, help="GPUs per run (default: every visible GPU)")
    p.add_argument("--device-batch-size", type=int, default=None,
                   help="rows per micro-batch (default: each preset's); recorded in provenance, not the run id")
    p.add_argument("--print", action="store_true", help="print the commands, run nothing (no GPU check)")
    p.add_argument("--check", action="store_true",
                   help="check the GPUs only (torch's CUDA build sees --nproc of them and runs on each) and exit")
    args = p.parse_args(argv)
    if args.nproc is not None and args.nproc < 1:
        p.error(f"--nproc must be a positive integer, got {args.nproc}")
    if args.device_batch_size is not None and args.device_batch_size < 1:
        p.error(f"--device-batch-size must be a positive integer, got {args.device_batch_size}")
    problems = [] if args.print else cuda_problems(args.nproc)
    if problems:  # one line, before any work: never a run that falls back to the CPU
        p.exit(2, f"{p.prog}: error: cannot train on the GPU: {'; '.join(problems)}\n")
    if args.check:
        print(f"{p.prog}: GPUs ok: torch {torch.__version__} (CUDA {torch.version.cuda}), "
              f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}", flush=True)
        return 0
    nproc = args.nproc
    if nproc is None:
        nproc = torch.cuda.device_count()
    if nproc < 1:
        p.error("--nproc: no GPU visible (pass --nproc N, or run on the GPU node)")
    # an adaptive study (d12-test) declares more runs as its records land: pass over it until it
    # declares none that are not trained; --print shows the first pass only
    while True:
        try:
            todo = commands(get_study(args.study), nproc, args.device_batch_size)
        except ValueError as e:  # one line, as the GPU check's refusal
            p.exit(2, f"{p.prog}: error: {e}\n")
        for cmd in todo:
            print(shlex.join(cmd), flush=True)
            if not args.print and subprocess.run(cmd).returncode != 0:
                print(f"{p.prog}: stopped: the run above failed (rerun to resume it)", file=sys.stderr)
                return 1
        if not todo or args.print or args.study not in ADAPTIVE:
            break
    if not todo:
        print(f"{args.study}: every run is trained", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
