"""Deterministic token batches from the memory-mapped shards.

Two ways to make rows (the config's row_packing). "bos" (the CPU presets): every row is seq_len+1
consecutive tokens starting at a <|bos|> (the start of a document segment), so no row begins
mid-document; rows overlap where documents are shorter than a row. "bestfit" (the GPU presets):
nanochat's BOS-aligned best-fit packing (xsa/data/packing.py), computed once from the seed: every row
starts with a <|bos|> and no token is read twice within an epoch. Rows are numbered globally: step s owns rows s*R .. s*R+R-1, and the
process (rank r, micro-step m) takes rows (m*world + r)*B .. +B-1. Global row g is start
perm_e[g mod n] of epoch e = g div n, where perm_e is a permutation of the n usable starts seeded by
(seed, e). A batch is therefore a pure function of (seed, step, micro, rank, world): two runs see
the same batches, ranks see disjoint rows, and resuming at step k needs no replay.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch

from xsa.stack.config import ROW_PACKINGS
from xsa.data.packing import best_fit, documents
from xsa.data.shards import read_manifest, shard_paths, token_dtype
from xsa.data.tokenizer import Tokenizer


class _Shards:
    """The memory-mapped shards of one split and the <|bos|> positions a row may start at."""

    def __init__(self, data_dir: Path, split: str, seq_len: int):
        data_dir = Path(data_dir)
        tok = Tokenizer.from_data_dir(data_dir)
        dtype = token_dtype(tok.vocab_size)
        manifest = read_manifest(data_dir)
        self.maps, self.bos, shard_of, starts = [], [], [], []
        for i, path in enumerate(shard_paths(data_dir, split)):
            expected = manifest[str(path.relative_to(data_dir))]["bytes"]
            if not path.exists() or path.stat().st_size != expected:
                got = path.stat().st_size if path.exists() else "missing"
                raise ValueError(f"shard {path} is missing or truncated ({got} bytes, expected {expected}); "
                                 f"rebuild with: python -m xsa.data build --force --data-dir {data_dir}")
            mm = np.memmap(path, dtype=dtype, mode="r")
            pos = np.flatnonzero(mm == tok.bos_id)
            self.bos.append(pos)
            pos = pos[pos + seq_len + 1 <= len(mm)]  # a row needs seq_len+1 tokens inside this shard
            self.maps.append(mm)
            starts.append(pos)
            shard_of.append(np.full(len(pos), i, np.int32))
        self.pos = np.concatenate(starts)
        self.shard_of = np.concatenate(shard_of)
        if len(self.pos) == 0:
            raise ValueError(f"the {split} shards of {data_dir} have no <|bos|> with {seq_len + 1} tokens after it")

    def rows(self, idx: np.ndarray, width: int) -> np.ndarray:
        """int64 (len(idx), width): the tokens at starts idx, gathered by fancy indexing per shard."""
        out = np.empty((len(idx), width), np.int64)
        offs = np.arange(width)
        shard, pos = self.shard_of[idx], self.pos[idx]
        for s in np.unique(shard):
            sel = shard == s
            out[sel] = self.maps[s][pos[sel, None] + offs]
        return out


class _Packed:
    """The best-fit rows of `width` tokens of the shards (packing.best_fit over every document in a
    seeded order): n rows, gathered segment by segment (no Python work per token)."""

    def __init__(self, shards: _Shards, width: int, seed: int):
        spans = [documents(bos, len(mm)) for bos, mm in zip(shards.bos, shards.maps)]
        self.maps = shards.maps
        self.start = np.concatenate([s for s, _ in spans])
        self.shard = np.concatenate([np.full(len(s), i, np.int32) for i, (s, _) in enumerate(spans)])
        lengths = np.concatenate([n for _, n in spans])
        order = np.random.Generator(np.random.PCG64([seed, PACKING_STREAM])).permutation(len(lengths))
        self.packing = best_fit(lengths, order, width)
        self.n = self.packing.n_rows
        if self.n == 0:
            raise ValueError(f"the shards hold fewer than {width} tokens of documents: no row can be packed")

    def rows(self, idx: np.ndarray, width: int) -> np.ndarray:
        out = np.empty((len(idx), width), np.int64)
        ptr, docs, lens = self.packing.row_ptr, self.packing.seg_doc, self.packing.seg_len
        for k, r in enumerate(idx):
            pos = 0
            for s in range(ptr[r], ptr[r + 1]):
                d, n = docs[s], lens[s]
                out[k, pos:pos + n] = self.maps[self.shard[d]][self.start[d]:self.start[d] + n]
                pos += n
        return out


PACKING_STREAM = 2**32 - 1  # the document order's stream beside the epochs' (seed, epoch) permutations


def _to_device(rows: np.ndarray, device) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.from_numpy(rows)
    device = torch.device(device)
    if device.type == "cuda":
        t = t.pin_memory().to(device, non_blocking=True)
    elif device.type != "cpu":
        t = t.to(device)
    return t[:, :-1], t[:, 1:]


class TokenLoader:
    def __init__(self, data_dir, split: str = "train", batch_size: int = 8, seq_len: int = 512,
                 rows_per_step: int | None = None, seed: int = 0, rank: int = 0, world_size: int = 1,
                 device="cpu", packing: str = "bos"):
        self.B, self.T, self.seed, self.rank, self.world = batch_size, seq_len, seed, rank, world_size
        self.R = rows_per_step if rows_per_step is not None else batch_size * world_size
        if self.R % (batch_size * world_size) != 0:
            raise ValueError(f"rows_per_step ({self.R}) must be a multiple of batch_size * world_size "
                             f"({batch_size} * {world_size})")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world_size {world_size}")
        self.micro_steps = self.R // (batch_size * world_size)
        if packing not in ROW_PACKINGS:
            raise ValueError(f"packing must be one of {ROW_PACKINGS}, got {packing!r}")
        self.device = device
        self.shards = _Shards(Path(data_dir), split, seq_len)
        # the rows an epoch permutes: the row starts ("bos") or the packed rows ("bestfit")
        self.source = self.shards if packing == "bos" else _Packed(self.shards, seq_len + 1, seed)
        self.n = len(self.shards.pos) if packing == "bos" else self.source.n
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) >= 2:  # a batch touches at most two consecutive epochs
                self._perms.pop(min(self._perms))
            self._perms[epoch] = np.random.Generator(np.random.PCG64([self.seed, epoch])).permutation(self.n)
        return self._perms[epoch]

    def row_ids(self, step: int, micro: int = 0) -> np.ndarray:
        """Global row numbers of (step, micro) on this rank."""
        if not 0 <= micro < self.micro_steps:
            raise ValueError(f"micro {micro} outside 0..{self.micro_steps - 1}")
        first = step * self.R + (micro * self.world + self.rank) * self.B
        return np.arange(first, first + self.B, dtype=np.int64)

    def get(self, step: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) int64 (B, T): x rows start with <|bos|>, y is x shifted left by one token."""
        g = self.row_ids(step, micro)
        epoch, within = g // self.n, g % self.n
        idx = np.empty(len(g), np.int64)
        for e in np.unique(epoch):
            sel = epoch == e
            idx[sel] = self._perm(int(e))[within[sel]]
        return _to_device(self.source.rows(idx, self.T + 1), self.device)

    def epochs(self, step: int) -> float:
        """How many passes over the rows (row starts or packed rows) the first `step` steps make."""
        return step * self.R / self.n


