"""
What the paper stage can check before any stage runs: where the paper goes can be written, and
the runs the user leaves out are runs of the study (a typo would otherwise leave out nothing and
then stop the paper at its end).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from xsa.checks.integrity import other_studies


def check_paper_stage(study, paper_dir, leave_out=(), known=None) -> None:
    """Raise ValueError naming the path or run id that would stop the paper stage; `known`: the run
    ids leave_out may name (default: the study's)."""
    known = set(known) if known is not None else {r.run_id for r in study.runs}
    unknown = [r for r in leave_out if r not in known]
    if unknown:
        raise ValueError(f"--leave-out: {', '.join(unknown)} is not a run of the study {study.name!r}"
                         + other_studies(study))
    paper_dir = Path(paper_dir)
    existing = next(p for p in (paper_dir, *paper_dir.parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"paper: {existing} is a file, so {paper_dir} cannot be a folder")
    try:  # a real write: permissions say nothing to root, and nothing about a read-only mount
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".xsa-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ValueError(f"paper: cannot write to {existing} ({e.strerror}), so the paper cannot go to "
                         f"{paper_dir}") from None
    for r in leave_out:
        print(f"paper: {r} is left out by choice (--leave-out)", flush=True)
