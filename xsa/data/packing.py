"""BOS-aligned best-fit rows, as nanochat 92d63d4's pre-training loader packs them
(nanochat/dataloader.py, tokenizing_distributed_data_loader_with_state_bos_bestfit).

A document is a <|bos|> and the tokens up to the next one (or the end of its shard). Documents are
taken in a seeded order into a buffer of `buffer` documents; each row of `capacity` tokens is
filled by repeatedly placing the largest buffered document that fits whole in the space left, and
when none fits, the shortest buffered document cropped to the space left (its rest is dropped).
Every row starts with a <|bos|>, no row is padded, and no token is read twice within an epoch.

Unlike nanochat's streaming loader, the packing is computed once per run start from the seed (the
layout of the epoch: every row as segments of documents), so a batch stays a pure function of
(seed, step, micro-batch, rank) and a resume replays nothing. A sorted buffer makes each placement
a bisection instead of a scan of the buffer (the same choice; ties between equal lengths go to the
document that entered the buffer first).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

BUFFER = 1000  # documents in the buffer, as nanochat's buffer_size


def documents(bos_positions: np.ndarray, shard_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the documents of one shard from its <|bos|> positions (tokens before
    the first <|bos|> belong to no document)."""
    starts = np.asarray(bos_positions, np.int64)
    ends = np.append(starts[1:], shard_len)
    return starts, ends - starts


@dataclass(frozen=True)
class Packing:
    """Rows as segments: row r is segments row_ptr[r] .. row_ptr[r+1]-1, segment s the first
    seg_len[s] tokens of document seg_doc[s]."""
    row_ptr: np.ndarray
    seg_doc: np.ndarray
    seg_len: np.ndarray

    @property
    def n_rows(self) -> int:
        return len(self.row_ptr) - 1


def best_fit(lengths: np.ndarray, order: np.ndarray, capacity: int, buffer: int = BUFFER) -> Packing:
    """Pack the documents of `lengths`, taken in `order`, into whole rows of `capacity` tokens (a
    last row that cannot be filled is dropped)."""
    lengths = np.asarray(lengths, np.int64)
    feed = iter(order.tolist())
    buf: list[tuple[int, int, int]] = []  # (length, arrival, document), sorted
    arrival = 0

    def refill():
        nonlocal arrival
        while len(buf) < buffer:
            doc = next(feed, None)
            if doc is None:
                return
            bisect.insort(buf, (int(lengths[doc]), arrival, doc))
            arrival += 1

    row_ptr, seg_doc, seg_len = [0], [], []
    pos = 0
    refill()
    while buf:
        space = capacity - pos
        i = bisect.bisect_right(buf, (space, arrival, -1)) - 1  # the last of the largest lengths <= space
        if i >= 0:
            i = bisect.bisect_left(buf, (buf[i][0],))  # the first of them (nanochat's scan keeps the first)
        length, _, doc = buf.pop(max(i, 0))  # none fits: crop the shortest
        take = min(length, space)
        seg_doc.append(doc)
        seg_len.append(take)
        pos += take
        if pos == capacity:
            row_ptr.append(len(seg_doc))
            pos = 0
        refill()
    n = row_ptr[-1]  # segments of whole rows only
    return Packing(np.asarray(row_ptr, np.int64), np.asarray(seg_doc[:n], np.int64),
                   np.asarray(seg_len[:n], np.int32))