def val_batches(data_dir, batch_size: int, seq_len: int, max_tokens: int, device="cpu", rank: int = 0,
                world_size: int = 1):
    """The fixed validation stream: non-overlapping rows, each from the next <|bos|>, in file order.

    Yields max_tokens // (batch_size * seq_len) batches (fewer, with a warning, if the split is too
    small); the same for every run with the same arguments. Under torchrun each rank reads and moves
    to its device only its own batches, rank, rank + world_size, ... (the sums are all-reduced).
    """
    shards = _Shards(Path(data_dir), "val", seq_len)
    n_rows = (max_tokens // (batch_size * seq_len)) * batch_size
    chosen, last_shard, end = [], -1, -1
    for i in range(len(shards.pos)):  # one Python step per row start, not per token
        s, p = shards.shard_of[i], shards.pos[i]
        if s == last_shard and p < end:
            continue
        chosen.append(i)
        last_shard, end = s, p + seq_len + 1
        if len(chosen) == n_rows:
            break
    if len(chosen) < n_rows:
        warnings.warn(f"val split of {data_dir} holds {len(chosen)} rows of {seq_len} tokens; "
                      f"evaluating on {len(chosen) // batch_size * batch_size * seq_len} of {max_tokens} tokens")
    chosen = np.asarray(chosen, np.int64)
    for b in range(rank, len(chosen) // batch_size, world_size):
        yield _to_device(shards.rows(chosen[b * batch_size:(b + 1) * batch_size], seq_len + 1), device)
