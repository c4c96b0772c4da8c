"""
The ledger of an adaptive study: every run it declared and finished, committed beside its records
(results/<study>/ledger.txt, one run id a line). An adaptive study declares its runs from the records
on disk, so a finished record that is deleted would otherwise make it declare a smaller study, and the
paper would print other numbers with nothing said. The ledger only grows: the paper stage adds the
runs that finished since, and a listed run without a finished record stops the paper unless it is
left out by name (--leave-out), which the paper then says.
"""

from __future__ import annotations

from pathlib import Path

from xsa.base.records import atomic_write_text, read_json

FILENAME = "ledger.txt"


def path(results_dir, study_name: str) -> Path:
    return Path(results_dir) / study_name / FILENAME


def read(results_dir, study_name: str) -> set[str]:
    """The run ids the ledger lists (none where the study has no ledger yet)."""
    p = path(results_dir, study_name)
    if not p.exists():
        return set()
    return {line.strip() for line in p.read_text(encoding="utf-8").splitlines() if line.strip()}


def finished(results_dir, run_id: str) -> bool:
    s = Path(results_dir) / "runs" / run_id / "summary.json"
    try:
        return s.exists() and bool(read_json(s).get("complete"))
    except (OSError, ValueError):
        return False


def problems(studies, results_dir, leave_out=()) -> list[str]:
    """A problem for every run a ledger lists that has no finished record, those left out aside."""
    out = []
    for study in studies:
        for run_id in sorted(read(results_dir, study.name) - set(leave_out or ())):
            if not finished(results_dir, run_id):
                out.append(f"{run_id}: listed in {path(results_dir, study.name)} as a finished run of study "
                           f"{study.name!r}, but results/runs/{run_id}/summary.json is missing or unfinished")
    return out


def update(studies, results_dir) -> None:
    """Add to each study's ledger the declared runs that have a finished record; never remove one."""
    for study in studies:
        listed = read(results_dir, study.name)
        now = listed | {r.run_id for r in study.runs if finished(results_dir, r.run_id)}
        if now != listed:
            atomic_write_text(path(results_dir, study.name), "".join(f"{r}\n" for r in sorted(now)))
