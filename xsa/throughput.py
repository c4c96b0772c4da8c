"""
What XSA costs: step time, tokens/s, memory and MFU of the baseline and the XSA arm, side by side.

Both arms are Runs of the study (xsa.stack.spec): the baseline (standard attention, no XSA layer) and XSA
(alpha = 1 at every layer). They live in ONE process and take turns, one full training step each
(xsa.stack.step.Step: forward + backward over the preset's gradient-accumulation micro batches + the real
optimizer step), in ABBA order: A B, B A, A B, ... Alternating
which arm goes first cancels slow drift of the machine (thermal, other load) and any advantage of
running second. Each round gives a pair (t_base, t_xsa) of step times measured on the same batch.

    overhead_ratio = median(t_xsa) / median(t_base) - 1
    overhead_ci95  = 2.5 and 97.5 percentiles of that statistic over bootstrap resamples of the
                     pairs (resampling whole pairs keeps the drift cancellation; fixed seed)

On CPU each step's process CPU time is recorded too, with its own overhead ratio and CI
(cpu_time_overhead_*): on a shared machine, time spent descheduled while other programs run lands
in wall time at random and can swamp a small difference; CPU time counts only this process's work.
Use one thread there (--threads 1) so idle threads spinning in OpenMP barriers do not count as work.

The first `warmup` rounds are discarded (allocator, caches, compilation). Tokens are synthetic
(throughput does not depend on their values): a copy task, each sequence a random half (Zipf
distributed tokens) followed by the same half again, so the loss curves recorded along the way
show both arms learning.
The learning rate is the optimizer's initial one, constant (no schedule): this is a benchmark.

MFU = flops_per_token (model.estimate_flops(), the baseline's count for both arms) * tokens/s
      / peak, where peak is a matmul throughput measured here on this device (bf16 on CUDA, fp32
      on CPU), not a datasheet number. On CPU both are per second of this process's CPU time, so
      other programs' load does not bend the ratio. mfu_datasheet divides by the GPU datasheet's
      bf16 dense peak instead (xsa.base.common.DATASHEET_BF16_PEAKS, e.g. 989 TFLOP/s on H100 SXM and
      H200), the number nanochat reports; None on CPU. The measured peak is lower (about 790 TFLOP/s
      on an H200), so mfu > mfu_datasheet.

    python -m xsa.throughput --preset cpu-w64-d4 --steps 20 --threads 1     # CPU, on a shared machine
    python -m xsa.throughput --preset d12 --steps 20                    # GPU (compiled, bf16 autocast)

--set FIELD=VALUE sets a config field in both arms (e.g. cpu_compile=true, the compiled CPU path);
--vs FIELD=VALUE compares the baseline with itself plus that field instead of with XSA (e.g.
loss_chunk=512): the record's keys stay (the second arm under "xsa"), its "runs" name both arms.
Per-pair ratios t_b / t_a - 1 are summarised by their median and quartiles (paired_ratio_*).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from xsa.base.common import autodetect_device, datasheet_peak_flops, device_name, matmul_peak_flops, mfu, sync
from xsa.stack.config import ConfigError
from xsa.stack.model import GPT
from xsa.runs.plot import new_figure, save_figure
from xsa.stack.presets import PRESETS
from xsa.base.records import REPO_ROOT, atomic_write_json, check_own, provenance
from xsa.stack.spec import Arm, arm_record, parse_overrides
from xsa.stack.step import Schedules, Step

ARMS = ("baseline", "xsa")
BOOTSTRAP_RESAMPLES = 5000
BOOTSTRAP_SEED = 0


def peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux, bytes on macOS
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run with n torch CPU threads (None: leave as is), restoring the previous count after."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# -----------------------------------------------------------------------------
# The two arms


def copy_task_batch(gen: torch.Generator, batch: int, seq_len: int, vocab: int, device) -> tuple:
    """(x, y) of shape (batch, seq_len): a random half, then the same half again (y = x shifted).

    Tokens are drawn from a Zipf law (p_k ~ 1/(k+1)), like word frequencies, so a model first
    learns the unigram (loss falls from log(vocab) within a few steps) and then the copy.
    """
    zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float32)
    half = torch.multinomial(zipf, batch * ((seq_len + 2) // 2), replacement=True, generator=gen)
    half = half.view(batch, -1)
    seq = torch.cat([half, half], dim=1)[:, :seq_len + 1].to(device)
    return seq[:, :-1], seq[:, 1:]


class TimedArm:
    """One run's model with its training Step (xsa/stack/step.py), timed one update at a time."""

    def __init__(self, name: str, run, device: torch.device, seed: int):
        self.name, self.run, self.cfg, self.device = name, run, run.config(), device
        torch.manual_seed(seed)  # both arms start from the same weights
        with torch.device(device):
            self.model = GPT(self.cfg.model)
        self.model.init_weights()
        self.flops_per_token = self.model.estimate_flops()
        # a benchmark: the initial learning rates, momentum and weight decay, constant
        constant = Schedules(lambda it: 1.0, lambda it: self.cfg.muon_momentum, lambda it: 1.0)
        self.step_fn = Step(self.model, self.cfg, device, schedules=constant)
        self.times, self.cpu_times, self.losses, self.step_mem = [], [], [], []

    def step(self, it: int, micro_batches, timed: bool):
        """One optimizer update; records the loss, and time and memory when `timed`."""
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            mem0 = torch.cuda.memory_allocated(self.device)
        sync(self.device)
        t0, c0 = time.perf_counter(), time.process_time()
        loss = self.step_fn(it, micro_batches, len(micro_batches))
        sync(self.device)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        self.losses.append(loss.item())  # after the clock stops: .item() would sync early
        if timed:
            self.times.append(dt)
            self.cpu_times.append(dc)
            if cuda:
                self.step_mem.append(torch.cuda.max_memory_allocated(self.device) - mem0)


