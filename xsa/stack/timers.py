"""
The training loop's bookkeeping (xsa/train.py): its running values, checkpointed so that a resumed run
continues its log and its totals (Loop); its clocks, which time training apart from evaluation,
checkpoints and warm-up (Timers); and the rates a log line reports from them (Throughput).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch

from xsa.base.common import clock, datasheet_peak_flops, mfu, peak_flops


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
    data_sha256: str | None = None  # the data's fingerprint (data_fingerprint): a resume on other data stops
    # the code the run started from (git_state at step 0, kept through every resume): provenance records it,
    # and the commit at the end beside it where the two differ
    git_commit: str | None = None
    git_dirty: bool | None = None

    @classmethod
    def from_dict(cls, d: dict) -> "Loop":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


class Timers:
    """The loop's clocks, all of them. The run's wall and CPU time (every process, added to the Loop
    at each checkpoint and at the end); and the steps since the last log line, timed on the wall clock
    and on `clock` (the device clock, CPU time on CPU: MFU's), each less the pauses (evaluation,
    checkpoints) measured on the same clock, since a loaded CPU gives out CPU time slower than wall
    time. The first log window of a process holds its warm-up (compilation, allocation), so it is
    logged but not added to the run's timed training."""

    def __init__(self, device):
        self.device = device
        self.run_wall, self.run_cpu = time.time(), time.process_time()
        self.warm_up = True  # the next log window holds the process's first update
        self.start_log()

    def start_log(self) -> None:
        self.log_wall, self.log_clock = time.perf_counter(), clock(self.device)
        self.paused_wall = self.paused_clock = 0.0
        self.steps = 0  # updates since the last log line

    def close_log(self, loop: Loop, batch_tokens: int) -> tuple[float, float, int]:
        """(wall seconds, device-clock seconds, tokens) of the updates since the last log line, added
        to the loop's timed training unless the window holds the warm-up; the next window starts."""
        (wall, device_clock), tokens = self.since_log(), self.steps * batch_tokens
        if not self.warm_up:
            loop.train_time_s, loop.train_clock_s = loop.train_time_s + wall, loop.train_clock_s + device_clock
            loop.timed_tokens += tokens
        self.warm_up = False
        self.start_log()
        return wall, device_clock, tokens

    def since_log(self) -> tuple[float, float]:
        """(wall seconds, device-clock seconds) of training since the last log line."""
        return (time.perf_counter() - self.log_wall - self.paused_wall,
                clock(self.device) - self.log_clock - self.paused_clock)

    @contextlib.contextmanager
    def paused(self):
        """Time inside is not training time."""
        wall, device_clock = time.perf_counter(), clock(self.device)
        try:
            yield
        finally:
            self.paused_wall += time.perf_counter() - wall
            self.paused_clock += clock(self.device) - device_clock

    def add_run_time(self, loop: Loop) -> None:
        """Add the wall and CPU time since the last call to the loop's totals."""
        now_wall, now_cpu = time.time(), time.process_time()
        loop.wall_time_s += now_wall - self.run_wall
        loop.cpu_time_s += now_cpu - self.run_cpu
        self.run_wall, self.run_cpu = now_wall, now_cpu


@dataclass(frozen=True)
class Throughput:
    """What the loop's rates are measured against: the model's FLOPs per token, this device's measured
    matmul peak and its datasheet's bf16 peak (nanochat's MFU; None off GPUs), over `world` ranks."""
    flops_per_token: float
    peak: float | None
    sheet: float | None
    world: int

    @classmethod
    def of(cls, model, device: torch.device, world: int) -> "Throughput":
        return cls(model.estimate_flops(), peak_flops(device), datasheet_peak_flops(device), world)

    def rates(self, tokens: int, wall: float, device_clock: float) -> dict:
        """A log line's tok_per_s (on the wall clock), mfu and mfu_datasheet (on the device clock)."""
        return dict(tok_per_s=tokens / wall, mfu=mfu(self.flops_per_token, tokens, device_clock, self.peak, self.world),
                    mfu_datasheet=mfu(self.flops_per_token, tokens, device_clock, self.sheet, self.world))

    def run_mfu(self, loop: Loop) -> float | None:
        """The MFU of the run's timed training (the summary's)."""
        return mfu(self.flops_per_token, loop.timed_tokens, loop.train_clock_s, self.peak, self.world)
