"""
Weights, gradients and optimizer state per rank, as the training code actually stores them: each
GPU preset's model is built on the meta device (shapes and dtypes, no memory), given a Step as a
bf16 GPU run would, one optimizer update is made with zero gradients, and the bytes of every tensor
the rank then holds are summed. Each rank of a torchrun job is simulated in turn with torch's fake
process group (collectives do nothing), so the owner-rank sharding of Muon's and AdamW's state is
the code's own. The most loaded rank is reported.

It checks xsa/memory.py's model against the code, and measures the code as it stood before the
embeddings were kept in bf16 and AdamW's state sharded, from a checkout of that commit:

    PYTHONPATH=. .venv/bin/python scripts/memory_measured.py [--world 8]          # this tree
    PYTHONPATH=<checkout> .venv/bin/python scripts/memory_measured.py           # another one
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from xsa.stack.model import GPT
from xsa.stack.optim import muon_update
from xsa.stack.presets import make_config
from xsa.stack.step import Step

GPU_PRESETS = ("d12", "d24", "d12-nanochat", "d24-nanochat")
META = torch.device("meta")


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))


def one_rank(preset: str) -> dict[str, int]:
    """Bytes held by this process's rank after one update of `preset` (the process group is set)."""
    cfg = make_config(preset, gpu_path=True)  # the CUDA path: bf16 autocast, the GPU presets' Muon
    with META:
        model = GPT(cfg.model)
    step = Step(model, cfg, META)
    for opt in step.optimizers:  # the compiled stacked update would trace meta tensors: run it eagerly
        if hasattr(opt, "_update"):
            opt._update = muon_update
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    grads = _nbytes(p.grad for p in params)  # every rank holds every gradient until the update
    step.set_schedules(0)
    for opt in step.optimizers:
        opt.step()
    state = {}
    for opt in step.optimizers:
        name = type(opt).__name__.lower()
        state[name] = sum(_nbytes(s.values()) for s in opt.state.values() if s)
        state[name] -= sum(_nbytes([s["step"]]) for s in opt.state.values() if "step" in s)  # 4-byte counters
    return dict(weights=_nbytes(params), grads=grads, **state)


def per_rank(preset: str, world: int) -> dict[str, int]:
    """The most loaded rank's bytes, each rank simulated with a fake process group."""
    ranks = []
    for rank in range(world):
        if world > 1:
            dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
        try:
            out = one_rank(preset)
        finally:
            if world > 1:
                dist.destroy_process_group()
        out["total"] = sum(out.values())
        ranks.append(out)
    return max(ranks, key=lambda r: r["total"])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=8, help="ranks (default 8)")
    args = p.parse_args(argv)
    if args.world < 1:
        p.error(f"--world must be a positive integer, got {args.world}")
    print(f"measured on the meta device, {args.world} rank(s), the most loaded rank, GB:\n")
    print("| preset | total | weights | grads | adamw | muon |\n|---|---|---|---|---|---|")
    for preset in GPU_PRESETS:
        r = per_rank(preset, args.world)
        print(f"| `{preset}` | " + " | ".join(f"{r.get(k, 0) / 1e9:.2f}"
                                             for k in ("total", "weights", "grads", "adamw", "muon")) + " |")


if __name__ == "__main__":
    main()
