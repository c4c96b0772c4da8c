"""
The KV cache of autoregressive decoding: every layer's keys and values so far, the last token's
embedding (for the smear), and the mask a chunk of new queries reads, with left padding where prompts
of unequal length decode as one batch. xsa/stack/attention.py's attention writes and reads it.
"""

from __future__ import annotations

import torch


class KVCache:
    """Keys and values of every layer for autoregressive decoding (batch B, up to max_len tokens),
    and the last token's embedding for the smear."""

    def __init__(self, n_layer: int, batch_size: int, n_kv_head: int, head_dim: int, max_len: int,
                 device=None, dtype=torch.float32, pad: torch.Tensor | None = None):
        shape = (n_layer, batch_size, n_kv_head, max_len, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.pos = 0  # tokens already in the cache
        self.max_len = max_len
        self.prev_embedding = None  # (B, 1, C): the normalised embedding of the last token seen
        # (B,) padding tokens before each row's prompt, when prompts of unequal length decode as
        # one batch (aligned at their ends); None: no padding
        self.pad = pad
        self._mask = None  # ((pos, T), mask): every layer of one forward reads the same mask

    def mask(self, T: int, device) -> torch.Tensor | None:
        """Which keys so far each of T new queries attends to, or None where it is every key."""
        if self._mask is None or self._mask[0] != (self.pos, T):
            self._mask = ((self.pos, T), self._build_mask(T, device))
        return self._mask[1]

    def _build_mask(self, T: int, device) -> torch.Tensor | None:
        Tk = self.pos + T
        if self.pad is None:  # causal within the chunk; one new token sees all
            return None if T == 1 else torch.ones(T, Tk, dtype=torch.bool, device=device).tril(diagonal=Tk - T)
        cols = torch.arange(Tk, device=device)
        query = cols[Tk - T:, None]
        real = cols[None, None, :] >= self.pad[:, None, None]  # (B, 1, Tk): no row sees another's padding
        # a padding query sees itself alone: with no key at all its output would be NaN, and a NaN
        # value spreads to every query even at attention weight 0
        return ((cols[None, :] <= query) & real | (cols[None, :] == query))[:, None]  # (B, 1, T, Tk)

    def insert(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Store this chunk's k, v (B, Hkv, T, D) at the current position; return all keys/values so far."""
        t0, t1 = self.pos, self.pos + k.size(2)
        if t1 > self.max_len:
            raise ValueError(f"KV cache overflow: {t1} tokens > max_len {self.max_len}")
        self.k[layer, :, :, t0:t1] = k
        self.v[layer, :, :, t0:t1] = v
        return self.k[layer, :, :, :t1], self.v[layer, :, :, :t1]

    def advance(self, n: int):
        self.pos += n
