"""Token shards: the corpus tokenized once into flat binary files that the loader memory-maps.

Layout: DIR/shards/{split}_NNNN.bin, a flat array of token ids (uint16, or uint32 when the
vocabulary does not fit), every segment prefixed with <|bos|>. Long documents are cut into segments
of at most SEGMENT_CHARS at paragraph breaks: the loader starts rows only at <|bos|>, so the tail of
a document longer than a row would otherwise never be trained on.
DIR/manifest.json records the size and sha256 of every built file, to detect damage.
"""

from __future__ import annotations

import contextlib
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

import numpy as np

from xsa.base.records import atomic_write_text, sha256_file

SEGMENT_CHARS = 3000  # about 700-1000 tokens at 8k vocabulary: comparable to a training row
SHARD_TOKENS = 100_000_000  # tokens per shard file (200 MB as uint16)
MANIFEST = "manifest.json"


def token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def segments(text: str, limit: int = SEGMENT_CHARS) -> list[str]:
    """Cut text into pieces of at most ~limit characters, at paragraph breaks where possible."""
    if len(text) <= limit:
        return [text]
    out, cur = [], ""
    for para in text.split("\n\n"):
        while len(para) > limit:  # one over-long paragraph: cut at the last space before the limit
            cut = para.rfind(" ", limit // 2, limit)
            cut = cut if cut > 0 else limit
            if cur:
                out.append(cur)
                cur = ""
            out.append(para[:cut])
            para = para[cut:].lstrip()
        if cur and len(cur) + 2 + len(para) > limit:
            out.append(cur)
            cur = ""
        cur = f"{cur}\n\n{para}" if cur else para
    if cur:
        out.append(cur)
    return out


class ShardWriter:
    """Appends bos-prefixed token sequences to {split}_NNNN.bin files of about SHARD_TOKENS each."""

    def __init__(self, directory: Path, split: str, vocab_size: int, shard_tokens: int = SHARD_TOKENS):
        self.dir, self.split, self.shard_tokens = Path(directory), split, shard_tokens
        self.dtype = token_dtype(vocab_size)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.index, self.file, self.in_file, self.total = -1, None, 0, 0

    def write(self, ids: np.ndarray) -> None:
        if self.file is None or self.in_file >= self.shard_tokens:
            self._next_file()
        self.file.write(np.asarray(ids, dtype=self.dtype).tobytes())
        self.in_file += len(ids)
        self.total += len(ids)

    def _next_file(self):
        if self.file is not None:
            self.file.close()
        self.index += 1
        self.file = open(self.dir / f"{self.split}_{self.index:04d}.bin", "wb")
        self.in_file = 0

    def close(self):
        if self.file is not None:
            self.file.close()


def tokenize_split(docs: Iterable[tuple[str, str, int]], tokenizer, writer: ShardWriter,
                   batch: int | None = None, threads: int | None = None) -> dict[str, int]:
    """docs: (text, source, copies). Writes each segment `copies` times; returns tokens per source.

    Segments are encoded `batch` at a time by `threads` threads (default os.cpu_count(); tiktoken
    releases the GIL while it encodes), each thread taking a contiguous slice of the batch, while
    the main thread segments the next documents and writes the previous batch. Results are written
    in document order, so the files do not depend on `batch` or `threads`.
    """
    threads = max(1, int(threads or os.cpu_count() or 1))
    batch = max(1, int(batch or max(512, 256 * threads)))
    bos, dtype = tokenizer.bos_id, writer.dtype
    tokens: dict[str, int] = {}

    def encode(texts: list[str]) -> list[np.ndarray]:  # runs in a worker thread
        out = []
        for text in texts:
            ids = tokenizer.encode(text)
            arr = np.empty(len(ids) + 1, dtype)  # the bytes writer.write would make of int64 ids
            arr[0] = bos
            arr[1:] = ids
            out.append(arr)
        return out

    def submit(pool, pending) -> list[Future]:
        texts = [t for t, _, _ in pending]
        if pool is None:
            done = Future()
            done.set_result(encode(texts))
            return [done]
        size = -(-len(texts) // (4 * threads))  # a few slices per thread evens out long segments
        return [pool.submit(encode, texts[i:i + size]) for i in range(0, len(texts), size)]

    def write(pending, futures) -> None:
        arrays = (arr for f in futures for arr in f.result())
        for (_, source, copies), arr in zip(pending, arrays, strict=True):
            for _ in range(copies):
                writer.write(arr)
            tokens[source] = tokens.get(source, 0) + copies * len(arr)

    with ThreadPoolExecutor(threads) if threads > 1 else contextlib.nullcontext() as pool:
        in_flight, pending = None, []
        for text, source, copies in docs:
            for seg in segments(text):
                pending.append((seg, source, copies))
            if len(pending) >= batch:
                job = (pending, submit(pool, pending))  # encodes while the previous batch is written
                if in_flight is not None:
                    write(*in_flight)
                in_flight, pending = job, []
        if in_flight is not None:
            write(*in_flight)
        if pending:
            write(pending, submit(pool, pending))
    writer.close()
    return tokens


# -----------------------------------------------------------------------------
# manifest: size and sha256 of every file, checked before use


def write_manifest(root: Path, relpaths: list[str]) -> None:
    files = {p: {"bytes": (root / p).stat().st_size, "sha256": sha256_file(root / p)} for p in sorted(relpaths)}
    (root / MANIFEST).write_text(json.dumps({"files": files}, indent=1) + "\n")


def data_fingerprint(root: Path) -> str:
    """sha256 of a data folder's manifest, which lists the size and sha256 of every file a run reads
    (tokenizer, token shards): equal fingerprints, equal data."""
    return sha256_file(Path(root) / MANIFEST)


def read_manifest(root: Path) -> dict:
    path = Path(root) / MANIFEST
    try:
        return json.loads(path.read_text())["files"]
    except (OSError, ValueError, KeyError) as e:
        raise FileNotFoundError(f"data manifest {path} is missing or unreadable ({e}); rebuild with "
                                f"python -m xsa.data build --force --data-dir {root}") from None


VERIFIED = ".verified.json"  # the files whose sha256 matched, by (size, mtime): DIR/.verified.json


def check_files(root: Path, full: bool = True, prefix: str = "", cached: bool = True) -> None:
    """Raise, naming the file, if any manifest file under `prefix` is missing, truncated or corrupt.

    full: compare every file's sha256 with the manifest. cached: skip the hash of a file whose size
    and modification time are those it had when its hash last matched (DIR/.verified.json), so a
    start does not re-read tens of GB of shards (nanochat hashes nothing); `python -m xsa.data
    verify` hashes every file (cached=False)."""
    root = Path(root)
    seen = _read_verified(root) if cached else {}
    verified = dict(seen)
    for rel, meta in read_manifest(root).items():
        if not rel.startswith(prefix):
            continue
        path = root / rel
        hint = f"rebuild with: python -m xsa.data build --force --data-dir {root}"
        if not path.exists():
            raise FileNotFoundError(f"data file {path} is missing; {hint}")
        stat = path.stat()
        if stat.st_size != meta["bytes"]:
            raise ValueError(f"data file {path} is truncated or damaged: {stat.st_size} bytes, "
                             f"expected {meta['bytes']}; {hint}")
        key = [stat.st_size, stat.st_mtime_ns, meta["sha256"]]
        if full and seen.get(rel) != key:
            if sha256_file(path) != meta["sha256"]:
                raise ValueError(f"data file {path} is corrupt (sha256 mismatch); {hint}")
            verified[rel] = key
    if full and verified != seen:
        with contextlib.suppress(OSError):  # a read-only data folder only costs the hashes next time
            atomic_write_text(root / VERIFIED, json.dumps(verified, sort_keys=True) + "\n")


def _read_verified(root: Path) -> dict:
    try:
        table = json.loads((root / VERIFIED).read_text())
        return table if isinstance(table, dict) else {}
    except (OSError, ValueError):
        return {}


def shard_paths(root: Path, split: str) -> list[Path]:
    """The split's shard files as listed in the manifest (so a deleted shard is noticed)."""
    rels = sorted(r for r in read_manifest(root) if r.startswith(f"shards/{split}_"))
    if not rels:
        raise FileNotFoundError(f"no {split} shards listed in {Path(root) / MANIFEST}")
    return [Path(root) / r for r in rels]