# -----------------------------------------------------------------------------
# Statistics


def overhead_stats(base: list[float], xsa: list[float]) -> dict:
    """Overhead ratio of paired step times with a bootstrap 95% CI over resampled pairs."""
    b, x = np.asarray(base), np.asarray(xsa)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    idx = rng.integers(0, len(b), size=(BOOTSTRAP_RESAMPLES, len(b)))
    boot = np.median(x[idx], axis=1) / np.median(b[idx], axis=1) - 1
    lo, hi = np.percentile(boot, [2.5, 97.5])
    q1, q3 = np.percentile(x / b - 1, [25, 75])
    return {
        "overhead_ratio": float(np.median(x) / np.median(b) - 1),
        "overhead_ci95": [float(lo), float(hi)],
        "paired_ratio_median": float(np.median(x / b) - 1),
        "paired_ratio_quartiles": [float(q1), float(q3)],
        "bootstrap": {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "unit": "pairs of rounds"},
    }


def arm_summary(arm: TimedArm, tokens_per_step: int, peak: float, sheet: float | None = None) -> dict:
    t = arm.times
    q1, _, q3 = statistics.quantiles(t, n=4) if len(t) >= 2 else (t[0], t[0], t[0])
    med = statistics.median(t)
    # MFU on the clock the peak was measured with (xsa.base.common.mfu): CPU time on CPU, wall time on GPUs
    busy = statistics.median(arm.cpu_times) if arm.device.type == "cpu" else med
    return {
        "step_time_median_s": med,
        "step_time_iqr_s": q3 - q1,
        "step_time_min_s": min(t),
        "step_time_max_s": max(t),
        "step_times_s": t,
        "step_cpu_times_s": arm.cpu_times if arm.device.type == "cpu" else None,
        "tok_per_s": tokens_per_step / med,
        "mfu": mfu(arm.flops_per_token, tokens_per_step, busy, peak),
        "mfu_datasheet": mfu(arm.flops_per_token, tokens_per_step, busy, sheet),
        "peak_step_mem_bytes": max(arm.step_mem) if arm.step_mem else None,
        "flops_per_token": arm.flops_per_token,
    }


# -----------------------------------------------------------------------------


def default_runs(preset: str, seed: int = 0, **overrides) -> tuple:
    """The study's two arms at `preset`: the baseline (no XSA layer) and XSA (alpha 1, every layer);
    `overrides` apply to both, so the fields that make the arms are not among them."""
    arm_fields = sorted(set(overrides) & {"xsa_alpha", "xsa_layers"})
    if arm_fields:
        raise ValueError(f"set: {arm_fields[0]} is what tells the two arms apart (the baseline has no XSA layer, "
                         "the XSA arm alpha 1 on every layer); to time another pair, compare with --vs")
    base = Arm.of(preset, **overrides)
    return base.run(seed), base.with_xsa().run(seed)


