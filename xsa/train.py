"""
Train one run: a GPT with a given XSA setting, Muon + AdamW (or AdamW alone), on a data subset.

    python -m xsa.train --preset cpu-w64-d4 --alpha 1                 # -> results/runs/cpu-w64-d4_xsa1_s0
    python -m xsa.train --preset cpu-w64-d4 --set cpu_compile=true --set matrix_lr=0.08 --alpha 1 --seed 100
                                                 # -> results/runs/cpu-w64-d4_xsa1-compiled-mlr0.08_s100
    torchrun --nproc_per_node=8 -m xsa.train --preset d12        (DDP: nccl on CUDA, gloo on CPU)

`--set FIELD=VALUE` sets any config field (xsa/stack/config.py), so every run of a study can be trained by
hand: the run id, and so the folder, comes from the preset, the fields set and the seed (xsa/stack/spec.py;
`Run.command()` prints a run's command).

Step convention: `step` counts optimizer updates done. The train loss logged at step s is the loss of the batch of
update s (computed before that update); the first logged step is 1. Step 0 carries only the evaluation of the
initial model. Val bpb is measured at step 0, every eval_every steps and at the last step of the run.

RUN_DIR/metrics.jsonl has one line per logged step: step, train_loss, train_loss_ema (an EMA, beta 0.9, debiased
like Adam's moments), lr_mult, tok_per_s, mfu (against the measured matmul peak), mfu_datasheet (the GPU
datasheet's bf16 peak, as nanochat; None on CPU), and on eval steps val_bpb and diag (attention diagnostics per
layer on a fixed 4-row validation batch, xsa/diagnostics.py). A run whose loss or weights turn non-finite stops
with RUN_DIR/diverged.json, its final record, in place of summary.json (xsa/runs/diverged.py).

Device: cuda (bf16 autocast + torch.compile), mps or cpu (fp32; compiled with cpu_compile=true, as every run of the
robust study trains, else eager) are detected automatically (the precision policy of xsa/stack/step.py). CPU runs
resume bit-exactly (at the same thread count): the data loader is a pure function of (seed, step, micro-batch), and
checkpoints hold the model, optimizers, loop values and RNG states.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from xsa.runs.load import checked_tokenizer
from xsa.stack import checkpoint as ckpt
from xsa.stack.bpb import evaluate_bpb
from xsa.base.common import autodetect_device, device_name, dist_info, print0
from xsa.stack.config import ConfigError, TrainConfig
from xsa.data import data_dir as default_data_dir, ensure_data
from xsa.data.build import COMPLETE
from xsa.data.climbmix import tokens_read
from xsa.data.loader import TokenLoader, val_batches
from xsa.data.shards import data_fingerprint
from xsa.diagnostics import diagnostics_snapshot
from xsa.stack.model import GPT, build as build_model
from xsa.stack.presets import PRESETS
from xsa.runs.diverged import clear_diverged, write_diverged
from xsa.base.records import (REPO_ROOT, append_jsonl, atomic_write_json, atomic_write_text, code_provenance, git_state,
                         provenance)
from xsa.base.runlock import RunFolderBusy, hold_folder, move_aside, own_run
from xsa.runs.runlog import check_run_dir, finished_summary, kept_log, same_data
from xsa.stack.spec import Run, arm_record, parse_overrides
from xsa.stack.step import Step
from xsa.stack.timers import Loop, Throughput, Timers

EMA_BETA = 0.9
DIAG_ROWS = 4  # validation rows of the attention diagnostics logged at every evaluation


class TrainingDiverged(RuntimeError):
    """The loss or the weights became NaN/inf; training stopped, the last good checkpoint is intact."""
    def __init__(self, what: str, step: int, out: Path):
        super().__init__(f"training diverged: {what} at step {step}; stopped. The last good checkpoint "
                         f"({ckpt.state_path(out)}) is intact; nothing after it was saved.")
        self.what, self.step = what, step


@dataclass(frozen=True)
class RunContext:
    """One call of train() on one rank: the run's config and folder, where it trains, and how the call
    was asked to go: what the loop's helpers read, in place of a dozen parameters each."""
    cfg: TrainConfig
    out: Path
    device: torch.device
    rows: int  # rows per micro-batch on this rank (B): how an update is computed, not which
    rank: int
    world: int
    is_ddp: bool
    data_dir: Path | str | None = None  # as asked; _train replaces it with the checked data folder
    resume: bool = False
    overwrite: bool = False
    max_steps: int | None = None
    progress: bool = True

    @property
    def grad_accum(self) -> int:
        """Micro-batches per update on this rank (_open_run checks that they divide the batch)."""
        return self.cfg.total_batch_size // (self.rows * self.cfg.model.sequence_len * self.world)

    @property
    def end(self) -> int:
        """The update this call stops after: the horizon, or max_steps where that comes first (the
        schedule still spans the horizon, so a resume finishes the same run)."""
        return self.cfg.num_iterations if self.max_steps is None else min(self.cfg.num_iterations, self.max_steps)

    def barrier(self) -> None:
        if self.is_ddp:  # every rank waits here; a single process has no one to wait for
            dist.barrier()


