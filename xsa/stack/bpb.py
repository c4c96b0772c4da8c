"""
Bits per byte: a loss that does not depend on the tokenizer.

bpb = sum over target tokens of the loss in nats / (ln 2 * sum of the targets' UTF-8 byte lengths).
Special tokens (byte length 0, e.g. <|bos|>) and ignored targets (-1) count neither loss nor bytes,
so two tokenizers of different vocabulary sizes are compared on the same text.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


@torch.no_grad()
def evaluate_bpb(model, batches, token_bytes: torch.Tensor) -> float:
    """Bits per byte of `model` over an iterable of (x, y) batches.

    token_bytes: int tensor [vocab_size], the UTF-8 byte length of each token id (0 for specials).
    Under torch.distributed each rank passes its own share of the batches; sums are all-reduced.
    """
    was_training = model.training
    model.eval()
    device = token_bytes.device
    acc_dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
    total_nats = torch.zeros((), dtype=acc_dtype, device=device)
    total_bytes = torch.zeros((), dtype=torch.int64, device=device)
    for x, y in batches:
        loss = model(x, y, loss_reduction="none")  # (B, T) nats, 0 where y == -1
        nbytes = token_bytes[y.clamp_min(0)] * (y >= 0)
        total_nats += (loss.to(acc_dtype) * (nbytes > 0)).sum()
        total_bytes += nbytes.sum()
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(total_nats)
        dist.all_reduce(total_bytes)
    model.train(was_training)
    n_bytes = int(total_bytes.item())
    if n_bytes == 0:
        raise ValueError("evaluate_bpb: the batches contain no target bytes")
    return total_nats.item() / (math.log(2) * n_bytes)
