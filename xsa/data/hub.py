"""
Parquet files from a web host (the ClimbMix shards, the SFT mixture of the Hugging Face hub).

One download rule for both: a file is fetched once, under a lock (several ranks or shards may ask
for it at once), into a temporary name that replaces the target only when its parquet footer
reads back (a truncated transfer never looks like a file), with retries and exponential backoff.
"""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path


class DownloadError(OSError, RuntimeError):
    """A file that could not be fetched: an OSError, as a missing file is, so every command reports
    it in one line naming the URL (a RuntimeError too, as it was first raised)."""


def download_parquet(url: str, path: Path, hint: str, retries: int = 5, backoff: float = 2.0) -> Path:
    """`path`, downloaded first from `url` if it is not there. After `retries` failed attempts a
    DownloadError names the URL, the last error and `hint` (how to supply the file offline)."""
    import pyarrow.parquet as pq  # lazy: optional dependency
    from filelock import FileLock  # lazy: optional dependency

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.exists():  # there already, or another process got it while we waited
            return path
        tmp = path.with_name(f"{path.name}.part{os.getpid()}")
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
                    raise DownloadError(f"could not download {url} after {retries} attempts ({e}); {hint}") from e
                time.sleep(backoff * 2 ** (attempt - 1))
    return path