# -----------------------------------------------------------------------------
# Training

def train(cfg: TrainConfig, out_dir, *, resume: bool = False, overwrite: bool = False,
          max_steps: int | None = None, data_dir=None, device=None, progress: bool = True,
          device_batch_size: int | None = None) -> dict:
    """Train `cfg` into the run folder `out_dir`; return the summary dict (also in summary.json).

    resume: continue from out_dir/ckpt/state.pt (the config must be identical).
    overwrite: replace an existing run folder (otherwise an existing folder is an error).
    max_steps: stop after this many updates in total (the schedule still spans the full horizon,
        so a later --resume finishes the same run), e.g. for short measurements.
    data_dir: the built data folder (default: xsa.data.ensure_data(cfg.data), built if missing).
    device_batch_size: rows per micro-batch here (default: the config's): how an update is computed,
        not which, so it is recorded in the provenance and a resume may change it (16 -> 8 rows, say).
    Under torchrun, every rank calls this; rank 0 writes the records.
    """
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ConfigError(f"max_steps must be a positive integer, got {max_steps!r}")
    rows = cfg.device_batch_size if device_batch_size is None else device_batch_size
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ConfigError(f"device_batch_size must be a positive integer, got {device_batch_size!r}")
    is_ddp, rank, local_rank, world = dist_info()
    device = autodetect_device(device)
    if device.type == "cuda" and is_ddp:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    own_group = is_ddp and not dist.is_initialized()
    if own_group:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    ctx = RunContext(cfg, Path(out_dir), device, rows, rank, world, is_ddp, data_dir=data_dir, resume=resume,
                     overwrite=overwrite, max_steps=max_steps, progress=progress)
    try:
        with own_run(out_dir, "training") if rank == 0 else contextlib.nullcontext():  # one owner per folder
            try:
                return _train(ctx)
            except TrainingDiverged as e:  # a final record (xsa/runs/diverged.py): a sweep's rule counts it
                if rank == 0:
                    write_diverged(out_dir, e.step, e.what, cfg.to_dict(), cfg.config_hash())
                raise
    finally:
        if own_group:
            dist.destroy_process_group()


def _open_run(ctx: RunContext):
    """Check the run folder and the data on every rank before rank 0 writes anything; return
    (saved config.json or None, data folder, tokenizer)."""
    cfg, B, world = ctx.cfg, ctx.rows, ctx.world
    if cfg.total_batch_size % (B * cfg.model.sequence_len * world) != 0:
        raise ConfigError(f"total_batch_size ({cfg.total_batch_size}) must be a multiple of device_batch_size "
                          f"* sequence_len * world_size ({B} * {cfg.model.sequence_len} * {world})")
    saved = check_run_dir(ctx.out, cfg, ctx.resume, ctx.overwrite)
    data_dir = ctx.data_dir
    if data_dir is None and saved is not None:
        data_dir = saved.get("data_dir")
    if ctx.is_ddp:  # never build under torchrun: the other ranks would wait at a barrier with a timeout
        path = Path(data_dir) if data_dir else default_data_dir(cfg.data)
        if not (path / COMPLETE).exists():
            raise FileNotFoundError(f"data: {path} is not built; under torchrun build it first, in its own step: "
                                    f"python -m xsa.data build --subset {cfg.data}")
    ctx.barrier()
    if ctx.rank == 0:  # build (or verify) the data once; the other ranks wait, then find it built
        data_dir = ensure_data(cfg.data, data_dir=data_dir, tokens=tokens_read(cfg))
    ctx.barrier()
    if ctx.rank != 0:
        data_dir = ensure_data(cfg.data, data_dir=data_dir, verify=False)
    data_dir = Path(data_dir)
    return saved, data_dir, checked_tokenizer(data_dir, cfg, "the config")