def vs_runs(preset: str, vs: dict, seed: int = 0, **overrides) -> tuple:
    """Two arms that differ in `vs` only: the baseline of `preset` (with `overrides`), and the same
    run with the fields of `vs` on top (e.g. loss_chunk=512: what the chunked loss costs or saves)."""
    base = Arm.of(preset, **overrides)
    other = base.with_(**vs)
    if other == base:
        raise ValueError(f"vs: {vs!r} leaves the baseline of {preset} as it is; nothing to compare")
    return base.run(seed), other.run(seed)


def _record(arms: dict, bench: dict, complete: bool) -> dict:
    """The result record of the rounds so far; `bench` holds what the benchmark fixed before them."""
    base, xsa = arms["baseline"], arms["xsa"]
    cfg, dev, peak, sheet = base.cfg, bench["device"], bench["peak"], bench["sheet"]
    B, T = cfg.device_batch_size, cfg.model.sequence_len
    summaries = {name: arm_summary(arm, bench["tokens_per_step"], peak, sheet) for name, arm in arms.items()}
    return {
        "preset": cfg.preset,
        "complete": complete,
        "runs": {name: arm.run.run_id for name, arm in arms.items()},
        "device": device_name(dev),
        "device_type": dev.type,
        "compiled": base.step_fn.precision.compile,
        "autocast": str(base.step_fn.precision.autocast).removeprefix("torch.") if base.step_fn.precision.autocast else None,
        "model": dataclasses.asdict(cfg.model),  # the baseline's; the xsa arm differs only in:
        "xsa_arm": {k: getattr(xsa.cfg.model, k) for k in ("xsa_alpha", "xsa_layers", "xsa_value")},
        # each arm in full: its name, its overrides and every attention field (variant and gate included)
        "arm_specs": {name: arm_record(arm.cfg) for name, arm in arms.items()},
        # each arm's fields where it differs from its preset (the run ids spell them out)
        "arm_overrides": {name: dict(arm.run.overrides) for name, arm in arms.items()},
        "device_batch_size": B,
        "seq_len": T,
        "grad_accum": bench["accum"],
        "tokens_per_step": bench["tokens_per_step"],
        "warmup_steps": bench["warmup"],
        "measured_steps": len(base.times),
        "train_steps_extra": bench["train_steps"],
        "order": "ABBA (baseline first on even rounds, xsa first on odd rounds)",
        "data": "synthetic copy task (Zipf-random half, then the same half), the same batch for both arms",
        "lr": "initial lr of each param group, constant",
        "baseline_tok_per_s": summaries["baseline"]["tok_per_s"],
        "xsa_tok_per_s": summaries["xsa"]["tok_per_s"],
        "baseline_step_time_median_s": summaries["baseline"]["step_time_median_s"],
        "xsa_step_time_median_s": summaries["xsa"]["step_time_median_s"],
        **overhead_stats(base.times, xsa.times),
        **({f"cpu_time_{k}": v for k, v in overhead_stats(base.cpu_times, xsa.cpu_times).items()}
           if dev.type == "cpu" else {}),
        "threads": torch.get_num_threads(),
        "baseline_mfu": summaries["baseline"]["mfu"],
        "xsa_mfu": summaries["xsa"]["mfu"],
        "baseline_mfu_datasheet": summaries["baseline"]["mfu_datasheet"],
        "xsa_mfu_datasheet": summaries["xsa"]["mfu_datasheet"],
        "matmul_peak_flops": peak,
        "datasheet_peak_flops": sheet,
        "matmul_peak_dtype": bench["peak_dtype"],
        "mfu_clock": "process CPU time" if dev.type == "cpu" else "wall time",
        "peak_mem_bytes": (torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else peak_rss_bytes()),
        "peak_mem_kind": ("per arm: max over steps of CUDA max_memory_allocated within the step minus "
                          "allocated at its start; peak_mem_bytes: process total, both arms resident"
                          if dev.type == "cuda" else
                          "process peak RSS (both arms resident; no per-arm split on CPU)"),
        "arms": summaries,
        "loss_curves": {name: arm.losses for name, arm in arms.items()},
        "provenance": provenance(config_hash=cfg.config_hash(), seed=bench["seed"], device=device_name(dev),
                                 wall_time_s=round(time.time() - bench["t_start"], 3),
                                 extra={"xsa_config_hash": xsa.cfg.config_hash()}),
    }


