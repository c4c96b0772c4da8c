"""
The optimizers' share of a d12 training step by kernel launches, counted on a CPU: the per-matrix
Muon update (the code before stacking) against the stacked one, beside the forward and backward.

A GPU step launches about one kernel per ATen operator it runs eagerly, and one per generated
kernel or library call (a matmul) of a compiled graph. Both are counted here on the CPU, on the d12
preset's layout (12 layers, 78 Muon matrices in 4 shapes) at a small width and a short context
(the counts depend on the layout, not on the sizes; --width and --context change them):

- eager: the ATen operators run (torch.profiler: each outermost operator once, those that only
  make a view or allocate not at all);
- compiled: inductor's generated kernels (profiled with cpp.enable_kernel_profile) plus the ATen
  operators called around and between them. Inductor fuses for a CPU, not for a GPU (triton), so
  this is a proxy for the GPU's count, not that count.

The step is the d12 preset's on 8 ranks: one micro-batch of forward and backward (32 rows of 2^19 /
8 = 65,536 tokens), then AdamW (fused on CUDA: counted as the fused call) and Muon. The counts are
for one process owning every Muon matrix. On 8 ranks a rank updates about 1/8 of them: the
per-matrix path then launches about 1/8 as many kernels, the stacked one about as many (a stack per
shape either way, each holding fewer matrices); the collectives come on top of both.

    PYTHONPATH=. .venv/bin/python scripts/optimizer_share.py [--compiled]

Time is not measured: on a GPU the quick check's `timing` part times the optimizers apart
(python -m xsa.gpu_check --quick).
"""

from __future__ import annotations

import argparse

import torch
import torch._inductor.config as inductor_config
from torch.profiler import ProfilerActivity, profile

from xsa.stack.model import GPT
from xsa.stack.optim import Muon, muon_update
from xsa.stack.presets import make_config
from xsa.stack.step import Step


# operators that only make a view or allocate, or the profiler's own: no kernel on a GPU
NO_KERNEL = {"aten::" + n for n in (
    "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "slice", "select", "squeeze",
    "unsqueeze", "unbind", "detach", "alias", "as_strided", "split", "chunk", "empty", "empty_strided",
    "empty_like", "resolve_conj", "resolve_neg", "result_type", "lift_fresh")}
CONVERSIONS = {"aten::to", "aten::contiguous", "aten::type_as"}  # a kernel only where they call a copy


def _outermost(e) -> bool:
    """An ATen operator not called by another one (a composite counts once, by what it runs)."""
    parent = e.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def launches(fn) -> dict[str, int]:
    """Kernel launches one call of fn() would make on a GPU (see the module docstring): the
    outermost ATen operators that compute, and inductor's generated kernels."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = prof.events()
    kernels = sum(1 for e in events if "cpp_fused" in e.name)
    ops = sum(1 for e in events if e.name.startswith("aten::") and e.name not in NO_KERNEL and _outermost(e)
              and not (e.name in CONVERSIONS and not e.cpu_children))
    return {"ops": ops, "kernels": kernels, "launches": ops + kernels}


def setup(compiled: bool, stacked: bool, width: int, context: int):
    """A d12-layout model with its training Step (bf16 path), the batch, and AdamW fused as on CUDA."""
    cfg = make_config("d12", gpu_path=True, muon_stacked=stacked, n_embd=width, n_head=width // 64,
                      n_kv_head=width // 64, sequence_len=context,
                      device_batch_size=2, total_batch_size=2 * context)
    torch.manual_seed(0)
    model = GPT(cfg.model)
    model.init_weights()
    step = Step(model, cfg, torch.device("cpu"))
    adamw, muon = step.optimizers
    for group in adamw.param_groups:  # as build_optimizers makes it on CUDA
        group.update(fused=True, foreach=False)
    if not compiled:
        step.forward = model
        muon._update = muon_update
    assert isinstance(muon, Muon) and muon.stacked == stacked
    x = torch.randint(0, cfg.model.vocab_size, (2, context))
    return step, model, (x, x)


def measure(compiled: bool, stacked: bool, width: int, context: int) -> dict[str, dict]:
    step, model, (x, y) = setup(compiled, stacked, width, context)
    adamw, muon = step.optimizers

    def fwd_bwd():
        with step.precision.context():
            loss = step.forward(x, y)
        loss.backward()

    for it in range(2):  # compile, and every optimizer state created: the steady state is counted
        step(it, [(x, y)], 1)
    out = {"forward+backward": launches(fwd_bwd)}
    out["adamw"] = launches(adamw.step)
    out["muon"] = launches(muon.step)
    model.zero_grad(set_to_none=True)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compiled", action="store_true",
                   help="the compiled path instead of the eager one (minutes of CPU compile)")
    p.add_argument("--width", type=int, default=128, help="model width, a multiple of 64 (default 128)")
    p.add_argument("--context", type=int, default=64, help="tokens a row (default 64)")
    args = p.parse_args(argv)
    if args.width < 64 or args.width % 64:
        p.error(f"--width must be a positive multiple of 64, got {args.width}")
    inductor_config.cpp.enable_kernel_profile = True
    print("| path | Muon | forward+backward | AdamW | Muon | optimizers' share of launches |")
    print("|---|---|---|---|---|---|")
    for stacked in (False, True):
        r = measure(args.compiled, stacked, args.width, args.context)
        opt = r["adamw"]["launches"] + r["muon"]["launches"]
        share = opt / (opt + r["forward+backward"]["launches"])
        print(f"| {'compiled' if args.compiled else 'eager'} | {'stacked' if stacked else 'per matrix'} | "
              + " | ".join(f"{r[k]['launches']:,} ({r[k]['kernels']} generated)" for k in
                           ("forward+backward", "adamw", "muon")) + f" | {share:.0%} |", flush=True)


if __name__ == "__main__":
    main()
