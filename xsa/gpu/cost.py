"""
What a run costs on one node of eight H100 GPUs, estimated before any GPU has run this code: the
run's training FLOPs (the model's `estimate_flops` per token times its tokens) and its in-training
evaluations (val bpb on eval_tokens at step 0, every eval_every steps and the last, a forward pass at
a third of a training token's FLOPs) at 30-40% of the datasheet's bf16 peak (nanochat reports 41-42%
MFU at d12), plus compilation; the node at a typical rental price. The paper's cost of the d12 test
reads these, so the README's table and the paper say the same; a measured GPU run replaces them.

    fast, slow = run_hours(cfg)          # wall hours of one training run on the node
    fast, slow = test_hours(cfg, pairs)  # `pairs` paired runs of cfg, and the data build before them
    untimed(study)                       # the evaluations after training it schedules (none timed here)
"""

from __future__ import annotations

import torch

from xsa.base.common import DATASHEET_BF16_PEAKS
from xsa.stack.model import GPT

GPUS = 8
PEAK = dict(DATASHEET_BF16_PEAKS)["H100"]  # SXM, per GPU
MFU = (0.30, 0.40)  # below nanochat's reported 41-42%: our stack has not been tuned on a GPU
STARTUP_H = (0.04, 0.05)  # compilation and start-up, 2.5-3 minutes a run
DATA_H = (0.3, 1.0)  # the d12-sized data build: download speed and the node's CPUs, not measured
NODE_USD_PER_HOUR = 24.0


def run_flops(cfg) -> float:
    """Training FLOPs of a run of cfg (forward + backward over its tokens); the model is built on
    the meta device, so nothing is allocated."""
    with torch.device("meta"):
        model = GPT(cfg.model)
    return model.estimate_flops() * cfg.num_tokens


def evaluations(cfg) -> int:
    """The val-bpb evaluations a run of cfg makes (xsa/train.py): step 0, every eval_every steps, and
    the last step where it is not one of those."""
    return 1 + cfg.num_iterations // cfg.eval_every + (cfg.num_iterations % cfg.eval_every > 0)


def eval_share(cfg) -> float:
    """The in-training evaluations' FLOPs as a share of the training's: their tokens, forward only (a
    third of a training token's FLOPs), over the training tokens (about 12% at d12's recipe)."""
    return evaluations(cfg) * cfg.eval_tokens / (3 * cfg.num_tokens)


def run_hours(cfg, gpus: int = GPUS) -> tuple[float, float]:
    """Wall hours of one run of cfg on `gpus` H100s, its evaluations included: (at the top of the MFU
    range, at its bottom)."""
    flops = run_flops(cfg) * (1 + eval_share(cfg))
    return tuple(flops / (gpus * PEAK * mfu) / 3600 + start for mfu, start in zip(reversed(MFU), STARTUP_H))


def test_hours(cfg, pairs: int, gpus: int = GPUS) -> tuple[float, float]:
    """Wall hours of `pairs` pairs of runs of cfg (a baseline and an XSA run each; XSA's overhead is
    a few percent and left out), after the data build."""
    return tuple(data + 2 * pairs * run for data, run in zip(DATA_H, run_hours(cfg, gpus)))


def untimed(study) -> list[str]:
    """The evaluations after training that `study` schedules and this estimate does not time: CORE on
    the arms it scores, SFT and ChatCORE on its chat arms. A cost printed for a study must have none."""
    arms = {r.arm.name: r.arm for r in study.runs}.values()
    return [*(["CORE"] if any(map(study.scores, arms)) else []), *(["SFT", "ChatCORE"] if study.chat_arms else [])]
