"""
A run folder: the checks before a training writes into it (a new folder, an --overwrite, a
--resume of the same config on the same data), and its log when it is resumed: which lines of
metrics.jsonl are kept, whether the line of the checkpoint's step must be redone, and whether the
run is finished already (then a resume changes nothing: rewriting its summary would add the
resume's seconds to the cost the paper reports).

A torn last line (a killed writer, a damaged disk) is said aloud, never dropped in silence; a log
whose steps repeat or go back (two runs in one folder, a doubled file) is refused.
"""

from __future__ import annotations

import os
from pathlib import Path

from xsa.stack.checkpoint import state_path
from xsa.base.common import print0
from xsa.stack.config import ConfigError, TrainConfig
from xsa.data.shards import data_fingerprint
from xsa.base.records import check_steps, read_json, read_jsonl, read_jsonl_tail


def config_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    diffs = []
    for k in sorted(set(a) | set(b)):
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            diffs += config_diff(a[k], b[k], f"{prefix}{k}.")
        elif a.get(k) != b.get(k):
            diffs.append(f"{prefix}{k} (saved {a.get(k)!r}, given {b.get(k)!r})")
    return diffs


def check_run_dir(out: Path, cfg: TrainConfig, resume: bool, overwrite: bool) -> dict | None:
    """Validate the run folder before anything is written; return the saved config.json on resume."""
    cfg_path = out / "config.json"
    if resume:
        if not cfg_path.exists():
            raise FileNotFoundError(f"resume: {cfg_path} not found, there is no run to resume in {out}")
        saved = read_json(cfg_path)
        # by value: fields the record predates read at their defaults (TrainConfig.from_dict)
        diffs = config_diff(TrainConfig.from_dict(saved, str(cfg_path)).to_dict(), cfg.to_dict())
        if diffs:
            raise ConfigError(f"resume: the config differs from {cfg_path}: " + "; ".join(diffs))
        metrics = out / "metrics.jsonl"
        trained = (out / "summary.json").exists() or (
            metrics.exists() and any(r.get("step", 0) > 0 for r in read_jsonl(metrics)))
        if trained and not state_path(out).exists():
            # never restart a trained run from step 0 behind the user's back
            raise FileNotFoundError(f"resume: {state_path(out)} is missing, so {out} cannot be resumed; "
                                    "pass --overwrite instead of --resume to train it again from step 0")
        return saved
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"out: {out} is a file, not a run folder")
    if out.exists() and any(out.iterdir()):
        if not cfg_path.exists():  # not ours, or damaged: never deleted, and no advice that loops
            raise FileExistsError(f"out: {out} is not empty and is not a run folder (no config.json); "
                                  "nothing was changed: choose another --out, or move the folder away")
        if not overwrite:
            raise FileExistsError(f"out: run folder {out} already exists; pass --overwrite to replace it "
                                  "or --resume to continue it (nothing was changed)")
    parent = next(p for p in (out, *out.parents) if p.exists())
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"out: cannot write to {parent} (read-only)")
    return None


def same_data(recorded: str | None, data_dir: Path, out: Path) -> str:
    """The data's fingerprint, after checking a resumed run trained on the same data (a checkpoint
    from before the fingerprint was kept has none: nothing to compare)."""
    fingerprint = data_fingerprint(data_dir)
    if recorded not in (None, fingerprint):
        raise ValueError(f"resume: the data in {data_dir} changed since {state_path(out)} was saved (manifest "
                         f"sha256 {fingerprint[:12]}, the run trained on {recorded[:12]}); nothing was changed: "
                         "restore the data the run trained on, or start it again with --overwrite")
    return fingerprint


def kept_log(out: Path, step: int, say: bool = False) -> tuple[list[dict], bool]:
    """The metrics lines a resume at `step` keeps, and whether the line of `step` itself must be
    redone (it was torn, or never written). A torn line is said aloud; repeated steps are refused."""
    metrics = out / "metrics.jsonl"
    if not (metrics.exists() and step):
        return [], False
    records, torn = read_jsonl_tail(metrics)
    kept = check_steps([r for r in records if r["step"] <= step], metrics)
    lost = not kept or kept[-1]["step"] != step
    if torn and say:
        print0(f"warning: {metrics}:{torn}: a torn last line (a killed writer) was dropped"
               + (f"; the record of step {step} is redone from its checkpoint" if lost else ""))
    return kept, lost


def finished_summary(out: Path, cfg) -> dict | None:
    """The summary of a run already trained to its horizon with its whole log, else None."""
    if not (out / "summary.json").exists():
        return None
    summary = read_json(out / "summary.json")
    kept, lost = kept_log(out, cfg.num_iterations)
    done = summary.get("complete") is True and summary.get("config_hash") == cfg.config_hash()
    return summary if done and not lost else None
