"""
Train one arm: a GPT with a given XSA setting, Muon + AdamW (or AdamW alone), on a data subset.

    python -m xsa.train --preset cpu-d4 --alpha 1 --out results/runs/cpu-d4-xsa
    torchrun --nproc_per_node=8 -m xsa.train --preset d12        (DDP: nccl on CUDA, gloo on CPU)

Step convention: `step` counts optimizer updates done. The train loss logged at step s is the loss
of the batch of update s (computed before that update); the first logged step is 1. Step 0 carries
only the evaluation of the initial model. Val bpb is measured at step 0, every eval_every steps and at
the last step of the run.

RUN_DIR/metrics.jsonl has one line per logged step: step, train_loss, train_loss_ema, lr_mult,
tok_per_s, mfu, and on eval steps val_bpb and diag (attention diagnostics per layer on a fixed
4-row validation batch, see xsa/diagnostics.py). train_loss_ema is an EMA (beta 0.9) of every
step's train loss, debiased like Adam's moments: ema_s / (1 - beta^s), where ema_0 = 0.

Device: cuda (bf16 autocast + torch.compile), mps or cpu (fp32, eager) are detected automatically.
CPU runs resume bit-exactly (at the same thread count): the data loader is a pure function of
(seed, step, micro-batch), and checkpoints hold the model, optimizers, loop values and RNG states.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import platform
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from xsa import checkpoint as ckpt
from xsa.bpb import evaluate_bpb
from xsa.common import autodetect_device, cache_dir, device_name, dist_info, matmul_peak_flops, print0
from xsa.config import ConfigError, TrainConfig, make_config
from xsa.diagnostics import diagnostics_snapshot
from xsa.model import GPT
from xsa.optim import build_optimizers
from xsa.records import (REPO_ROOT, append_jsonl, atomic_write_json, atomic_write_text, provenance,
                         read_json, read_jsonl)

EMA_BETA = 0.9
MUON_MOMENTUM_START = 0.85


class TrainingDiverged(RuntimeError):
    """The loss or the weights became NaN/inf; training stopped, the last good checkpoint is intact."""


# -----------------------------------------------------------------------------
# Schedules, as functions of the index `it` of the update being made (0-based), as nanochat

def lr_multiplier(it: int, cfg: TrainConfig) -> float:
    """Linear warm-up, constant, then linear warm-down to final_lr_frac."""
    n = cfg.num_iterations
    warmup, warmdown = round(cfg.warmup_ratio * n), round(cfg.warmdown_ratio * n)
    if it < warmup:
        return (it + 1) / warmup
    if it <= n - warmdown:
        return 1.0
    progress = (n - it) / warmdown
    return progress + (1 - progress) * cfg.final_lr_frac


def muon_momentum(it: int, cfg: TrainConfig) -> float:
    frac = min(it / max(cfg.muon_momentum_warmup_steps, 1), 1.0)
    return (1 - frac) * MUON_MOMENTUM_START + frac * cfg.muon_momentum


def weight_decay_multiplier(it: int, cfg: TrainConfig) -> float:
    return 1 - it / cfg.num_iterations


# -----------------------------------------------------------------------------
# Peak FLOPs for MFU

GPU_PEAK_BF16 = {  # dense bf16 tensor-core FLOP/s from vendor datasheets
    "H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12,
    "A10": 125e12, "4090": 165e12, "3090": 71e12,
}


def peak_flops(device: torch.device) -> float | None:
    """The device's peak FLOP/s: a datasheet value for known GPUs; on CPU a measured fp32 matmul
    rate (the fastest any model matmul can run here), cached in cache_dir()/peak_flops.json."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return next((v for k, v in GPU_PEAK_BF16.items() if k in name), None)
    if device.type != "cpu":
        return None
    key = f"{platform.machine()}|{platform.processor()}|threads={torch.get_num_threads()}|torch={torch.__version__}"
    path = Path(cache_dir()) / "peak_flops.json"
    table = {}
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    if key not in table:
        table[key] = matmul_peak_flops(device, wall=True)[0]
        try:
            atomic_write_text(path, json.dumps(table, indent=2, sort_keys=True) + "\n")
        except OSError:
            pass  # a read-only cache only costs a re-measurement next time
    return table[key]


# -----------------------------------------------------------------------------
# The run folder

def default_run_name(cfg: TrainConfig) -> str:
    m = cfg.model
    xsa = "base" if not m.xsa_layer_set() else f"xsa{m.xsa_alpha:g}-{m.xsa_layers.replace(',', '_').replace(':', '')}-{m.xsa_value}"
    return f"{cfg.preset}_{xsa}_{cfg.optimizer}_s{cfg.seed}"


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
        diffs = _config_diff({k: v for k, v in saved.items() if k != "data_dir"}, cfg.to_dict())
        if diffs:
            raise ConfigError(f"resume: the config differs from {cfg_path}: " + "; ".join(diffs))
        return saved
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"out: run folder {out} already exists; pass --overwrite to replace it "
                                  "or --resume to continue it (nothing was changed)")
        if not cfg_path.exists():
            raise FileExistsError(f"out: {out} is not empty and is not a run folder (no config.json); "
                                  "refusing to overwrite it")
    return None