def _start_log(ctx: RunContext, saved, step: int) -> None:
    """(rank 0) Write config.json; keep the metrics lines up to the checkpoint resumed from."""
    out = ctx.out
    if saved is None and out.exists() and any(out.iterdir()):
        move_aside(out)  # --overwrite of a run folder (checked above): kept aside, never deleted
    hold_folder(out)  # made and flocked: a deleted lock file lets no second training in
    clear_diverged(out)  # a resume of a diverged run trains again: its record is stale until it diverges again
    atomic_write_json(out / "config.json", {**ctx.cfg.to_dict(), "data_dir": str(ctx.data_dir)})
    # a killed run may have logged past its last checkpoint: drop those lines, they are redone
    kept, _ = kept_log(out, step) if saved is not None else ([], False)
    atomic_write_text(out / "metrics.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


def _evaluator(ctx: RunContext, token_bytes, step: Step):
    """evaluate(diag) -> {"val_bpb", and on rank 0 where diag "diag"}: bpb on the fixed validation
    stream (each rank reads every world-th batch; evaluate_bpb all-reduces the sums), diagnostics on 4
    rows (at every cfg.diag_every-th evaluation: they cost a forward pass of their own)."""
    T, B = ctx.cfg.model.sequence_len, ctx.rows
    diag_x = None
    if ctx.rank == 0:
        rows = min(B, DIAG_ROWS)
        diag_x = next(iter(val_batches(ctx.data_dir, batch_size=rows, seq_len=T, max_tokens=rows * T,
                                       device=step.device)))[0]

    def evaluate(diag: bool = True) -> dict:
        batches = val_batches(ctx.data_dir, batch_size=B, seq_len=T, max_tokens=ctx.cfg.eval_tokens,
                              device=step.device, rank=ctx.rank, world_size=ctx.world)  # this rank's batches only
        with step.precision.context():
            record = {"val_bpb": evaluate_bpb(step.forward, batches, token_bytes)}
            if ctx.rank == 0 and diag:
                record["diag"] = diagnostics_snapshot(step.model, diag_x)
        return record
    return evaluate


def _start_model(ctx: RunContext, saved) -> tuple[GPT, Step, int, Loop]:
    """(model, its training step, the step to start from, the loop's values): the model initialised
    from the seed (xsa.stack.model.build: on the CPU as the committed runs, on the meta device and then the
    GPU under CUDA), or the checkpoint's state."""
    cfg, out = ctx.cfg, ctx.out
    model = build_model(cfg.model, cfg.seed, ctx.device)
    step_fn = Step(model, cfg, ctx.device)
    if saved is None or not ckpt.state_path(out).exists():
        return model, step_fn, 0, Loop()
    step, loop_state = ckpt.load_training_state(out, model=model, optimizers=step_fn.optimizers, config=cfg)
    print0(f"resuming {out} at step {step}")
    return model, step_fn, step, Loop.from_dict(loop_state)


def _train(ctx: RunContext) -> dict:
    # open the run (folder, data, tokenizer), then build the model, its step, the loader and the evaluator
    timers = Timers(ctx.device)
    saved, data_dir, tokenizer = _open_run(ctx)
    ctx = replace(ctx, data_dir=data_dir)
    cfg, out, device, rank, world = ctx.cfg, ctx.out, ctx.device, ctx.rank, ctx.world
    if saved is not None and (done := finished_summary(out, cfg)) is not None:
        print0(f"{out}: already trained to its horizon ({cfg.num_iterations} steps); nothing was changed")
        return done
    T, grad_accum = cfg.model.sequence_len, ctx.grad_accum
    model, step_fn, step, loop = _start_model(ctx, saved)
    if loop.git_commit is None:  # a new run (or one whose checkpoint predates the field): the code it starts from
        loop.git_commit, loop.git_dirty = git_state().values()
    loop.data_sha256 = same_data(loop.data_sha256, data_dir, out)
    redo = saved is not None and kept_log(out, step, say=True)[1]  # read on every rank: evaluate() is collective
    if rank == 0:
        _start_log(ctx, saved, step)
    ctx.barrier()
    loader = TokenLoader(data_dir, split="train", batch_size=ctx.rows, seq_len=T,
                         rows_per_step=cfg.total_batch_size // T, seed=cfg.seed, rank=rank, world_size=world,
                         device=device, packing=cfg.row_packing)
    evaluate = _evaluator(ctx, tokenizer.token_bytes.to(device), step_fn)
    write = (lambda record: append_jsonl(out / "metrics.jsonl", record)) if rank == 0 else (lambda record: None)

    end, throughput = ctx.end, Throughput.of(model, device, world)
    ema_dtype = torch.float32 if device.type == "mps" else torch.float64
    ema = torch.tensor(loop.ema, dtype=ema_dtype, device=device)
    print0(f"{cfg.preset}: {model.num_params():,} params, {cfg.num_iterations} steps of {cfg.total_batch_size:,} "
           f"tokens ({grad_accum} micro-batches x {world} ranks), device {device_name(device)}")
    if step == 0 or (redo and (step % cfg.eval_every == 0 or step == cfg.num_iterations)):
        loop.val_bpb = (record := evaluate())["val_bpb"]  # the initial model's, or a lost line's again
        write({"step": step, **record})

    # the loop: one update per iteration; the logged loss is the only host sync of a plain step
    pbar = tqdm(total=end, initial=step, disable=not ctx.progress or rank != 0, desc=cfg.preset, dynamic_ncols=True)
    timers.start_log()
    while step < end:
        loss = step_fn(step, (loader.get(step, m) for m in range(grad_accum)), grad_accum)
        step += 1
        timers.steps += 1  # the updates of this log window
        if ctx.is_ddp:  # one scalar per step, no host sync
            dist.all_reduce(loss)
            loss /= world
        ema.mul_(EMA_BETA).add_(loss.to(ema_dtype), alpha=1 - EMA_BETA)
        pbar.update(1)
        record = {"step": step}
        if step % cfg.log_every == 0 or step == end:
            loop.train_loss = loss.item()
            if not math.isfinite(loop.train_loss):
                raise TrainingDiverged(f"train loss is {loop.train_loss}", step, out)
            dt, dc, tokens = timers.close_log(loop, cfg.total_batch_size)
            record.update(train_loss=loop.train_loss, train_loss_ema=ema.item() / (1 - EMA_BETA ** step),
                          lr_mult=step_fn.lr, **throughput.rates(tokens, dt, dc))
            pbar.set_postfix(loss=f"{loop.train_loss:.4f}", tok_s=f"{tokens / dt:,.0f}")
        with timers.paused():  # evaluation and checkpoints are not training time
            if step % cfg.eval_every == 0 or step == end:
                record.update(evaluate(diag=(step // cfg.eval_every) % cfg.diag_every == 0 or step == end))
                loop.val_bpb = record["val_bpb"]
                if ctx.progress and rank == 0:
                    pbar.write(f"step {step}: val bpb {loop.val_bpb:.4f}")
            if len(record) > 1:
                write(record)
            if step % cfg.checkpoint_every == 0 or step == end:
                _checkpoint(ctx, step_fn, step, loop, ema, timers)
    pbar.close()
    timers.add_run_time(loop)
    return _finish(ctx, model, step, loop, throughput)


def _checkpoint(ctx: RunContext, step_fn: Step, step: int, loop: Loop, ema: torch.Tensor, timers: Timers) -> None:
    """Save the training state (every rank: Muon's state is gathered from the owner ranks; rank 0
    writes the file), never non-finite weights over a good checkpoint (a NaN may appear between log
    steps)."""
    if not torch.stack([p.isfinite().all() for p in step_fn.model.parameters()]).all():
        raise TrainingDiverged("non-finite weights", step, ctx.out)
    loop.ema = ema.item()
    timers.add_run_time(loop)
    ckpt.save_training_state(ctx.out, model=step_fn.model, optimizers=step_fn.optimizers, step=step,
                             loop_state=asdict(loop), config=ctx.cfg)


def _finish(ctx: RunContext, model: GPT, step: int, loop: Loop, throughput: Throughput) -> dict:
    """Write the final model, summary.json and provenance.json (rank 0); return the summary."""
    cfg, device = ctx.cfg, ctx.device
    summary = dict(
        val_bpb=loop.val_bpb, steps=step, tokens=step * cfg.total_batch_size, num_iterations=cfg.num_iterations,
        complete=step == cfg.num_iterations,
        tok_per_s=loop.timed_tokens / loop.train_time_s if loop.train_time_s else None,
        seed=cfg.seed, preset=cfg.preset, **arm_record(cfg), optimizer=cfg.optimizer, config_hash=cfg.config_hash(),
        final_weights_sha256=ckpt.weights_sha256(model.state_dict()),
        learned_gates=model.learned_gates(),  # None without xsa_gate
        train_loss_final=loop.train_loss, wall_time_s=loop.wall_time_s, cpu_time_s=loop.cpu_time_s,
        world_size=ctx.world, device=device_name(device),
        # the MFU of the log: the model's FLOPs per token as it counts them, over this matmul peak
        flops_per_token=throughput.flops_per_token, peak_flops=throughput.peak, mfu=throughput.run_mfu(loop),
    )
    if ctx.rank == 0:
        ckpt.save_model(ctx.out, model=model, config=cfg, step=step)
        atomic_write_json(ctx.out / "summary.json", summary)
        atomic_write_json(ctx.out / "provenance.json", provenance(
            config_hash=cfg.config_hash(), seed=cfg.seed, device=device_name(device),
            wall_time_s=loop.wall_time_s,
            extra=dict(world_size=ctx.world, device_batch_size=ctx.rows, data_dir=str(ctx.data_dir),
                       data_sha256=data_fingerprint(ctx.data_dir), num_threads=torch.get_num_threads(),
                       cpu_time_s=loop.cpu_time_s, command=" ".join(sys.argv),
                       **code_provenance(loop.git_commit, loop.git_dirty))))
    ctx.barrier()
    return summary


# -----------------------------------------------------------------------------
# Command line

FLAGS = dict(alpha="xsa_alpha", xsa_layers="xsa_layers", xsa_value="xsa_value",
             optimizer="optimizer")  # the flags that set a config field, by field


def run_of_args(args) -> Run:
    """The run a command line names: its preset, the fields its flags and --set give, its seed."""
    sets = parse_overrides(args.set)
    for name in ("preset", "seed"):
        if name in sets:
            raise ValueError(f"--set {name}=...: give it as --{name}")
    flags = {field: getattr(args, flag) for flag, field in FLAGS.items() if getattr(args, flag) is not None}
    both = sorted(set(flags) & set(sets))
    if both:
        raise ValueError(f"--set {both[0]}=...: also given by its own flag; give it once")
    return Run.of(args.preset, seed=args.seed, **flags, **sets)

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m xsa.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", required=True, help=f"a preset of xsa/stack/presets.py ({', '.join(PRESETS)})")
    p.add_argument("--alpha", type=float, default=None,
                   help="XSA strength in [0, 1]; alone it applies to every layer (--alpha 0: the zero-strength "
                        "formula, a control; the baseline is --xsa-layers none, the default)")
    p.add_argument("--xsa-layers", default=None,
                   help="where XSA runs: all | none | last:K | first:K | comma list of layer indices (alone: alpha 1)")
    p.add_argument("--xsa-value", default=None, choices=["mixed", "plain"],
                   help="project against the aggregated v (mixed, with value embedding) or c_v(x) alone (plain)")
    p.add_argument("--optimizer", default=None, choices=["muon", "adamw"], help="Muon+AdamW or AdamW alone")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any config field, e.g. cpu_compile=true, matrix_lr=0.08, xsa_gate=true (repeatable; "
                        "the value read as JSON where it parses, else as text)")
    p.add_argument("--seed", type=int, default=0, help="seed of initialisation and data order (default 0)")
    p.add_argument("--device-batch-size", type=int, default=None,
                   help="rows per micro-batch (default: the preset's; the total batch stays, more micro-batches "
                        "accumulate), e.g. 8 for d24-nanochat on an 80 GB GPU; recorded in the run's provenance, "
                        "not its id, and a --resume may change it")
    p.add_argument("--out", default=None, help="run folder (default: results/runs/<run id>, e.g. cpu-w64-d4_xsa1_s0)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many updates (schedule unchanged)")
    p.add_argument("--data-dir", default=None, help="built data folder (default: the cache, built if missing)")
    p.add_argument("--device", default=None, help="cpu, cuda, mps (default: auto-detect)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv=None):
    p = parser()
    args = p.parse_args(argv)
    try:
        run = run_of_args(args)
        out = Path(args.out) if args.out else REPO_ROOT / "results" / "runs" / run.run_id
        summary = train(run.config(), out, resume=args.resume, overwrite=args.overwrite, max_steps=args.max_steps,
                        data_dir=args.data_dir, device=args.device, progress=not args.no_progress,
                        device_batch_size=args.device_batch_size)
    except (RunFolderBusy, ConfigError, FileExistsError, FileNotFoundError, PermissionError, ValueError) as e:
        p.exit(2, f"{p.prog}: error: {e}\n")  # bad input or a busy folder: one line, exit 2, as argparse does
    except (TrainingDiverged, OSError) as e:  # diverged (its record written), a full or read-only disk (named)
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print0(f"{out}: val bpb {summary['val_bpb']:.4f} after {summary['steps']} steps "
           f"({summary['tok_per_s'] or 0:,.0f} tok/s)")


if __name__ == "__main__":
    main()
