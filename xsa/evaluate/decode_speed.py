"""
ChatCORE's generative decoding one question at a time against a batch of them, in one process.

The same prompts (random token ids of varied length, as chat prompts vary) are answered greedily
by a model, first each alone (a batch of one: a forward and a host sync per token per question),
then gen_batch at a time (xsa.evaluate.chat.greedy_batch: left-padded, one forward per token per
batch). The two alternate A B B A, so that drift in the machine's load falls on both. Reported:
generated tokens per second of each, their ratio, and the share of questions whose replies agree
(all of them in fp32; under bf16 a near-tie may break the other way in a padded batch).

    python -m xsa.evaluate.decode_speed [--preset d12] [--questions 16] [--tokens 32]

The model is the preset's shape, randomly initialised (xsa.validation.random_model: its zero
projections perturbed, as a trained model's are not zero). Stop tokens are left out so every reply runs its full length: the
ratio is of decoding speed, not of how soon a model stops. The GPU quick check runs the same
comparison in bf16 (its `decode` part).
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import torch

from xsa.base.common import Timer, autodetect_device, device_name
from xsa.evaluate.chat import greedy_batch
from xsa.stack.presets import PRESETS, make_config
from xsa.stack.step import Precision
from xsa.validation import random_model


LONGEST = 200  # prompts are shorter than this many tokens


def random_prompts(n: int, vocab: int, shortest: int = 40, longest: int = LONGEST, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(t),), generator=g).tolist()
            for t in torch.randint(shortest, longest, (n,), generator=g)]


def compare(model, prompts: list[list[int]], tokens: int, gen_batch: int, timer: Timer) -> dict:
    """Tokens/s of decoding the prompts alone and gen_batch at a time (A B B A), and agreement."""
    def alone():
        return [r for q in prompts for r in greedy_batch(model, [q], tokens, stop=set())]

    def batched():
        return [r for i in range(0, len(prompts), gen_batch)
                for r in greedy_batch(model, prompts[i:i + gen_batch], tokens, stop=set())]

    greedy_batch(model, prompts[:2], 2, stop=set())  # warm-up
    seconds, replies = {"alone": 0.0, "batched": 0.0}, {}
    for name in ("alone", "batched", "batched", "alone"):
        t = timer.start()
        replies[name] = (alone if name == "alone" else batched)()
        seconds[name] += timer.stop(t)
    rate = {k: 2 * len(prompts) * tokens / s for k, s in seconds.items()}
    agree = sum(a == b for a, b in zip(replies["alone"], replies["batched"])) / len(prompts)
    return {"questions": len(prompts), "tokens_each": tokens, "gen_batch": gen_batch,
            "tokens_per_s_alone": round(rate["alone"], 1), "tokens_per_s_batched": round(rate["batched"], 1),
            "speedup": round(rate["batched"] / rate["alone"], 2), "replies_agree": agree}


def measure(preset: str, device, questions: int, tokens: int, gen_batch: int) -> dict:
    """compare() at a preset's shape, in the device's precision (bf16 autocast and bf16 embeddings
    on CUDA, as ChatCORE runs there; fp32 elsewhere)."""
    model = random_model(0, **dataclasses.asdict(make_config(preset).model)).to(device).eval()
    if LONGEST + tokens > model.rotary_len:  # the model decodes no position past its rotary tables
        raise ValueError(f"--tokens {tokens}: a prompt of up to {LONGEST} tokens and its reply exceed the {preset} "
                         f"model's rotary cache of {model.rotary_len} positions (at most {model.rotary_len - LONGEST})")
    precision = Precision.of(device)
    precision.store(model)
    prompts = random_prompts(questions, model.config.vocab_size)
    with precision.context():
        res = compare(model, prompts, tokens, gen_batch, Timer(device))
    return {"preset": preset, "autocast": str(precision.autocast).removeprefix("torch."), **res}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    p.add_argument("--preset", default="d12", help="the model's shape (default d12)")
    p.add_argument("--questions", type=int, default=16)
    p.add_argument("--tokens", type=int, default=32, help="tokens generated per question")
    p.add_argument("--gen-batch", type=int, default=16, help="questions decoded at once")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: detected)")
    args = p.parse_args(argv)
    for name in ("questions", "tokens", "gen_batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.preset not in PRESETS:
        p.error(f"--preset {args.preset!r}: not a preset (choose from {', '.join(PRESETS)})")
    try:
        device = autodetect_device(args.device)
    except ValueError as e:
        p.error(f"--device: {e}")
    try:
        res = measure(args.preset, device, args.questions, args.tokens, args.gen_batch)
    except ValueError as e:  # more tokens than the model can place
        p.error(str(e))
    print(json.dumps({"device": device_name(device), **res}, indent=1))


if __name__ == "__main__":
    main()
