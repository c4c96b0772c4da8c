"""
A row of the robustness table: the condition's columns beside one estimate (xsa/books/estimates.py)
as it stands, or a row that says why a step has no estimate yet. Shared by the robust study's rows
(xsa/report/robust.py) and the archived study's (xsa/books/archive.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from xsa.base.stats import Interval
from xsa.books.archive import archived_runs, condition
from xsa.books.estimates import slug


def effect_row(label, family, condition: dict, e, declared: int, when=None) -> dict:
    """One row: the condition's columns and the estimate (xsa/books/estimates.py) as it stands: its
    interval, whether that excludes zero and the seed paper's effect, its p and Holm p."""
    ci = e.ci
    return dict(condition=label, family=family, **condition, n=e.n, declared=declared, rel=e.value,
                rel_ci95=ci, excludes_zero=ci.excludes(0.0) if ci.defined else None,
                excludes_seed_paper=ci.excludes(e.seed_paper) if ci.defined and e.seed_paper is not None else None,
                p=e.p, p_holm=e.p_holm, first_record=when, key=e.key)


def not_run_row(label, family, why) -> dict:
    """A row whose step the study has not declared yet (its rule is still deciding)."""
    return dict(condition=label, family=family, preset=None, heads=None, seq_len=None, layers=None,
                tokens_per_param=None, matrix_lr=None, n=0, declared=0, rel=None, rel_ci95=Interval(None, None),
                excludes_zero=None, excludes_seed_paper=None, p=None, p_holm=None, first_record=None,
                status=f"not run ({why})", key=None)


def minute(date: str) -> str:
    """An ISO date of a record, to the minute: '2026-12-02 00:18' (the records are in UTC)."""
    return date[:16].replace("T", " ")


def archived_rows(root: Path, archived, est: dict, seed_effect) -> list[dict]:
    """One row a (baseline arm, XSA arm) pair of the archive at root, its numbers from the archive's
    estimates (xsa/books/declared.py); or, where the archive is missing, one row that says how to
    restore it."""
    commit = archived.commit
    runs = archived_runs(root)
    family = f"earlier study ({commit})"
    if not runs:
        row = not_run_row(f"earlier study: python -m xsa.archive --commit {commit}", family, "")
        return [{**row, "status": "not restored"}]
    rows = []
    for base, xsa in archived.pairs:
        a, b = runs.get(base, {}), runs.get(xsa, {})
        e = replace(est[f"c{commit}_{slug(base.replace('_base', ''))}"], seed_paper=seed_effect)
        label, cond = condition(next(iter(b.values()))["config"])
        dates = [r["provenance"].get("date", "") for arm in (a, b) for r in arm.values() if r.get("provenance")]
        row = effect_row(label, family, cond, e, len(a.keys() & b.keys()), minute(min(dates)) if dates else None)
        row["status"] = "archived"
        rows.append(row)
    return rows
