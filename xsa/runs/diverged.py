"""
A diverged run as a final record: RUN_DIR/diverged.json, written where training stops on a non-finite
loss or non-finite weights (xsa/train.py), so that a learning-rate sweep reaching rates that diverge
ends with a record for every run. The pipeline counts a run folder holding it, for the same config, as
done (never retrained, never a failure), and a study's rule counts the run as diverged.

    {"step": 6, "reason": "train loss is nan", "config_hash": "...", "config": {...}}

The run's summary.json is never written for it: its final val bpb stays undefined (None wherever it
is read). A later training in the folder (--overwrite, --resume) removes the record first.
"""

from __future__ import annotations

from pathlib import Path

from xsa.base.records import atomic_write_json, read_json

FILENAME = "diverged.json"


def write_diverged(run_dir, step: int, what: str, config_dict: dict, config_hash: str | None = None) -> Path:
    """Record that the run in `run_dir` diverged at `step` (`what`: the loss or the weights, as said)."""
    path = Path(run_dir) / FILENAME
    atomic_write_json(path, dict(step=int(step), reason=str(what), config_hash=config_hash, config=config_dict))
    return path


def read_diverged(run_dir) -> dict | None:
    """The run folder's divergence record, or None where the run has not diverged."""
    path = Path(run_dir) / FILENAME
    return read_json(path) if path.exists() else None


def clear_diverged(run_dir) -> None:
    """Drop a stale record: the folder is being trained again."""
    (Path(run_dir) / FILENAME).unlink(missing_ok=True)
