"""
The language-model loss in row chunks: lm_head, softcap and cross-entropy without the (N, V) logits.

    loss = chunked_softcap_cross_entropy(h, weight, targets, softcap, chunk)

equals F.cross_entropy(softcap * tanh((h @ weight.T) / softcap), targets, ignore_index=-1) (the
mean over the rows whose target is not -1) to float rounding, but holds at most `chunk` rows of
logits at a time. Forward keeps, per row, only the log-sum-exp; backward recomputes each chunk's
logits from h and the weight (one more matmul of the head, as in "fused linear cross-entropy") and
turns them into that chunk's share of grad_h and grad_weight at once:

    dloss/du = (softmax(z) - onehot(target)) * (1 - tanh(u / c)^2) / n_valid,   z = c * tanh(u / c)

Opt-in (TrainConfig.loss_chunk > 0, passed by xsa.stack.step.Step); the model's default loss path, which
every committed run trained on, is untouched. Under autocast the matmuls run in the autocast dtype
in forward and backward alike (the recomputed logits are the forward's); the rest is fp32.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -1


def _matmul_dtype(h: torch.Tensor) -> torch.dtype:
    dev = h.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else h.dtype


def _softcapped(h: torch.Tensor, weight: torch.Tensor, softcap: float, dtype: torch.dtype):
    """-> (z, t): logits z = softcap * t, t = tanh(u / softcap), u = h @ weight.T, in fp32."""
    u = (h.to(dtype) @ weight.to(dtype).t()).float()
    t = torch.tanh(u / softcap)
    return softcap * t, t


class ChunkedSoftcapCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, targets, softcap: float, chunk: int):
        dtype = _matmul_dtype(h)
        n = h.size(0)
        lse = torch.empty(n, device=h.device, dtype=torch.float32)
        picked = torch.empty(n, device=h.device, dtype=torch.float32)
        valid = targets != IGNORE_INDEX
        safe = targets.clamp_min(0)
        with torch.autocast(h.device.type, enabled=False):
            for s in range(0, n, chunk):
                z, _ = _softcapped(h[s:s + chunk], weight, softcap, dtype)
                lse[s:s + chunk] = torch.logsumexp(z, dim=-1)
                picked[s:s + chunk] = z.gather(1, safe[s:s + chunk, None])[:, 0]
        count = valid.sum()
        loss = torch.where(valid, lse - picked, 0.0).sum() / count
        ctx.save_for_backward(h, weight, safe, valid, lse, count)
        ctx.softcap, ctx.chunk, ctx.dtype = softcap, chunk, dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        h, weight, safe, valid, lse, count = ctx.saved_tensors
        softcap, chunk, dtype = ctx.softcap, ctx.chunk, ctx.dtype
        scale = (grad_loss / count).float()
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros(weight.shape, device=weight.device, dtype=torch.float32)
        with torch.autocast(h.device.type, enabled=False):
            for s in range(0, h.size(0), chunk):
                hc = h[s:s + chunk]
                z, t = _softcapped(hc, weight, softcap, dtype)
                g = torch.exp(z - lse[s:s + chunk, None])  # softmax(z)
                g.scatter_add_(1, safe[s:s + chunk, None], torch.full_like(lse[s:s + chunk, None], -1.0))
                g = g * (1 - t * t) * torch.where(valid[s:s + chunk, None], scale, 0.0)
                gd = g.to(dtype)
                grad_h[s:s + chunk] = (gd @ weight.to(dtype)).to(h.dtype)
                grad_w += (gd.t() @ hc.to(dtype)).float()
        return grad_h, grad_w.to(weight.dtype), None, None, None


def chunked_softcap_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                  softcap: float, chunk: int) -> torch.Tensor:
    """Mean cross-entropy of softcap * tanh(h @ weight.T / softcap) against targets (-1: ignored),
    `chunk` rows of h (N, C) at a time; targets (N,)."""
    if chunk < 1:
        raise ValueError(f"loss_chunk must be a positive integer, got {chunk!r}")
    return ChunkedSoftcapCrossEntropy.apply(h, weight, targets, float(softcap), int(chunk))
