"""ClimbMix-400B, the paper's pretraining data, as re-shuffled parquet shards by nanochat.

Each shard (shard_NNNNN.parquet, ~250M characters) has a `text` column, one document per row.
The last shard is the validation split (as nanochat does). Shards are read from a local folder
($XSA_CLIMBMIX_DIR, default cache_dir()/"climbmix") and downloaded there on demand, with retries
and a file lock so that several processes can share the folder.

How many training shards a build takes: num_train_shards (python -m xsa.data build --tokens N or
--preset NAME, else $XSA_CLIMBMIX_SHARDS, else $XSA_CLIMBMIX_TOKENS, else the shards already in the
folder, else DEFAULT_SHARDS), sized from a token horizon by shards_for_tokens.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterable, Iterator

from xsa.base.common import cache_dir
from xsa.stack.config import DATA_SUBSETS, RECIPES
from xsa.data.hub import download_parquet
from xsa.stack.presets import make_config

BASE_URL = "https://huggingface.co/datasets/karpathy/climbmix-400b-shuffle/resolve/main"
MAX_SHARD = 6542  # index of the last shard; it is held out for validation
DIR_ENV = "XSA_CLIMBMIX_DIR"
SHARDS_ENV = "XSA_CLIMBMIX_SHARDS"  # number of training shards to use (default 8, ~2B characters)
TOKENS_ENV = "XSA_CLIMBMIX_TOKENS"  # or: size the training shards for this many training tokens
DEFAULT_SHARDS = 8  # ~2B characters, ~0.4B tokens: several passes at d12 (1.3B) and d24 (4.0B); size with --tokens
LICENCE = "see the nvidia/ClimbMix dataset card (upstream licence applies)"

# Sizing the training shards from a token horizon (shards_for_tokens). Stated, not measured here:
# - CHARS_PER_SHARD: ~250M characters per shard, nanochat's figure for this re-shuffle (6,543
#   shards of ~400B tokens of the upstream tokenizer, ~61M tokens each).
# - CHARS_PER_TOKEN: nanochat's BPE at 32,768 tokens reaches about 4.2-4.8 characters per token on
#   ClimbMix. The top of that range is assumed: the more characters a token holds, the fewer tokens
#   a shard gives, so the upper figure errs towards downloading enough (a build with fewer tokens
#   than the horizon would make the run repeat data, the thing this sizing is meant to avoid).
# - SHARD_MARGIN: 10% more, for documents removed by decontamination, shard-to-shard variation
#   in size and a tokenizer (trained on these shards) that compresses a little better than assumed.
CHARS_PER_SHARD = 250_000_000
CHARS_PER_TOKEN = 4.8
SHARD_MARGIN = 1.10


def shards_for_tokens(tokens: float, chars_per_token: float | None = None, chars_per_shard: float | None = None,
                      margin: float | None = None, available: int | None = None) -> int:
    """Training shards holding `tokens` tokens: ceil(tokens x chars_per_token x margin /
    chars_per_shard), at least 1 and at most `available` (default MAX_SHARD: shards 0..MAX_SHARD-1,
    the last one being val). Defaults: CHARS_PER_TOKEN, CHARS_PER_SHARD, SHARD_MARGIN.

    d12 (1.32e9 tokens): 28 shards; d24 (4.03e9): 86 (vs DEFAULT_SHARDS = 8).
    """
    chars_per_token = CHARS_PER_TOKEN if chars_per_token is None else chars_per_token
    chars_per_shard = CHARS_PER_SHARD if chars_per_shard is None else chars_per_shard
    margin = SHARD_MARGIN if margin is None else margin
    available = MAX_SHARD if available is None else available
    if not tokens > 0:
        raise ValueError(f"tokens must be a positive number, got {tokens!r}")
    if not (chars_per_token > 0 and chars_per_shard > 0 and margin > 0):
        raise ValueError(f"chars_per_token, chars_per_shard and margin must be positive, got "
                         f"{chars_per_token!r}, {chars_per_shard!r}, {margin!r}")
    need = math.ceil(float(tokens) * chars_per_token * margin / chars_per_shard - 1e-9)
    return max(1, min(int(available), need))


# Best-fit packing (the GPU presets' row_packing) crops the document that ends a row and drops its
# rest: about 35% of the tokens at T = 2048 on ClimbMix's whole documents (nanochat 92d63d4,
# nanochat/dataloader.py's docstring). Our shards cut documents into segments of at most
# SEGMENT_CHARS (xsa/data/shards.py), which fit rows more often, so this is a bound that errs
# towards downloading enough: a build for such a run holds its horizon over the fraction kept.
BESTFIT_KEPT = 0.65
REPEAT_ENV = "XSA_DATA_REPEAT"  # 1: accept a complete build smaller than the horizon asks (data repeats)


def tokens_read(cfg) -> int:
    """Tokens of documents a run's rows read over its horizon: num_tokens, over BESTFIT_KEPT where
    rows are best-fit packed."""
    return math.ceil(cfg.num_tokens / BESTFIT_KEPT) if cfg.row_packing == "bestfit" else cfg.num_tokens


def study_tokens(study) -> int | None:
    """The most tokens_read of a study's ClimbMix runs (None: it has none): what its build holds."""
    reads = [tokens_read(r.config()) for r in study.runs if DATA_SUBSETS[r.config().data]["corpus"] == "climbmix"]
    return max(reads) if reads else None