def run_throughput(preset: str | None = None, runs: tuple | None = None, steps: int = 20, warmup: int = 5,
                   train_steps: int = 0, device: str | None = None, seed: int = 0, threads: int | None = None,
                   overrides: dict | None = None, out=None, progress: bool = True) -> dict:
    """Benchmark two runs (default: `default_runs(preset)`) step by step; returns the result record
    (see module docstring), and writes it to `out` as rounds arrive (every 10 measured rounds, then
    complete), so a benchmark stopped early still leaves what it measured."""
    if steps < 1 or warmup < 0 or train_steps < 0:
        raise ValueError(f"steps ({steps}) must be >= 1, warmup ({warmup}) and train_steps ({train_steps}) >= 0")
    t_start = time.time()
    with torch_threads(threads):
        dev = autodetect_device(device)
        runs = runs or default_runs(preset, seed, **(overrides or {}))
        arms = {name: TimedArm(name, run, dev, seed) for name, run in zip(ARMS, runs)}
        base = arms["baseline"]
        cfg = base.cfg
        B, T, V = cfg.device_batch_size, cfg.model.sequence_len, cfg.model.vocab_size
        accum = base.step_fn.cfg.total_batch_size // (B * T)
        tokens_per_step = accum * B * T
        peak, peak_dtype = matmul_peak_flops(dev)
        bench = dict(device=dev, peak=peak, peak_dtype=peak_dtype, sheet=datasheet_peak_flops(dev), accum=accum,
                     tokens_per_step=tokens_per_step, warmup=warmup, train_steps=train_steps, seed=seed,
                     t_start=t_start)
        gen = torch.Generator().manual_seed(seed)
        rounds = warmup + steps + train_steps
        for r in tqdm(range(rounds), desc=f"throughput {cfg.preset}", disable=not progress):
            micro = [copy_task_batch(gen, B, T, V, dev) for _ in range(accum)]  # the same batch for both arms
            order = ARMS if r % 2 == 0 else ARMS[::-1]  # ABBA
            timed = warmup <= r < warmup + steps
            for name in order:
                arms[name].step(r, micro, timed)
            if out is not None and timed and (r - warmup + 1) % 10 == 0 and r + 1 < warmup + steps:
                atomic_write_json(out, _record(arms, bench, complete=False))
        result = _record(arms, bench, complete=True)
        if out is not None:
            atomic_write_json(out, result)
        return result


def _pct(result: dict, key: str) -> str:
    lo, hi = result[f"{key}_ci95"]
    return f"{100 * result[f'{key}_ratio']:+.2f}% [{100 * lo:+.2f}, {100 * hi:+.2f}]"


