"""Data: the offline corpus (or ClimbMix), its tokenizer, token shards and a deterministic loader.

    from xsa.data import data_dir, ensure_data
    path = ensure_data("smoke")      # builds on first use, then checks the files against the manifest
"""

from __future__ import annotations

import os
from pathlib import Path

from xsa.base.common import cache_dir
from xsa.stack.config import DATA_SUBSETS
from xsa.data import build as builder  # the module: xsa.data.build stays the submodule
from xsa.data import climbmix
from xsa.data.shards import check_files

DATA_DIR_ENV = "XSA_DATA_DIR"


def data_dir(subset: str) -> Path:
    """Where `subset` is built: $XSA_DATA_DIR/subset, else cache_dir()/data/subset."""
    root = os.environ.get(DATA_DIR_ENV) or Path(cache_dir()) / "data"
    return Path(root).expanduser() / subset


_subset_dir = data_dir  # ensure_data's argument shadows the name


def ensure_data(subset: str, data_dir: str | os.PathLike | None = None, verify: bool = True,
                bundle: str | os.PathLike | None = None, tokens: float | None = None,
                repeat: bool | None = None) -> Path:
    """A complete data directory for `subset`, built if missing or half-built.

    verify=True checks every file's sha256 against the manifest (seconds for the offline corpus);
    damage raises an error naming the file rather than silently rebuilding over it. A folder that
    is not empty and not a data build is refused (xsa.data.build.DataDirError), never emptied.
    tokens: for ClimbMix, the tokens of documents the shards of a new build are sized for (a complete
    build with fewer is refused unless `repeat`: xsa.data.build.build).
    """
    path = Path(data_dir).expanduser() if data_dir is not None else _subset_dir(subset)
    if not (path / builder.COMPLETE).exists():
        builder.build(subset, path, bundle=Path(bundle) if bundle else None, tokens=tokens, repeat=repeat)
    elif tokens is not None and DATA_SUBSETS[subset]["corpus"] == "climbmix":  # big enough for the horizon?
        builder.check_enough_shards(path, climbmix.num_train_shards(tokens), repeat)
    check_files(path, full=verify)
    return path
