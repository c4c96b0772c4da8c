"""
A run's log when it is resumed: which lines of metrics.jsonl are kept, whether the line of the
checkpoint's step must be redone, and whether the run is finished already (then a resume changes
nothing: rewriting its summary would add the resume's seconds to the cost the paper reports).

A torn last line (a killed writer, a damaged disk) is said aloud, never dropped in silence; a log
whose steps repeat or go back (two runs in one folder, a doubled file) is refused.
"""

from __future__ import annotations

from pathlib import Path

from xsa.common import print0
from xsa.records import check_steps, read_json, read_jsonl_tail


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
