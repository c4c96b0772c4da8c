"""ClimbMix-400B, the paper's pretraining data, as re-shuffled parquet shards by nanochat.

Each shard (shard_NNNNN.parquet, ~250M characters) has a `text` column, one document per row.
The last shard is the validation split (as nanochat does). Shards are read from a local folder
($XSA_CLIMBMIX_DIR, default cache_dir()/"climbmix") and downloaded there on demand, with retries
and a file lock so that several processes can share the folder.
"""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow.parquet as pq
from filelock import FileLock

from xsa.common import cache_dir

BASE_URL = "https://huggingface.co/datasets/karpathy/climbmix-400b-shuffle/resolve/main"
MAX_SHARD = 6542  # index of the last shard; it is held out for validation
DIR_ENV = "XSA_CLIMBMIX_DIR"
SHARDS_ENV = "XSA_CLIMBMIX_SHARDS"  # number of training shards to use (default 8, ~2B characters)
LICENCE = "see the nvidia/ClimbMix dataset card (upstream licence applies)"


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def local_dir() -> Path:
    return Path(os.environ.get(DIR_ENV, Path(cache_dir()) / "climbmix"))


def download_shard(index: int, folder: Path | None = None, base_url: str = BASE_URL,
                   retries: int = 5, backoff: float = 2.0) -> Path:
    """The local path of shard `index`, downloading it first if needed (atomic, locked, retried)."""
    folder = Path(folder or local_dir())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / shard_name(index)
    with FileLock(str(path) + ".lock"):
        if path.exists():
            return path
        url = f"{base_url}/{shard_name(index)}"
        tmp = path.with_suffix(f".part{os.getpid()}")
        for attempt in range(1, retries + 1):
            try:
                with urllib.request.urlopen(url, timeout=60) as r, open(tmp, "wb") as f:
                    while block := r.read(1 << 20):
                        f.write(block)
                pq.ParquetFile(tmp)  # a truncated download has no valid footer
                os.replace(tmp, path)
                return path
            except Exception as e:
                tmp.unlink(missing_ok=True)
                if attempt == retries:
                    raise RuntimeError(
                        f"could not download ClimbMix shard {url} after {retries} attempts ({e}); "
                        f"copy the shard files into a folder and set {DIR_ENV}=/that/folder") from e
                time.sleep(backoff * 2 ** (attempt - 1))
    return path


def shard_files(num_train: int | None = None, folder: Path | None = None) -> dict[str, list[Path]]:
    """{"train": [...], "val": [...]}: the first num_train shards and the last one.

    A folder that already holds shards is used as it is (its last file is the validation shard),
    so a machine without network can train on whatever was copied there.
    """
    folder = Path(folder or local_dir())
    present = sorted(folder.glob("shard_*.parquet"))
    if num_train is None and present:
        if len(present) < 2:
            raise FileNotFoundError(f"{folder} holds {len(present)} ClimbMix shard(s); need at least 2 (train + val)")
        return {"train": present[:-1], "val": present[-1:]}
    n = num_train or int(os.environ.get(SHARDS_ENV, 8))
    return {"train": [download_shard(i, folder) for i in range(n)], "val": [download_shard(MAX_SHARD, folder)]}


def iter_documents(paths: Iterable[Path], batch_rows: int = 1024) -> Iterator[str]:
    """The `text` of every row of the given parquet files, in file and row order."""
    for path in paths:
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:
            raise ValueError(f"ClimbMix shard {path} is not a readable parquet file ({e}); delete it to re-download") from e
        if "text" not in pf.schema_arrow.names:
            raise ValueError(f"ClimbMix shard {path} has no 'text' column (columns: {pf.schema_arrow.names})")
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["text"]):
            for text in batch.column(0).to_pylist():
                if text:
                    yield text
