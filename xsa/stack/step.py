"""
One training step, and the one precision policy, for every stage that trains: pre-training
(xsa/train.py), the throughput benchmark (xsa/throughput.py) and SFT (xsa/evaluate/sft.py).

    step = Step(model, cfg, device)               # optimizers, compiled forward, autocast, schedules
    loss = step(it, batches, n_micro)             # one optimizer update: a 0-d tensor, no host sync

A Step owns what an update needs: the optimizers (xsa.stack.optim), the forward it calls (compiled or
eager), the autocast context, and the schedules (learning rate, Muon momentum, weight decay) as
functions of the update index. `batches` yields the update's micro-batches; gradients accumulate
over them, and the optimizers average them over the ranks under torchrun.

Precision policy (`Precision.of`): on CUDA bf16 autocast and torch.compile, the embeddings stored in
bf16 (`Precision.store`); elsewhere fp32, because
bf16 matmuls are slow on CPUs, eager unless the config's cpu_compile asks for torch.compile (about
1.7x faster on this CPU), and the CUDA code path itself where the config's gpu_path asks for it.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from xsa.stack.config import TrainConfig
from xsa.stack.optim import build_optimizers

# -----------------------------------------------------------------------------
# Schedules, as functions of the index `it` of the update being made (0-based), as base_train

def lr_multiplier(it: int, cfg: TrainConfig) -> float:
    """Linear warm-up over warmup_steps, constant, then linear warm-down to final_lr_frac over the
    last warmdown_ratio of the run."""
    n = cfg.num_iterations
    warmup, warmdown = cfg.warmup_steps, round(cfg.warmdown_ratio * n)
    if it < warmup:
        return (it + 1) / warmup
    if it <= n - warmdown:
        return 1.0
    progress = (n - it) / warmdown
    return progress + (1 - progress) * cfg.final_lr_frac


def muon_momentum(it: int, cfg: TrainConfig) -> float:
    """From muon_momentum_start to muon_momentum over the warm-up steps; then, during the LR
    warm-down (once the warm-up is over), linearly to muon_momentum_final where it is set."""
    warmup = cfg.muon_momentum_warmup_steps
    if it < warmup:
        frac = it / warmup
        return (1 - frac) * cfg.muon_momentum_start + frac * cfg.muon_momentum
    warmdown = round(cfg.warmdown_ratio * cfg.num_iterations)
    start = cfg.num_iterations - warmdown
    if cfg.muon_momentum_final is not None and warmdown > 0 and it >= start:
        progress = (it - start) / warmdown
        return (1 - progress) * cfg.muon_momentum + progress * cfg.muon_momentum_final
    return cfg.muon_momentum


def weight_decay_multiplier(it: int, cfg: TrainConfig) -> float:
    """Of the scheduled weight decays (Muon's): cosine or linear decay to 0 over the run."""
    frac = it / cfg.num_iterations
    if cfg.weight_decay_schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * frac))
    return 1 - frac


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
        """bf16 autocast and torch.compile on CUDA, and wherever cfg.gpu_path asks for the CUDA code
        path (on a CPU: to test it); fp32 otherwise, compiled where cfg.cpu_compile asks (eager by
        default, as the committed CPU runs trained)."""
        if device.type == "cuda" or (cfg is not None and cfg.gpu_path):
            return cls(torch.bfloat16, True, device.type)
        return cls(None, bool(cfg is not None and cfg.cpu_compile), device.type)

    def context(self):
        """The autocast context of forward passes (training, evaluation, SFT)."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast)

    def compiled(self, model):
        return torch.compile(model, dynamic=False) if self.compile else model

    def store(self, model) -> None:
        """Under bf16 autocast, keep the token and value embeddings in bf16, as nanochat 92d63d4
        (GPT.init_weights casts them to its compute dtype): lookups need no fp32 master copy, and their
        weights, gradients and AdamW moments take half the memory (python -m xsa.memory). From the
        embedding on, the residual stream is then bf16, as nanochat's."""
        if self.autocast == torch.bfloat16:
            model.wte.to(torch.bfloat16)
            for ve in model.value_embeds.values():
                ve.to(torch.bfloat16)


# -----------------------------------------------------------------------------
# The step

class Step:
    """One optimizer update of `model` under `cfg`: micro-batches, autocast, schedules, optimizers.

    schedules: the lr, momentum and weight-decay schedules (default: pre-training's, from cfg); SFT
    and the benchmark pass their own. Under torchrun each rank accumulates its own micro-batches and
    the optimizers average the gradients (xsa/stack/optim.py), so there is no DDP wrapper.
    """

    def __init__(self, model, cfg: TrainConfig, device: torch.device, *, schedules: Schedules | None = None):
        self.model, self.cfg, self.device = model, cfg, device
        self.precision = Precision.of(device, cfg)
        self.precision.store(model)  # before the optimizers: their state follows the weights' dtype
        self.optimizers = build_optimizers(model, cfg)
        self.forward = self.precision.compiled(model)
        # the chunked loss where the config asks for it (xsa/stack/loss.py); the default call is unchanged
        self.loss_kwargs = {"loss_chunk": cfg.loss_chunk} if cfg.loss_chunk else {}
        self.schedules = schedules or Schedules.pretraining(cfg)
        self.lr = None  # the lr multiplier of the last update (for the log)

    def set_schedules(self, it: int) -> float:
        """Set every group's lr, scheduled weight decay and (Muon) momentum for update `it`; return
        the lr multiplier."""
        lrm = self.schedules.lr(it)
        mom, wdm = self.schedules.momentum(it), self.schedules.weight_decay(it)
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"] = group["initial_lr"] * lrm
                if group.get("decay_scheduled"):
                    group["weight_decay"] = group["initial_wd"] * wdm
                if "momentum" in group:
                    group["momentum"] = mom
        return lrm

    def __call__(self, it: int, batches: Iterable, n_micro: int) -> torch.Tensor:
        """Update `it` over the n_micro (x, y) micro-batches of `batches`; the mean loss, on device."""
        self.lr = self.set_schedules(it)
        loss_sum = torch.zeros((), device=self.device)
        for x, y in batches:
            with self.precision.context():
                loss = self.forward(x, y, **self.loss_kwargs)
            (loss / n_micro).backward()
            loss_sum += loss.detach()
        for opt in self.optimizers:
            opt.step()
        self.model.zero_grad(set_to_none=True)
        return loss_sum / n_micro
