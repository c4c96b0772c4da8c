"""
Train one run: a GPT with a given XSA setting, Muon + AdamW (or AdamW alone), on a data subset.

    python -m xsa.train --preset cpu-w64-d4 --alpha 1                 # -> results/runs/cpu-w64-d4_xsa1_s0
    torchrun --nproc_per_node=8 -m xsa.train --preset d12        (DDP: nccl on CUDA, gloo on CPU)

Step convention: `step` counts optimizer updates done. The train loss logged at step s is the loss
of the batch of update s (computed before that update); the first logged step is 1. Step 0 carries
only the evaluation of the initial model. Val bpb is measured at step 0, every eval_every steps and at
the last step of the run.

RUN_DIR/metrics.jsonl has one line per logged step: step, train_loss, train_loss_ema, lr_mult,
tok_per_s, mfu (against the measured matmul peak), mfu_datasheet (against the GPU datasheet's bf16
peak, as nanochat; None on CPU), and on eval steps val_bpb and diag (attention diagnostics per layer on a fixed
4-row validation batch, see xsa/diagnostics.py). train_loss_ema is an EMA (beta 0.9) of every
step's train loss, debiased like Adam's moments: ema_s / (1 - beta^s), where ema_0 = 0.

Device: cuda (bf16 autocast + torch.compile), mps or cpu (fp32, eager) are detected automatically
(the precision policy of xsa/step.py). CPU runs resume bit-exactly (at the same thread count): the
data loader is a pure function of (seed, step, micro-batch), and checkpoints hold the model,
optimizers, loop values and RNG states.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from xsa import checkpoint as ckpt
from xsa.bpb import evaluate_bpb
from xsa.common import autodetect_device, clock, datasheet_peak_flops, device_name, dist_info, mfu, peak_flops, print0
from xsa.config import PRESETS, ConfigError, TrainConfig
from xsa.diagnostics import diagnostics_snapshot
from xsa.model import build as build_model
from xsa.records import REPO_ROOT, append_jsonl, atomic_write_json, atomic_write_text, provenance, read_json, read_jsonl
from xsa.runlock import RunFolderBusy, own_run
from xsa.runlog import finished_summary, kept_log
from xsa.step import Step

EMA_BETA = 0.9
DIAG_ROWS = 4  # validation rows of the attention diagnostics logged at every evaluation


class TrainingDiverged(RuntimeError):
    """The loss or the weights became NaN/inf; training stopped, the last good checkpoint is intact."""


# -----------------------------------------------------------------------------
# The run folder

def _config_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    diffs = []
    for k in sorted(set(a) | set(b)):
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            diffs += _config_diff(a[k], b[k], f"{prefix}{k}.")
        elif a.get(k) != b.get(k):
            diffs.append(f"{prefix}{k} (saved {a.get(k)!r}, given {b.get(k)!r})")
    return diffs


def _check_run_dir(out: Path, cfg: TrainConfig, resume: bool, overwrite: bool) -> dict | None:
    """Validate the run folder before anything is written; return the saved config.json on resume."""
    cfg_path = out / "config.json"
    if resume:
        if not cfg_path.exists():
            raise FileNotFoundError(f"resume: {cfg_path} not found, there is no run to resume in {out}")
        saved = read_json(cfg_path)
        # by value: fields the record predates read at their defaults (TrainConfig.from_dict)
        diffs = _config_diff(TrainConfig.from_dict(saved, str(cfg_path)).to_dict(), cfg.to_dict())
        if diffs:
            raise ConfigError(f"resume: the config differs from {cfg_path}: " + "; ".join(diffs))
        metrics = out / "metrics.jsonl"
        trained = (out / "summary.json").exists() or (
            metrics.exists() and any(r.get("step", 0) > 0 for r in read_jsonl(metrics)))
        if trained and not ckpt.state_path(out).exists():
            # never restart a trained run from step 0 behind the user's back
            raise FileNotFoundError(f"resume: {ckpt.state_path(out)} is missing, so {out} cannot be resumed; "
                                    "pass --overwrite instead of --resume to train it again from step 0")
        return saved
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"out: {out} is a file, not a run folder")
    if out.exists() and any(out.iterdir()):
        if not cfg_path.exists():  # not ours, or damaged: never deleted, and no advice that loops
            raise FileExistsError(f"out: {out} is not empty and is not a run folder (no config.json); "
                                  "nothing was changed: choose another --out, or move the folder away")
        if not overwrite:
            raise FileExistsError(f"out: run folder {out} already exists; pass --overwrite to replace it "
                                  "or --resume to continue it (nothing was changed)")
    parent = next(p for p in (out, *out.parents) if p.exists())
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"out: cannot write to {parent} (read-only)")
    return None


def _barrier(is_ddp: bool):
    if is_ddp:
        dist.barrier()


@dataclass
class Loop:
    """The loop's running values: checkpointed, so a resumed run continues its log and timers."""
    ema: float = 0.0  # the raw (not debiased) EMA of the train loss
    train_time_s: float = 0.0  # wall time of timed training (evaluation, checkpoints, warm-up excluded)
    train_clock_s: float = 0.0  # the same on the device clock (CPU time on CPU), for MFU
    timed_tokens: int = 0
    wall_time_s: float = 0.0  # wall time of the whole run, every process counted
    cpu_time_s: float = 0.0  # CPU time of the whole run (this process's threads)
    val_bpb: float | None = None
    train_loss: float | None = None

    @classmethod
    def from_dict(cls, d: dict) -> "Loop":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


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
    device_batch_size: rows per micro-batch in this process (default: the config's). How the update
        is computed, not which update: a step reads the same rows whatever the micro-batching, so
        the run keeps its id and config and records this in its provenance; a resume may change it
        (e.g. 8 rows where 16 ran out of memory).
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
    try:
        with own_run(out_dir, "training") if rank == 0 else contextlib.nullcontext():  # one owner per folder
            return _train(cfg, Path(out_dir), resume, overwrite, max_steps, data_dir, device,
                          progress, is_ddp, rank, world, rows)
    finally:
        if own_group:
            dist.destroy_process_group()


def _open_run(cfg, out, resume, overwrite, data_dir, is_ddp, rank, world, B):
    """Check the run folder and the data on every rank before rank 0 writes anything; return
    (saved config.json or None, data folder, tokenizer)."""
    from xsa.data import ensure_data
    from xsa.data.climbmix import tokens_read
    from xsa.data.tokenizer import Tokenizer
    if cfg.total_batch_size % (B * cfg.model.sequence_len * world) != 0:
        raise ConfigError(f"total_batch_size ({cfg.total_batch_size}) must be a multiple of device_batch_size "
                          f"* sequence_len * world_size ({B} * {cfg.model.sequence_len} * {world})")
    saved = _check_run_dir(out, cfg, resume, overwrite)
    if data_dir is None and saved is not None:
        data_dir = saved.get("data_dir")
    if is_ddp:  # never build under torchrun: the other ranks would wait at a barrier with a timeout
        from xsa.data import data_dir as default_data_dir
        from xsa.data.build import COMPLETE
        path = Path(data_dir) if data_dir else default_data_dir(cfg.data)
        if not (path / COMPLETE).exists():
            raise FileNotFoundError(f"data: {path} is not built; under torchrun build it first, in its own step: "
                                    f"python -m xsa.data build --subset {cfg.data}")
    _barrier(is_ddp)
    if rank == 0:  # build (or verify) the data once; the other ranks wait, then find it built
        data_dir = ensure_data(cfg.data, data_dir=data_dir, tokens=tokens_read(cfg))
    _barrier(is_ddp)
    if rank != 0:
        data_dir = ensure_data(cfg.data, data_dir=data_dir, verify=False)
    data_dir = Path(data_dir)
    tokenizer = Tokenizer.from_data_dir(data_dir)
    if tokenizer.vocab_size != cfg.model.vocab_size:
        raise ConfigError(f"vocab_size: the tokenizer in {data_dir} has {tokenizer.vocab_size} tokens, "
                          f"the config has {cfg.model.vocab_size}")
    return saved, data_dir, tokenizer


def _start_log(out: Path, cfg: TrainConfig, saved, data_dir: Path, step: int) -> None:
    """(rank 0) Write config.json; keep the metrics lines up to the checkpoint resumed from."""
    if saved is None and out.exists():
        shutil.rmtree(out)  # --overwrite of a run folder (checked above)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "config.json", {**cfg.to_dict(), "data_dir": str(data_dir)})
    # a killed run may have logged past its last checkpoint: drop those lines, they are redone
    kept, _ = kept_log(out, step) if saved is not None else ([], False)
    atomic_write_text(out / "metrics.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


def _evaluator(cfg, data_dir, token_bytes, step: Step, rank: int, world: int, B: int):
    """evaluate(diag) -> {"val_bpb", and on rank 0 where diag "diag"}: bpb on the fixed validation
    stream (each rank reads every world-th batch; evaluate_bpb all-reduces the sums), diagnostics on 4
    rows (at every cfg.diag_every-th evaluation: they cost a forward pass of their own)."""
    from xsa.data.loader import val_batches
    T = cfg.model.sequence_len
    diag_x = None
    if rank == 0:
        rows = min(B, DIAG_ROWS)
        diag_x = next(iter(val_batches(data_dir, batch_size=rows, seq_len=T, max_tokens=rows * T,
                                       device=step.device)))[0]

    def evaluate(diag: bool = True) -> dict:
        batches = val_batches(data_dir, batch_size=B, seq_len=T, max_tokens=cfg.eval_tokens, device=step.device,
                              rank=rank, world_size=world)  # this rank's batches only
        with step.precision.context():
            record = {"val_bpb": evaluate_bpb(step.forward, batches, token_bytes)}
            if rank == 0 and diag:
                record["diag"] = diagnostics_snapshot(step.model, diag_x)
        return record
    return evaluate


def data_fingerprint(data_dir: Path) -> str:
    """sha256 of the data folder's manifest, which lists the size and sha256 of every file the run
    read (tokenizer, token shards): equal fingerprints, equal data."""
    from xsa.data.shards import MANIFEST
    from xsa.records import sha256_file
    return sha256_file(Path(data_dir) / MANIFEST)


def _diverged(what: str, step: int, out: Path) -> TrainingDiverged:
    return TrainingDiverged(f"training diverged: {what} at step {step}; stopped. The last good checkpoint "
                            f"({ckpt.state_path(out)}) is intact; nothing after it was saved.")


def _train(cfg, out, resume, overwrite, max_steps, data_dir, device, progress, is_ddp, rank, world, B):
    from tqdm.auto import tqdm
    from xsa.data.loader import TokenLoader

    # open the run: folder, data, tokenizer
    t_wall, t_cpu = time.time(), time.process_time()
    saved, data_dir, tokenizer = _open_run(cfg, out, resume, overwrite, data_dir, is_ddp, rank, world, B)
    if saved is not None and (done := finished_summary(out, cfg)) is not None:
        print0(f"{out}: already trained to its horizon ({cfg.num_iterations} steps); nothing was changed")
        return done
    T = cfg.model.sequence_len
    grad_accum = cfg.total_batch_size // (B * T * world)

    # build: the model (xsa.model.build: on the CPU as the committed runs, on the meta device and
    # then the GPU under CUDA), its training step, the loader and the evaluator
    model = build_model(cfg.model, cfg.seed, device)
    step_fn = Step(model, cfg, device)
    step, loop = 0, Loop()
    if saved is not None and ckpt.state_path(out).exists():
        step, loop_state = ckpt.load_training_state(out, model=model, optimizers=step_fn.optimizers, config=cfg)
        loop = Loop.from_dict(loop_state)
        print0(f"resuming {out} at step {step}")
    redo = saved is not None and kept_log(out, step, say=True)[1]  # read on every rank: evaluate() is collective
    if rank == 0:
        _start_log(out, cfg, saved, data_dir, step)
    _barrier(is_ddp)
    loader = TokenLoader(data_dir, split="train", batch_size=B, seq_len=T, rows_per_step=cfg.total_batch_size // T,
                         seed=cfg.seed, rank=rank, world_size=world, device=device, packing=cfg.row_packing)
    evaluate = _evaluator(cfg, data_dir, tokenizer.token_bytes.to(device), step_fn, rank, world, B)
    write = (lambda record: append_jsonl(out / "metrics.jsonl", record)) if rank == 0 else (lambda record: None)

    end = cfg.num_iterations if max_steps is None else min(cfg.num_iterations, max_steps)
    flops_per_token, peak = model.estimate_flops(), peak_flops(device)
    sheet = datasheet_peak_flops(device)  # the datasheet's bf16 peak (GPUs only): nanochat's MFU
    ema_dtype = torch.float32 if device.type == "mps" else torch.float64
    ema = torch.tensor(loop.ema, dtype=ema_dtype, device=device)
    print0(f"{cfg.preset}: {model.num_params():,} params, {cfg.num_iterations} steps of {cfg.total_batch_size:,} "
           f"tokens ({grad_accum} micro-batches x {world} ranks), device {device_name(device)}")
    if step == 0 or (redo and (step % cfg.eval_every == 0 or step == cfg.num_iterations)):
        loop.val_bpb = (record := evaluate())["val_bpb"]  # the initial model's, or a lost line's again
        write({"step": step, **record})

    # the loop: one update per iteration; the logged loss is the only host sync of a plain step
    pbar = tqdm(total=end, initial=step, disable=not progress or rank != 0, desc=cfg.preset, dynamic_ncols=True)
    first, since_log, paused, paused_c = step, 0, 0.0, 0.0  # pauses on each clock: wall, `clock`
    t_last, c_last = time.perf_counter(), clock(device)
    while step < end:
        loss = step_fn(step, (loader.get(step, m) for m in range(grad_accum)), grad_accum)
        step, since_log = step + 1, since_log + 1
        if is_ddp:  # one scalar per step, no host sync
            dist.all_reduce(loss)
            loss /= world
        ema.mul_(EMA_BETA).add_(loss.to(ema_dtype), alpha=1 - EMA_BETA)
        pbar.update(1)
        record = {"step": step}
        if step % cfg.log_every == 0 or step == end:
            loop.train_loss = loss.item()
            if not math.isfinite(loop.train_loss):
                raise _diverged(f"train loss is {loop.train_loss}", step, out)
            dt, dc = time.perf_counter() - t_last - paused, clock(device) - c_last - paused_c
            tokens = since_log * cfg.total_batch_size
            if step - since_log > first:  # the first update of a process includes warm-up
                loop.train_time_s, loop.train_clock_s = loop.train_time_s + dt, loop.train_clock_s + dc
                loop.timed_tokens += tokens
            record.update(train_loss=loop.train_loss, train_loss_ema=ema.item() / (1 - EMA_BETA ** step),
                          lr_mult=step_fn.lr, tok_per_s=tokens / dt,
                          mfu=mfu(flops_per_token, tokens, dc, peak, world),
                          mfu_datasheet=mfu(flops_per_token, tokens, dc, sheet, world))
            pbar.set_postfix(loss=f"{loop.train_loss:.4f}", tok_s=f"{tokens / dt:,.0f}")
            t_last, c_last, since_log, paused, paused_c = time.perf_counter(), clock(device), 0, 0.0, 0.0
        # evaluation and checkpoints are not training time; on CPU `clock` is CPU time, which a loaded
        # machine gives out slower than wall time, so each clock subtracts its own pause
        t_pause, c_pause = time.perf_counter(), clock(device)
        if step % cfg.eval_every == 0 or step == end:
            record.update(evaluate(diag=(step // cfg.eval_every) % cfg.diag_every == 0 or step == end))
            loop.val_bpb = record["val_bpb"]
            if progress and rank == 0:
                pbar.write(f"step {step}: val bpb {loop.val_bpb:.4f}")
        if len(record) > 1:
            write(record)
        if step % cfg.checkpoint_every == 0 or step == end:
            # never save non-finite weights over a good checkpoint (a NaN may appear between log steps)
            if not torch.stack([p.isfinite().all() for p in model.parameters()]).all():
                raise _diverged("non-finite weights", step, out)
            loop.ema = ema.item()
            t_wall, t_cpu = _add_times(loop, t_wall, t_cpu)
            # every rank: Muon's state is gathered from the owner ranks; rank 0 writes the file
            ckpt.save_training_state(out, model=model, optimizers=step_fn.optimizers, step=step,
                                     loop_state=asdict(loop), config=cfg)
        paused, paused_c = paused + time.perf_counter() - t_pause, paused_c + clock(device) - c_pause
    pbar.close()
    _add_times(loop, t_wall, t_cpu)
    return _finish(cfg, out, model, step, loop, data_dir, device, world, rank, is_ddp, B)


def _add_times(loop: Loop, t_wall: float, t_cpu: float) -> tuple[float, float]:
    """Add the wall and CPU time since (t_wall, t_cpu) to the loop's totals; return the new marks."""
    now_wall, now_cpu = time.time(), time.process_time()
    loop.wall_time_s += now_wall - t_wall
    loop.cpu_time_s += now_cpu - t_cpu
    return now_wall, now_cpu


def _finish(cfg, out, model, step, loop: Loop, data_dir, device, world, rank, is_ddp, B) -> dict:
    """Write the final model, summary.json and provenance.json (rank 0); return the summary."""
    summary = dict(
        val_bpb=loop.val_bpb, steps=step, tokens=step * cfg.total_batch_size, num_iterations=cfg.num_iterations,
        complete=step == cfg.num_iterations,
        tok_per_s=loop.timed_tokens / loop.train_time_s if loop.train_time_s else None,
        seed=cfg.seed, preset=cfg.preset, xsa_alpha=cfg.model.xsa_alpha, xsa_layers=cfg.model.xsa_layers,
        xsa_value=cfg.model.xsa_value, optimizer=cfg.optimizer, config_hash=cfg.config_hash(),
        final_weights_sha256=ckpt.weights_sha256(model.state_dict()),
        train_loss_final=loop.train_loss, wall_time_s=loop.wall_time_s, cpu_time_s=loop.cpu_time_s,
        world_size=world, device=device_name(device),
        # the MFU of the log: the model's FLOPs per token as it counts them, over this matmul peak
        flops_per_token=model.estimate_flops(), peak_flops=peak_flops(device),
        mfu=mfu(model.estimate_flops(), loop.timed_tokens, loop.train_clock_s, peak_flops(device), world),
    )
    if rank == 0:
        ckpt.save_model(out, model=model, config=cfg, step=step)
        atomic_write_json(out / "summary.json", summary)
        atomic_write_json(out / "provenance.json", provenance(
            config_hash=cfg.config_hash(), seed=cfg.seed, device=device_name(device),
            wall_time_s=loop.wall_time_s,
            extra=dict(world_size=world, device_batch_size=B, data_dir=str(data_dir), data_sha256=data_fingerprint(data_dir),
                       num_threads=torch.get_num_threads(), cpu_time_s=loop.cpu_time_s,
                       command=" ".join(sys.argv))))
    _barrier(is_ddp)
    return summary


# -----------------------------------------------------------------------------
# Command line

def main(argv=None):
    from xsa.spec import Run
    p = argparse.ArgumentParser(prog="python -m xsa.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", required=True, help=f"a preset of xsa/config.py ({', '.join(PRESETS)})")
    p.add_argument("--alpha", type=float, default=None,
                   help="XSA strength in [0, 1]; alone it applies to every layer (--alpha 0: the zero-strength "
                        "formula, a control; the baseline is --xsa-layers none, the default)")
    p.add_argument("--xsa-layers", default=None,
                   help="where XSA runs: all | none | last:K | first:K | comma list of layer indices (alone: alpha 1)")
    p.add_argument("--xsa-value", default=None, choices=["mixed", "plain"],
                   help="project against the aggregated v (mixed, with value embedding) or c_v(x) alone (plain)")
    p.add_argument("--optimizer", default=None, choices=["muon", "adamw"], help="Muon+AdamW or AdamW alone")
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
    args = p.parse_args(argv)
    try:
        overrides = dict(xsa_alpha=args.alpha, xsa_layers=args.xsa_layers, xsa_value=args.xsa_value,
                         optimizer=args.optimizer)
        run = Run.of(args.preset, seed=args.seed, **{k: v for k, v in overrides.items() if v is not None})
        out = Path(args.out) if args.out else REPO_ROOT / "results" / "runs" / run.run_id
        summary = train(run.config(), out, resume=args.resume, overwrite=args.overwrite, max_steps=args.max_steps,
                        data_dir=args.data_dir, device=args.device, progress=not args.no_progress,
                        device_batch_size=args.device_batch_size)
    except TrainingDiverged as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except RunFolderBusy as e:
        p.exit(2, f"{p.prog}: error: {e}\n")
    except (ConfigError, FileExistsError, FileNotFoundError, PermissionError, ValueError) as e:
        p.exit(2, f"{p.prog}: error: {e}\n")  # bad input: one line, exit 2, as argparse does
    except OSError as e:  # a full disk, a read-only one: the message names the file
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print0(f"{out}: val bpb {summary['val_bpb']:.4f} after {summary['steps']} steps "
           f"({summary['tok_per_s'] or 0:,.0f} tok/s)")


if __name__ == "__main__":
    main()