def plot_throughput(result: dict, out_dir, name: str):
    """Step times of both arms by round (left: drift shows, pairs line up) and their loss curves (right)."""
    fig, axes = new_figure(ncols=2, figsize=(9, 3.2))
    ax_t, ax_l = axes[0]
    for i, arm in enumerate(ARMS):
        times, cpu = result["arms"][arm]["step_times_s"], result["arms"][arm].get("step_cpu_times_s")
        ax_t.plot(range(len(times)), times, marker="o", ms=3, color=f"C{i}",
                  label=f"{arm} wall (median {statistics.median(times):.3g} s)")
        if cpu:  # on CPU: the process's own CPU time, immune to other programs' load
            ax_t.plot(range(len(cpu)), cpu, ls="--", color=f"C{i}",
                      label=f"{arm} CPU time (median {statistics.median(cpu):.3g} s)")
        ax_l.plot(range(1, len(result["loss_curves"][arm]) + 1), result["loss_curves"][arm], color=f"C{i}", label=arm)
    title = [f"{result['preset']}: XSA overhead, wall {_pct(result, 'overhead')}"]
    if "cpu_time_overhead_ratio" in result:
        title.append(f"CPU time {_pct(result, 'cpu_time_overhead')}")
    ax_t.set_title("; ".join(title), fontsize=9)
    ax_t.set(xlabel="measured round", ylabel="step time (s)")
    ax_l.set_title("training loss, synthetic copy task", fontsize=9)
    ax_l.set_xlabel("step")
    for ax in (ax_t, ax_l):
        ax.legend(fontsize=8)
    return save_figure(fig, out_dir, name)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m xsa.throughput", description=(
        "Step time, tokens/s, peak memory and MFU of the study's baseline (no XSA layer) and XSA arm "
        "(alpha=1, every layer), alternated in one process, with the XSA overhead ratio and a bootstrap "
        "95%% CI. Results are written as they arrive."))
    p.add_argument("--preset", required=True, help=f"a preset of xsa/stack/presets.py ({', '.join(PRESETS)})")
    p.add_argument("--steps", type=int, default=20, help="measured steps per arm after warm-up (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="discarded warm-up steps per arm (default 5)")
    p.add_argument("--train-steps", type=int, default=0,
                   help="extra untimed training steps of both arms, to extend the recorded loss curves")
    p.add_argument("--out", default=None, help="output JSON (default results/throughput/PRESET.json)")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: autodetect)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device-batch-size", type=int, default=None, help="override the preset's device batch")
    p.add_argument("--total-batch-size", type=int, default=None,
                   help="override the preset's tokens per step (fewer accumulation micro-batches)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a config field of both arms, e.g. cpu_compile=true (repeatable)")
    p.add_argument("--vs", action="append", default=[], metavar="FIELD=VALUE",
                   help="compare the baseline with itself plus these fields (e.g. loss_chunk=512) instead of "
                        "with XSA; the record keeps its keys (the second arm under 'xsa', see 'runs')")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    args = p.parse_args(argv)
    try:
        sets, vs = parse_overrides(args.set, "--set"), parse_overrides(args.vs, "--vs")
    except ValueError as e:
        p.error(str(e))
    if args.preset not in PRESETS:
        p.error(f"--preset: unknown preset {args.preset!r} (choose from {', '.join(PRESETS)})")
    for name in ("steps", "device_batch_size", "total_batch_size", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.threads is not None and args.threads > (os.cpu_count() or 1):
        p.error(f"--threads {args.threads}: more than the {os.cpu_count()} cores of this machine")
    for name in ("warmup", "train_steps"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.steps < 20:
        print(f"note: --steps {args.steps} < 20; fine for a dry run, too few for a reported number")
    out = Path(args.out) if args.out else REPO_ROOT / "results" / "throughput" / f"{args.preset}.json"
    if out.exists() and not args.overwrite:
        p.error(f"--out: {out} exists (pass --overwrite to replace it)")
    if out.is_dir() or not _writable(out.parent):
        p.error(f"--out: cannot write {out}")
    try:  # never over a run folder's record or a record of another kind, --overwrite or not
        check_own(out, "throughput")
    except ValueError as e:
        p.error(f"--{e}")
    overrides = {**sets, **{k: getattr(args, k) for k in ("device_batch_size", "total_batch_size") if getattr(args, k)}}
    try:
        runs = vs_runs(args.preset, vs, args.seed, **overrides) if vs else None
        result = run_throughput(args.preset, runs=runs, steps=args.steps, warmup=args.warmup,
                                train_steps=args.train_steps, device=args.device, seed=args.seed,
                                threads=args.threads, overrides=overrides, out=out)
    except (ConfigError, ValueError) as e:
        p.error(str(e))
    lo, hi = result["overhead_ci95"]
    a, b = result["runs"]["baseline"], result["runs"]["xsa"]
    print(f"{args.preset} on {result['device']}: {a} {result['baseline_tok_per_s']:,.0f} tok/s, "
          f"{b} {result['xsa_tok_per_s']:,.0f} tok/s, overhead {100 * result['overhead_ratio']:+.2f}% "
          f"(95% CI {100 * lo:+.2f}% .. {100 * hi:+.2f}%), MFU {100 * result['baseline_mfu']:.1f}% of the measured peak"
          + (f", {100 * result['baseline_mfu_datasheet']:.1f}% of the datasheet's"
             if result["baseline_mfu_datasheet"] is not None else ""))
    print(f"wrote {out}")


def _writable(folder: Path) -> bool:
    """Whether files can be created in `folder` (made if missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


if __name__ == "__main__":
    main()
