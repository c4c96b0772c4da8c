"""
One training step, and the one precision policy, for every stage that trains: pre-training
(xsa/train.py), the throughput benchmark (xsa/throughput.py) and SFT (xsa/evaluate/sft.py).

    step = Step(model, cfg, device)               # optimizers, compiled forward, autocast, schedules
    loss = step(it, batches)                      # one optimizer update: a 0-d tensor, no host sync

A Step owns what an update needs: the optimizers (xsa.optim), the forward it calls (compiled or
eager, wrapped in DDP under torchrun), the autocast context, and the schedules (learning rate,
Muon momentum, weight decay) as functions of the update index. `batches` yields the update's
micro-batches; gradients accumulate over them (DDP reduces on the last one only).

Precision policy (`Precision.of`): on CUDA bf16 autocast and torch.compile; elsewhere fp32 and
eager, because bf16 matmuls are slow on CPUs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from xsa.config import TrainConfig

MUON_MOMENTUM_START = 0.85


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


@dataclass(frozen=True)
class Schedules:
    """it -> lr multiplier, Muon momentum, weight-decay multiplier."""
    lr: Callable[[int], float]
    momentum: Callable[[int], float]
    weight_decay: Callable[[int], float]

    @classmethod
    def pretraining(cls, cfg: TrainConfig) -> "Schedules":
        return cls(lambda it: lr_multiplier(it, cfg), lambda it: muon_momentum(it, cfg),
                   lambda it: weight_decay_multiplier(it, cfg))


# -----------------------------------------------------------------------------
# Precision

@dataclass(frozen=True)
class Precision:
    """How a device runs the model: autocast dtype (None: the weights' fp32) and whether to compile."""
    autocast: torch.dtype | None
    compile: bool
    device_type: str

    @classmethod
    def of(cls, device: torch.device, cfg: TrainConfig | None = None) -> "Precision":
        if device.type == "cuda":
            return cls(torch.bfloat16, True, "cuda")
        return cls(None, False, device.type)

    def context(self):
        """The autocast context of forward passes (training, evaluation, SFT)."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast)

    def compiled(self, model):
        return torch.compile(model, dynamic=False) if self.compile else model


# -----------------------------------------------------------------------------
# The step

class Step:
    """One optimizer update of `model` under `cfg`: micro-batches, autocast, schedules, optimizers.

    schedules: the lr, momentum and weight-decay schedules (default: pre-training's, from cfg); SFT
    and the benchmark pass their own. ddp: wrap the compiled forward in DistributedDataParallel.
    """

    def __init__(self, model, cfg: TrainConfig, device: torch.device, *, world_size: int = 1,
                 ddp: bool = False, schedules: Schedules | None = None):
        from xsa.optim import build_optimizers
        self.model, self.cfg, self.device = model, cfg, device
        self.precision = Precision.of(device, cfg)
        self.optimizers = build_optimizers(model, cfg, world_size)
        self.forward = self.precision.compiled(model)  # compiled before DDP wraps it
        if ddp:
            from torch.nn.parallel import DistributedDataParallel as DDP
            self.train_model = DDP(self.forward, device_ids=[device.index] if device.type == "cuda" else None)
        else:
            self.train_model = self.forward
        self.ddp = ddp
        self.schedules = schedules or Schedules.pretraining(cfg)

    def set_schedules(self, it: int) -> float:
        """Set every group's lr, weight decay and (Muon) momentum for update `it`; return the lr multiplier."""
        lrm = self.schedules.lr(it)
        mom, wdm = self.schedules.momentum(it), self.schedules.weight_decay(it)
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"] = group["initial_lr"] * lrm
                group["weight_decay"] = group["initial_wd"] * wdm
                if "momentum" in group:
                    group["momentum"] = mom
        return lrm

    def __call__(self, it: int, batches: Iterable, n_micro: int) -> torch.Tensor:
        """Update `it` over the n_micro (x, y) micro-batches of `batches`; the mean loss, on device."""
        self.lr = self.set_schedules(it)
        loss_sum = torch.zeros((), device=self.device)
        for micro, (x, y) in enumerate(batches):
            last = micro == n_micro - 1
            sync = self.train_model.no_sync() if self.ddp and not last else contextlib.nullcontext()
            with sync:
                with self.precision.context():
                    loss = self.train_model(x, y)
                (loss / n_micro).backward()
            loss_sum += loss.detach()
        for opt in self.optimizers:
            opt.step()
        self.model.zero_grad(set_to_none=True)
        return loss_sum / n_micro