def _barrier(is_ddp: bool):
    if is_ddp:
        dist.barrier()


# -----------------------------------------------------------------------------
# Training

def train(cfg: TrainConfig, out_dir, *, resume: bool = False, overwrite: bool = False,
          max_steps: int | None = None, data_dir=None, device=None, progress: bool = True) -> dict:
    """Train `cfg` into the run folder `out_dir`; return the summary dict (also in summary.json).

    resume: continue from out_dir/ckpt/state.pt (the config must be identical).
    overwrite: replace an existing run folder (otherwise an existing folder is an error).
    max_steps: stop after this many updates in total (the schedule still spans the full horizon,
        so a later --resume finishes the same run), e.g. for short measurements.
    data_dir: the built data folder (default: xsa.data.ensure_data(cfg.data), built if missing).
    Under torchrun, every rank calls this; rank 0 writes the records.
    """
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ConfigError(f"max_steps must be a positive integer, got {max_steps!r}")
    is_ddp, rank, local_rank, world = dist_info()
    device = autodetect_device(device)
    if device.type == "cuda" and is_ddp:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    own_group = is_ddp and not dist.is_initialized()
    if own_group:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        return _train(cfg, Path(out_dir), resume, overwrite, max_steps, data_dir, device,
                      progress, is_ddp, rank, world)
    finally:
        if own_group:
            dist.destroy_process_group()


