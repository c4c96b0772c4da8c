"""
Memory of a training run per rank, from parameter counts alone (no activations): weights,
gradients and optimizer state, as the code stores them (`after`) and as it stored them before the
embeddings were kept in bf16 and AdamW's state was sharded (`before`).

    python -m xsa.memory [--world 8]        # a table over the GPU presets

Stored per parameter, on each rank of `world`:
- before: fp32 weights and gradients of every parameter; both AdamW moments (fp32) of every AdamW
  parameter on every rank; Muon's momentum (fp32) and NorMuon's second moment on the owner rank of
  each matrix (about 1/world of them).
- after (xsa/stack/step.py Precision.store, xsa/stack/optim.py AdamW): the token and value embeddings' weights,
  gradients and AdamW moments in bf16; AdamW's state on the owner rank of each parameter
  (parameter j on rank j % world, so a rank holds whole tensors: the largest share is reported).
Activations come on top (they depend on the device batch; see the README's memory notes).
"""

from __future__ import annotations

import argparse

import torch

from xsa.stack.presets import make_config
from xsa.stack.model import GPT
from xsa.stack.optim import second_moment_shape

GPU_PRESETS = ("d12", "d24", "d12-nanochat", "d24-nanochat")
EMBEDDINGS = ("embedding", "value_embeds")  # the groups stored in bf16 under bf16 autocast


def _groups(preset: str) -> dict[str, list[torch.Size]]:
    with torch.device("meta"):  # shapes only: nothing is allocated
        model = GPT(make_config(preset).model)
    return {name: [p.shape for p in ps] for name, ps in model.param_groups().items()}


MAX_WORLD = 2**20  # ranks


def per_rank(preset: str, world: int, after: bool) -> dict[str, float]:
    """Bytes on the most loaded rank: weights, grads, adamw and muon state, and their total."""
    groups = _groups(preset)
    adam = [(name, s) for name, shapes in groups.items() if name != "matrix" for s in shapes]
    size = {name: (2 if after and name in EMBEDDINGS else 4) for name in groups}
    weights = sum(size[n] * s.numel() for n, shapes in groups.items() for s in shapes)
    moments = [2 * size[n] * s.numel() for n, s in adam]
    if after:  # parameter j on rank j % world: the rank with the largest share
        adamw = max(sum(moments[j] for j in range(r, len(moments), world)) for r in range(min(world, len(moments))))
    else:
        adamw = sum(moments)
    muon_each = [4 * (s.numel() + torch.Size(second_moment_shape(s)).numel()) for s in groups["matrix"]]
    # ranks past the number of tensors hold none: the most loaded is among the first (a huge world ends at once)
    muon = max(sum(muon_each[i] for i in range(r, len(muon_each), world)) for r in range(min(world, len(muon_each))))
    out = dict(weights=weights, grads=weights, adamw=adamw, muon=muon)
    out["total"] = sum(out.values())
    return out


def table(world: int) -> str:
    """A Markdown table: GB per rank before and after, per GPU preset."""
    lines = [f"| preset | params | before: GB per rank | after: GB per rank (weights, grads, AdamW, Muon) |",
             "|---|---|---|---|"]
    for preset in GPU_PRESETS:
        n = sum(s.numel() for shapes in _groups(preset).values() for s in shapes)
        b, a = per_rank(preset, world, False), per_rank(preset, world, True)
        parts = ", ".join(f"{a[k] / 1e9:.2f}" for k in ("weights", "grads", "adamw", "muon"))
        lines.append(f"| `{preset}` | {n / 1e6:,.0f} M | {b['total'] / 1e9:.1f} | {a['total'] / 1e9:.1f} ({parts}) |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m xsa.memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=8, help="ranks (default 8)")
    args = p.parse_args(argv)
    if not 1 <= args.world <= MAX_WORLD:  # beyond any job torchrun launches: a typo, not a question
        p.error(f"--world must be between 1 and {MAX_WORLD:,} ranks, got {args.world:,}")
    print(f"weights, gradients and optimizer state per rank on {args.world} rank(s), no activations:\n")
    print(table(args.world))


if __name__ == "__main__":
    main()