def preset_tokens(preset: str) -> int:
    """The largest training horizon (num_tokens) of `preset` over the recipes (a preset may be run
    under any of them), with the preset's defaults; raises ConfigError for an unknown preset."""
    return max(make_config(preset, recipe=r).num_tokens for r in RECIPES)


def preset_tokens_read(preset: str) -> int:
    """tokens_read of `preset` over the recipes: what a build for it holds."""
    return max(tokens_read(make_config(preset, recipe=r)) for r in RECIPES)


def num_train_shards(tokens: float | None = None) -> int | None:
    """How many training shards a build uses: shards_for_tokens(tokens) if given, else
    $XSA_CLIMBMIX_SHARDS, else shards_for_tokens($XSA_CLIMBMIX_TOKENS), else None (shard_files'
    default: the shards already in the folder, or DEFAULT_SHARDS)."""
    if tokens is not None:
        return shards_for_tokens(tokens)
    if os.environ.get(SHARDS_ENV):
        n = _env_number(SHARDS_ENV)
        if n != int(n) or not 1 <= n <= MAX_SHARD:
            raise ValueError(f"${SHARDS_ENV}={os.environ[SHARDS_ENV]!r}: expected a whole number in 1..{MAX_SHARD}")
        return int(n)
    if os.environ.get(TOKENS_ENV):
        return shards_for_tokens(_env_number(TOKENS_ENV))
    return None


def _env_number(name: str) -> float:
    try:
        value = float(os.environ[name])
    except ValueError:
        raise ValueError(f"${name}={os.environ[name]!r}: not a number") from None
    if not value > 0:
        raise ValueError(f"${name}={os.environ[name]!r}: expected a positive number")
    return value


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def local_dir() -> Path:
    return Path(os.environ.get(DIR_ENV, Path(cache_dir()) / "climbmix"))


def download_shard(index: int, folder: Path | None = None, base_url: str = BASE_URL,
                   retries: int = 5, backoff: float = 2.0) -> Path:
    """The local path of shard `index`, downloading it first if needed (atomic, locked, retried)."""
    folder = Path(folder or local_dir())
    return download_parquet(f"{base_url}/{shard_name(index)}", folder / shard_name(index),
                            f"copy the ClimbMix shard files into a folder and set {DIR_ENV}=/that/folder",
                            retries, backoff)


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
    n = num_train or num_train_shards() or DEFAULT_SHARDS
    return {"train": [download_shard(i, folder) for i in range(n)], "val": [download_shard(MAX_SHARD, folder)]}


def iter_documents(paths: Iterable[Path], batch_rows: int = 1024) -> Iterator[str]:
    """The `text` of every row of the given parquet files, in file and row order."""
    for path in paths:
        try:
            import pyarrow.parquet as pq  # lazy: optional dependency; training on a built folder never needs pyarrow
            pf = pq.ParquetFile(path)
        except Exception as e:
            raise ValueError(f"ClimbMix shard {path} is not a readable parquet file ({e}); delete it to re-download") from e
        if "text" not in pf.schema_arrow.names:
            raise ValueError(f"ClimbMix shard {path} has no 'text' column (columns: {pf.schema_arrow.names})")
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["text"]):
            for text in batch.column(0).to_pylist():
                if text:
                    yield text