def _train(cfg, out, resume, overwrite, max_steps, data_dir, device, progress, is_ddp, rank, world):
    from tqdm.auto import tqdm
    from xsa.data import ensure_data
    from xsa.data.loader import TokenLoader, val_batches
    from xsa.data.tokenizer import Tokenizer

    t_wall = time.time()
    T, B = cfg.model.sequence_len, cfg.device_batch_size
    if cfg.total_batch_size % (B * T * world) != 0:
        raise ConfigError(f"total_batch_size ({cfg.total_batch_size}) must be a multiple of device_batch_size "
                          f"* sequence_len * world_size ({B} * {T} * {world})")
    grad_accum = cfg.total_batch_size // (B * T * world)

    # Check everything about the run folder on every rank before rank 0 writes anything
    saved = _check_run_dir(out, cfg, resume, overwrite)
    _barrier(is_ddp)
    if data_dir is None and saved is not None:
        data_dir = saved.get("data_dir")
    if rank == 0:  # build (or verify) the data once; the other ranks wait, then find it built
        data_dir = ensure_data(cfg.data, data_dir=data_dir)
    _barrier(is_ddp)
    if rank != 0:
        data_dir = ensure_data(cfg.data, data_dir=data_dir, verify=False)
    data_dir = Path(data_dir)
    tokenizer = Tokenizer.from_data_dir(data_dir)
    if tokenizer.vocab_size != cfg.model.vocab_size:
        raise ConfigError(f"vocab_size: the tokenizer in {data_dir} has {tokenizer.vocab_size} tokens, "
                          f"the config has {cfg.model.vocab_size}")
    token_bytes = tokenizer.token_bytes.to(device)

    # Model: initialised on the CPU from the seed, so every device starts from the same weights
    torch.manual_seed(cfg.seed)
    raw_model = GPT(cfg.model)
    raw_model.init_weights()
    raw_model.to(device)
    optimizers = build_optimizers(raw_model, cfg, world)

    step, loop = 0, dict(ema=0.0, train_time_s=0.0, timed_tokens=0, wall_time_s=0.0,
                         val_bpb=None, train_loss=None)
    metrics_path = out / "metrics.jsonl"
    if saved is not None and ckpt.state_path(out).exists():
        step, loop = ckpt.load_training_state(out, model=raw_model, optimizers=optimizers, config=cfg)
        print0(f"resuming {out} at step {step}")
    if rank == 0:
        if saved is None and out.exists():
            shutil.rmtree(out)  # --overwrite of a run folder (checked above)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / "config.json", {**cfg.to_dict(), "data_dir": str(data_dir)})
        # a killed run may have logged past its last checkpoint: drop those lines, they are redone
        kept = [r for r in read_jsonl(metrics_path) if r["step"] <= step] if metrics_path.exists() and step else []
        atomic_write_text(metrics_path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    _barrier(is_ddp)

    # bf16 autocast + compile on CUDA; fp32 eager elsewhere (bf16 matmuls are slow on CPUs)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else contextlib.nullcontext())
    fwd_model = torch.compile(raw_model, dynamic=False) if device.type == "cuda" else raw_model
    train_model = DDP(fwd_model, device_ids=[device.index] if device.type == "cuda" else None) if is_ddp else fwd_model

    loader = TokenLoader(data_dir, split="train", batch_size=B, seq_len=T, rows_per_step=cfg.total_batch_size // T,
                         seed=cfg.seed, rank=rank, world_size=world, device=device)

    def eval_bpb() -> float:
        batches = val_batches(data_dir, batch_size=B, seq_len=T, max_tokens=cfg.eval_tokens, device=device)
        with autocast:  # each rank takes every world-th batch; evaluate_bpb all-reduces the sums
            return evaluate_bpb(fwd_model, itertools.islice(batches, rank, None, world), token_bytes)

    # attention diagnostics at every evaluation, on a small fixed validation batch (rank 0 only)
    diag_rows = min(B, 4)
    diag_x = next(iter(val_batches(data_dir, batch_size=diag_rows, seq_len=T, max_tokens=diag_rows * T,
                                   device=device)))[0] if rank == 0 else None

    def evaluate() -> dict:
        record = {"val_bpb": eval_bpb()}
        if rank == 0:
            with autocast:
                record["diag"] = diagnostics_snapshot(raw_model, diag_x)
        return record

    def write_metrics(record: dict):
        if rank == 0:
            append_jsonl(metrics_path, record)

    num_iterations = cfg.num_iterations
    end = num_iterations if max_steps is None else min(num_iterations, max_steps)
    flops_per_token = raw_model.estimate_flops()
    peak = peak_flops(device)
    params = list(raw_model.parameters())
    ema_dtype = torch.float32 if device.type == "mps" else torch.float64
    ema = torch.tensor(loop["ema"], dtype=ema_dtype, device=device)
    print0(f"{cfg.preset}: {raw_model.num_params():,} params, {num_iterations} steps of {cfg.total_batch_size:,} "
           f"tokens ({grad_accum} micro-batches x {world} ranks), device {device_name(device)}")

    if step == 0:
        record = evaluate()
        loop["val_bpb"] = record["val_bpb"]
        write_metrics({"step": 0, **record})

    pbar = tqdm(total=end, initial=step, disable=not progress or rank != 0, desc=cfg.preset, dynamic_ncols=True)
    t_last, steps_since_log, paused, first_step = time.perf_counter(), 0, 0.0, step
    while step < end:
        lrm, mom, wdm = lr_multiplier(step, cfg), muon_momentum(step, cfg), weight_decay_multiplier(step, cfg)
        for opt in optimizers:
            for group in opt.param_groups:
                group["lr"] = group["initial_lr"] * lrm
                group["weight_decay"] = group["initial_wd"] * wdm
                if "momentum" in group:
                    group["momentum"] = mom
        loss_sum = torch.zeros((), device=device)
        for micro in range(grad_accum):
            x, y = loader.get(step, micro)
            # DDP all-reduces gradients on the last micro-batch only
            sync = train_model.no_sync() if is_ddp and micro < grad_accum - 1 else contextlib.nullcontext()
            with sync:
                with autocast:
                    loss = train_model(x, y)
                (loss / grad_accum).backward()
            loss_sum += loss.detach()
        for opt in optimizers:
            opt.step()
        raw_model.zero_grad(set_to_none=True)
        step += 1
        steps_since_log += 1

        loss_step = loss_sum / grad_accum
        if is_ddp:  # one scalar per step, no host sync
            dist.all_reduce(loss_step)
            loss_step /= world
        ema.mul_(EMA_BETA).add_(loss_step.to(ema_dtype), alpha=1 - EMA_BETA)
        pbar.update(1)

        log_now = step % cfg.log_every == 0 or step == end
        eval_now = step % cfg.eval_every == 0 or step == end
        record = {"step": step}
        if log_now:
            train_loss = loss_step.item()  # the only host sync of a non-eval step
            if not math.isfinite(train_loss):
                raise TrainingDiverged(
                    f"training diverged: train loss is {train_loss} at step {step}; stopped. The last good "
                    f"checkpoint ({ckpt.state_path(out)}) is intact; nothing after it was saved.")
            dt = time.perf_counter() - t_last - paused
            tokens = steps_since_log * cfg.total_batch_size
            if step - steps_since_log > first_step:  # the first update of a process includes warm-up
                loop["train_time_s"] += dt
                loop["timed_tokens"] += tokens
            tok_per_s = tokens / dt
            loop["train_loss"] = train_loss
            record.update(train_loss=train_loss, train_loss_ema=ema.item() / (1 - EMA_BETA ** step),
                          lr_mult=lrm, tok_per_s=tok_per_s,
                          mfu=flops_per_token * tok_per_s / (peak * world) if peak else None)
            pbar.set_postfix(loss=f"{train_loss:.4f}", tok_s=f"{tok_per_s:,.0f}")
            t_last, steps_since_log, paused = time.perf_counter(), 0, 0.0
        t_pause = time.perf_counter()  # evaluation and checkpoints are not training time
        if eval_now:
            record.update(evaluate())
            loop["val_bpb"] = record["val_bpb"]
            if progress and rank == 0:
                pbar.write(f"step {step}: val bpb {loop['val_bpb']:.4f}")
        if log_now or eval_now:
            write_metrics(record)
        if step % cfg.checkpoint_every == 0 or step == end:
            # never save non-finite weights over a good checkpoint (a NaN may appear between log steps)
            if not torch.stack([p.isfinite().all() for p in params]).all():
                raise TrainingDiverged(
                    f"training diverged: non-finite weights at step {step}; stopped. The last good "
                    f"checkpoint ({ckpt.state_path(out)}) is intact; nothing after it was saved.")
            loop["ema"] = ema.item()
            loop["wall_time_s"] += time.time() - t_wall
            t_wall = time.time()
            if rank == 0:
                ckpt.save_training_state(out, model=raw_model, optimizers=optimizers, step=step,
                                         loop_state=loop, config=cfg)
        paused += time.perf_counter() - t_pause
    pbar.close()

    loop["wall_time_s"] += time.time() - t_wall
    summary = dict(
        val_bpb=loop["val_bpb"], steps=step, tokens=step * cfg.total_batch_size, num_iterations=num_iterations,
        complete=step == num_iterations,
        tok_per_s=loop["timed_tokens"] / loop["train_time_s"] if loop["train_time_s"] else None,
        seed=cfg.seed, preset=cfg.preset, xsa_alpha=cfg.model.xsa_alpha, xsa_layers=cfg.model.xsa_layers,
        xsa_value=cfg.model.xsa_value, optimizer=cfg.optimizer, config_hash=cfg.config_hash(),
        final_weights_sha256=ckpt.weights_sha256(raw_model.state_dict()),
        train_loss_final=loop["train_loss"], wall_time_s=loop["wall_time_s"],
        world_size=world, device=device_name(device),
    )
    if rank == 0:
        ckpt.save_model(out, model=raw_model, config=cfg, step=step)
        atomic_write_json(out / "summary.json", summary)
        atomic_write_json(out / "provenance.json", provenance(
            config_hash=cfg.config_hash(), seed=cfg.seed, device=device_name(device),
            wall_time_s=loop["wall_time_s"],
            extra=dict(world_size=world, data_dir=str(data_dir), num_threads=torch.get_num_threads(),
                       command=" ".join(sys.argv))))
    _barrier(is_ddp)
    return summary


# -----------------------------------------------------------------------------
# Command line

def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m xsa.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", required=True, help="a preset of xsa/config.py (smoke, cpu-d4, cpu-d8, d12, d24)")
    p.add_argument("--alpha", type=float, default=None, help="XSA strength in [0, 1] (0 = standard attention)")
    p.add_argument("--xsa-layers", default=None, help="all | none | last:K | first:K | comma list of layer indices")
    p.add_argument("--xsa-value", default=None, choices=["mixed", "plain"],
                   help="project against the aggregated v (mixed, with value embedding) or c_v(x) alone (plain)")
    p.add_argument("--optimizer", default=None, choices=["muon", "adamw"], help="Muon+AdamW or AdamW alone")
    p.add_argument("--seed", type=int, default=None, help="seed of initialisation and data order")
    p.add_argument("--out", default=None, help="run folder (default: results/runs/<preset>_<arm>_<optimizer>_s<seed>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many updates (schedule unchanged)")
    p.add_argument("--data-dir", default=None, help="built data folder (default: the cache, built if missing)")
    p.add_argument("--device", default=None, help="cpu, cuda, mps (default: auto-detect)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    try:
        cfg = make_config(args.preset, xsa_alpha=args.alpha, xsa_layers=args.xsa_layers, xsa_value=args.xsa_value,
                          optimizer=args.optimizer, seed=args.seed)
        out = Path(args.out) if args.out else REPO_ROOT / "results" / "runs" / default_run_name(cfg)
        summary = train(cfg, out, resume=args.resume, overwrite=args.overwrite, max_steps=args.max_steps,
                        data_dir=args.data_dir, device=args.device, progress=not args.no_progress)
    except (ConfigError, FileExistsError, FileNotFoundError, TrainingDiverged, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print0(f"{out}: val bpb {summary['val_bpb']:.4f} after {summary['steps']} steps "
           f"({summary['tok_per_s'] or 0:,.0f} tok/s)")


if __name__ == "__main__":
    main()
