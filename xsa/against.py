"""
The project's training step against nanochat's own, at the same shape, in one process.

    python -m xsa.against --nanochat ~/src/nanochat --preset cpu-w64-d4 [--pairs 20] [--eager]

nanochat's GPT and MuonAdamW are imported from a local checkout the user gives (nothing is
downloaded) and compiled as its scripts/base_train.py compiles them (built on the meta device,
init_weights, setup_optimizer, torch.compile(model, dynamic=False)); the project's step is
xsa.stack.step.Step at the preset with its own policy (compiled on CPU unless --eager). The two steps
alternate ABBA on one fixed batch after warm-up, each timed on the process's CPU time (wall time
on CUDA), and the record gives the per-pair ratio ours / nanochat's with its quartiles. The
baseline arm is measured (no XSA): the comparison is of the two stacks, not of XSA.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import statistics
import sys
import time
from pathlib import Path

import torch

from xsa.base.common import autodetect_device, clock, device_name, sync
from xsa.stack.model import GPT
from xsa.stack.presets import PRESETS, make_config
from xsa.base.records import REPO_ROOT, atomic_write_json, check_out, provenance
from xsa.stack.step import Step


def load_nanochat(path) -> object:
    """nanochat.gpt from a local checkout (its folder holds nanochat/gpt.py)."""
    path = Path(path).expanduser().resolve()
    if not (path / "nanochat" / "gpt.py").is_file():
        raise ValueError(f"nanochat: {path} holds no nanochat/gpt.py (give the folder of a nanochat checkout)")
    sys.path.insert(0, str(path))
    return importlib.import_module("nanochat.gpt")


def nanochat_step(gpt, cfg, device: torch.device):
    """One nanochat update at cfg's shape and learning rates, as base_train builds and compiles it."""
    c = cfg.model
    fields = {f.name for f in dataclasses.fields(gpt.GPTConfig)}
    shape = dict(sequence_len=c.sequence_len, vocab_size=c.vocab_size, n_layer=c.n_layer, n_head=c.n_head,
                 n_kv_head=c.n_kv_head, n_embd=c.n_embd, window_pattern="L")
    with torch.device("meta"):
        model = gpt.GPT(gpt.GPTConfig(**{k: v for k, v in shape.items() if k in fields}))
    model.to_empty(device=device)
    model.init_weights()
    opt = model.setup_optimizer(unembedding_lr=cfg.unembedding_lr, embedding_lr=cfg.embedding_lr,
                                matrix_lr=cfg.matrix_lr, weight_decay=cfg.weight_decay, scalar_lr=cfg.scalar_lr)
    forward = torch.compile(model, dynamic=False)

    def step(x, y):
        forward(x, y).backward()
        opt.step()
        model.zero_grad(set_to_none=True)
    return step


def project_step(cfg, device: torch.device):
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model)
    model.init_weights()
    step = Step(model.to(device), cfg, device)
    return lambda x, y: step(10, [(x, y)], 1)


def compare(preset: str, nanochat: str, pairs: int = 20, warmup: int = 3, eager: bool = False, device=None) -> dict:
    device = autodetect_device(device)
    cfg = make_config(preset, cpu_compile=not eager)
    gpt = load_nanochat(nanochat)
    gen = torch.Generator().manual_seed(0)
    B, T, V = cfg.device_batch_size, cfg.model.sequence_len, cfg.model.vocab_size
    x, y = (torch.randint(0, V, (B, T), generator=gen).to(device) for _ in range(2))
    steps = {"ours": project_step(cfg, device), "nanochat": nanochat_step(gpt, cfg, device)}
    compile_s = {}
    for name, fn in steps.items():  # compile and warm up, timed apart
        t0 = time.perf_counter()
        for _ in range(warmup):
            fn(x, y)
        sync(device)
        compile_s[name] = time.perf_counter() - t0
    times = {name: [] for name in steps}
    for i in range(pairs):
        for name in (("ours", "nanochat") if i % 2 == 0 else ("nanochat", "ours")):
            t0 = clock(device)
            steps[name](x, y)
            sync(device)
            times[name].append(clock(device) - t0)
    ratios = sorted(a / b for a, b in zip(times["ours"], times["nanochat"]))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {
        "preset": preset, "policy": "eager" if eager else "compiled", "pairs": pairs, "tokens_per_step": B * T,
        "ours_step_s": statistics.median(times["ours"]), "nanochat_step_s": statistics.median(times["nanochat"]),
        "ratio_median": q[1], "ratio_quartiles": [q[0], q[2]], "compile_and_warmup_s": compile_s,
        "clock": "process CPU time" if device.type == "cpu" else "wall time",
        "provenance": provenance(config_hash=cfg.config_hash(), seed=cfg.seed, device=device_name(device),
                                 extra={"nanochat": str(Path(nanochat).expanduser().resolve()),
                                        "num_threads": torch.get_num_threads()}),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xsa.against", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nanochat", required=True, help="a local checkout of nanochat (the folder holding nanochat/gpt.py)")
    p.add_argument("--preset", default="cpu-w64-d4", choices=list(PRESETS))
    p.add_argument("--pairs", type=int, default=20, help="ABBA pairs of timed steps (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps of each first (compile, caches)")
    p.add_argument("--eager", action="store_true", help="time the project's eager step instead of its compiled one")
    p.add_argument("--out", default=None, help="JSON record (default: results/throughput/against_nanochat_PRESET.json)")
    args = p.parse_args(argv)
    if args.pairs < 2 or args.warmup < 1:
        p.error("--pairs must be >= 2 and --warmup >= 1")
    try:
        out = check_out(args.out or REPO_ROOT / "results" / "throughput" / f"against_nanochat_{args.preset}.json")
        load_nanochat(args.nanochat)
        r = compare(args.preset, args.nanochat, args.pairs, args.warmup, args.eager)
    except ValueError as e:
        p.error(str(e))
    atomic_write_json(out, r)
    print(f"{args.preset} ({r['policy']}): ours {r['ours_step_s']:.3f} s/step, nanochat {r['nanochat_step_s']:.3f}; "
          f"ratio {r['ratio_median']:.2f} (quartiles {r['ratio_quartiles'][0]:.2f}-{r['ratio_quartiles'][1]:.2f}) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
