"""
ChatCORE's generative decoding, one question at a time against a batch of them, in one process.

The same prompts (random token ids of varied length, as chat prompts vary) are answered greedily
by a randomly initialised model of a preset's shape, first each alone (a batch of one: a forward
and a host sync per token per question), then gen_batch at a time (xsa.evaluate.chat.greedy_batch:
left-padded, one forward per token per batch). The two are alternated A B B A so that drift in the
machine's load falls on both; the replies must agree (every token: same prompts, same model).
Reported: generated tokens per second of each, and their ratio.

    PYTHONPATH=. .venv/bin/python scripts/decode_speed.py [--preset d12] [--questions 16] [--tokens 32]

Stop tokens are left out so every reply runs its full length: the ratio is of decoding speed,
not of how soon a model stops. On a GPU the batch's step costs about what a single row's does, so
the ratio approaches gen_batch; on a CPU the work per step grows with the rows, so it is smaller.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from xsa.common import autodetect_device, device_name, sync
from xsa.evaluate.chat import greedy_batch
from xsa.model import build
from xsa.presets import make_config


def timed(fn, device):
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="d12")
    p.add_argument("--questions", type=int, default=16)
    p.add_argument("--tokens", type=int, default=32, help="tokens generated per question")
    p.add_argument("--gen-batch", type=int, default=16)
    p.add_argument("--device", default=None)
    args = p.parse_args(argv)
    device = autodetect_device(args.device)
    torch.manual_seed(0)
    model = build(make_config(args.preset).model, seed=0, device=device).eval()
    with torch.no_grad():  # a trained model's attention is not zero: perturb the zero projections
        for w in model.parameters():
            w.add_(0.02 * torch.randn_like(w))
    g = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    prompts = [torch.randint(0, vocab, (int(n),), generator=g).tolist()
               for n in torch.randint(40, 200, (args.questions,), generator=g)]

    def alone():
        return [r for q in prompts for r in greedy_batch(model, [q], args.tokens, stop=set())]

    def batched():
        return [r for i in range(0, len(prompts), args.gen_batch)
                for r in greedy_batch(model, prompts[i:i + args.gen_batch], args.tokens, stop=set())]

    greedy_batch(model, prompts[:2], 2, stop=set())  # warm-up
    times = {"alone": [], "batched": []}
    replies = {}
    for name in ("alone", "batched", "batched", "alone"):
        replies[name], dt = timed(alone if name == "alone" else batched, device)
        times[name].append(dt)
    tokens = args.questions * args.tokens
    rate = {k: tokens * len(v) / sum(v) for k, v in times.items()}
    print(json.dumps({"device": device_name(device), "preset": args.preset, "questions": args.questions,
                      "tokens_each": args.tokens, "gen_batch": args.gen_batch,
                      "replies_agree": replies["alone"] == replies["batched"],
                      "tokens_per_s_alone": round(rate["alone"], 1),
                      "tokens_per_s_batched": round(rate["batched"], 1),
                      "speedup": round(rate["batched"] / rate["alone"], 2)}, indent=1))


if __name__ == "__main__":
    main()
