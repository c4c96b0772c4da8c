"""
Downstream evaluation of a trained run.

  python -m xsa.evaluate core --run RUN_DIR [--bundle PATH] [--max-per-task N] [--out FILE]
  python -m xsa.evaluate chat --run RUN_DIR [--bundle PATH] [--max-per-task N] [--sft-steps N] [--out FILE]

`core` scores the base model on the 22 CORE tasks (key `core`, per-task `tasks`, `missing`).
`chat` fine-tunes the model on conversations (SFT, cached under RUN_DIR/sft/) and scores ChatCORE
on ARC-Easy, ARC-Challenge, MMLU, GSM8K and HumanEval (keys `chatcore`, `chat_tasks`, `sft_data`).
Both merge their keys into RUN_DIR/eval.json (or --out), keeping whatever else it holds.
The bundle is --bundle, else $XSA_EVAL_BUNDLE, else nanochat's eval_bundle.zip downloaded once.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from xsa.evaluate.run import evaluate_run_chat, evaluate_run_core
from xsa.base.runlock import RunFolderBusy


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m xsa.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in [("core", "CORE: 22 in-context tasks on the base model (key 'core')"),
                           ("chat", "ChatCORE: SFT, then ARC-E/C, MMLU, GSM8K, HumanEval (key 'chatcore')")]:
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.add_argument("--run", required=True, type=Path, help="run folder (config.json, ckpt/model.pt)")
        p.add_argument("--bundle", default=None,
                       help="eval bundle folder (default: $XSA_EVAL_BUNDLE, else download into the cache)")
        p.add_argument("--max-per-task", type=int, default=None,
                       help="score at most N items per task, chosen by a fixed shuffle (default: all)")
        p.add_argument("--out", type=Path, default=None, help="JSON to merge results into (default: RUN/eval.json)")
        p.add_argument("--device", default=None, help="cpu, cuda, mps (default: auto-detect)")
        if name == "core":
            p.add_argument("--batch-tokens", type=int, default=None,
                           help="tokens per forward batch (default: 4096 on a CPU, 16384 elsewhere)")
        else:
            p.add_argument("--sft-steps", type=int, default=300, help="SFT optimizer steps (the result is cached per run)")
            p.add_argument("--sft-data", choices=["auto", "registry", "nanochat"], default="auto",
                           help="registry: offline pinned package; nanochat: download its mixture; "
                                "auto: nanochat on CUDA, else registry")
    args = parser.parse_args(argv)
    if not (args.run / "config.json").is_file():
        parser.error(f"--run {args.run}: not a run folder (no config.json)")
    for name in ("max_per_task", "batch_tokens", "sft_steps"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    common = dict(bundle=args.bundle, max_per_task=args.max_per_task, out=args.out, device=args.device)
    try:
        if args.command == "core":
            update = evaluate_run_core(args.run, batch_tokens=args.batch_tokens, **common)
        else:
            update = evaluate_run_chat(args.run, sft_steps=args.sft_steps, sft_data=args.sft_data, **common)
    except (ValueError, FileNotFoundError, OSError, RunFolderBusy) as e:  # ConfigError, BundleError: ValueErrors
        parser.error(str(e))
    out = args.out or args.run / "eval.json"
    if args.command == "core":
        n = len(update["tasks"])
        done = "" if update["core_complete"] else f" (INCOMPLETE: {n} tasks scored, missing {', '.join(update['missing'])})"
        print(f"core = {update['core']:.4f}{done} -> {out}")
    else:
        print(f"chatcore = {update['chatcore']:.4f} -> {out}")


if __name__ == "__main__":
    main()
