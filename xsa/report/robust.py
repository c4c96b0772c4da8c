"""
The robustness table: XSA's effect on final val bpb under every condition the project has run, one
row a condition, each saying whether its interval excludes zero and the seed paper's effect.

    rows = robustness_rows(study, robust_study, runs, robust_runs, results_dir)

The rows come from two studies: the recipe-LR study the paper is built from (its primary endpoint on
the planned seeds and with the post hoc ones, and its second depth), and the pre-registered robust
study (xsa/studies/registry.py, `_robust`), an adaptive study whose records land over several sessions:
its primary endpoint at each arm's tuned learning rate, and its secondary family (heads, sequence
length, the slope over sequence length, layer choice), with Holm's correction over that family as
its pre-registration fixes. A row of the robust study reports how many of its declared pairs have
records, so an interim table says so; a step whose rule has not declared its runs yet is "not run".

Only records count: a robust-study run counts once its summary.json is written (its record is then
checked whole by xsa/checks/integrity.py, diagnostics aside, which come at the end of a pass).
"""

from __future__ import annotations

from pathlib import Path

from xsa.archive import ARCHIVE
from xsa.books.archive import archived_list
from xsa.report.rows import archived_rows
from xsa.stack.config import scaling_params
from xsa.books.declared import ROBUST_KEYS, archive_estimates, robust_estimates
from xsa.books.estimates import SEQ_LENS, records_status, slug
from xsa.checks.integrity import RecordError, check_present
from xsa.checks.records import load_runs, per_seed
from xsa.report.rows import effect_row, minute, not_run_row
from xsa.base.stats import mean_ci
from xsa.studies.registry import Contrast, Sweep, get_study

SLOPE = "sequence-length slope"
# The secondary family's rows, by comparison: (label in the table, the condition as a sentence names
# it, kind). A "condition" row is XSA against the baseline under one condition; a "dependence" row is a
# difference of two effects (does XSA's effect depend on it?).
SECONDARY_ROWS = {
    "cpu-w128-d4 tuned": ("tuned, 2 heads (width 128)", "with two heads of 64 at width 128", "condition"),
    "heads": ("heads contrast (2 minus 1)", "the number of heads", "dependence"),
    "cpu-w64-d4 tuned T=256": ("tuned, T = 256", "at T = 256", "condition"),
    "cpu-w64-d4 tuned T=1024": ("tuned, T = 1024", "at T = 1024", "condition"),
    SLOPE: ("slope per doubling of T", "the sequence length", "dependence"),
    "last half vs baseline": ("last 2 layers vs baseline", "on the last two layers only", "condition"),
    "last half vs all layers": ("last 2 layers vs all layers", "the choice of layers (last two or all)", "dependence"),
}
PRIMARY = "tuned LRs, T = 512 (primary)"


def secondary_row(rows, comparison: str) -> dict | None:
    """The row of one secondary comparison (a key of SECONDARY_ROWS), or None."""
    return next((r for r in rows if r["condition"] == SECONDARY_ROWS[comparison][0]), None)


def secondary_kind(row: dict) -> tuple[str, str] | None:
    """(the condition as a sentence names it, kind) of a secondary-family row, by its label."""
    return next(((phrase, kind) for label, phrase, kind in SECONDARY_ROWS.values() if label == row["condition"]),
                None)


def _condition(arm, seq_len=None) -> dict:
    """The columns that say what a row's condition is, read from the arm's config."""
    cfg = arm.config()
    m = cfg.model
    return dict(preset=arm.preset, heads=m.n_head, seq_len=seq_len or m.sequence_len,
                layers="all" if arm.get("xsa_layers") in ("all", None) else arm.get("xsa_layers"),
                # nanochat's unit: training tokens per block-matrix-and-lm-head parameter
                tokens_per_param=cfg.num_tokens / scaling_params(m))


def _lrs(a, b) -> str:
    la, lb = a.get("matrix_lr"), b.get("matrix_lr")
    return f"{la:g}" if la == lb else f"{la:g} / {lb:g}"


def _row(label, family, a, b, e, declared, when=None, seq_len=None) -> dict:
    """A row of the pair (a, b) of today's arms, its condition read from b's config."""
    return effect_row(label, family, {**_condition(b, seq_len), "matrix_lr": _lrs(a, b)}, e, declared, when)


def _declared(study, *arms) -> int:
    """How many estimation seeds (study.estimate_from on) the study declares for every one of `arms`."""
    seeds = [{r.seed for r in study.runs if r.arm == arm and r.seed >= study.estimate_from} for arm in arms]
    return len(set.intersection(*seeds)) if seeds else 0


def _first_record(runs, *arms) -> str | None:
    """The date of the earliest run record of `arms` (provenance date, to the minute, UTC)."""
    names = {a.name for a in arms}
    dates = [r["provenance"]["date"] for r in runs if r["arm"] in names and (r["provenance"] or {}).get("date")]
    return minute(min(dates)) if dates else None


def robust_rows(robust, runs, est) -> list[dict]:
    """The robust study's rows from its estimates: its primary endpoint, then its pre-registered secondary
    family in order (Holm-adjusted over the whole family, xsa/books/declared.py)."""
    try:
        p = robust.comparison(robust.primary)
    except KeyError:  # the LR selection is still training: nothing declared yet
        return [not_run_row(PRIMARY, "primary", "LR selection pending")]
    rows = [_row(PRIMARY, "primary", p.a, p.b, est["primary"], _declared(robust, p.a, p.b),
                 _first_record(runs, p.a, p.b))]
    for name in robust.secondary:
        label, e = SECONDARY_ROWS[name][0], est[ROBUST_KEYS[name]]
        if e.reason.startswith("not declared"):
            rows.append(not_run_row(label, "secondary", "LR selection pending"))
            continue
        if name == SLOPE:
            pairs = [robust.comparison(f"{p.name} T={t}") if t != 512 else p for t in SEQ_LENS]
            rows.append(_row(label, "secondary", p.a, p.b, e, min(_declared(robust, q.a, q.b) for q in pairs),
                             _first_record(runs, *pairs[0].arms(), *pairs[2].arms()), seq_len="256-1024"))
            continue
        c = robust.comparison(name)
        q = c.second if isinstance(c, Contrast) else c
        rows.append(_row(label, "secondary", q.a, q.b, e, _declared(robust, q.a, q.b), _first_record(runs, *q.arms()),
                         seq_len=None if isinstance(c, Contrast) else q.b.get("sequence_len")))
    return rows


def recipe_rows(study, runs, est) -> list[dict]:
    """The recipe-LR study's rows from its estimates: its primary on the planned seeds, with the post hoc
    seeds, and its other main pairs (the second depth)."""
    rows = []
    for q in study.main:
        when = _first_record(runs, q.a, q.b)
        if q.name == study.primary:
            pre = est["primary"]
            rows.append(_row("recipe LR, planned seeds", "recipe-LR study", q.a, q.b, pre, pre.n, when))
            full = est.get("primary_all")
            if full is not None and full.n > pre.n:
                rows.append(_row(f"recipe LR, + {full.n - pre.n} post hoc seeds", "recipe-LR study",
                                 q.a, q.b, full, full.n, when))
        else:
            e = est[slug(q.name)]
            rows.append(_row(f"recipe LR, {q.a.config().model.n_layer} layers", "recipe-LR study", q.a, q.b, e,
                             e.n, when))
    for r in rows:
        r["p"] = None  # confirmatory only on the planned seeds; its verdict is the interval, as written
    return rows


def robustness_rows(study, robust, runs, robust_runs, est, robust_est) -> list[dict]:
    """Every row, the recipe-LR study's first; each with its status (complete, interim, not run)."""
    rows = recipe_rows(study, runs, est) + robust_rows(robust, robust_runs, robust_est)
    for r in rows:  # a row whose step is not declared yet says why already (not_run_row)
        r["status"] = r.get("status") or records_status(r["n"], r["declared"], count_none=True)
    return rows


def selection(robust, runs) -> list[dict]:
    """Each LR grid of the robust study: per arm and LR, the mean final val bpb over its selection seeds,
    and which LR the rule selected."""
    chosen = {x for p in robust.main for x in p.arms()}  # the arms at their selected LRs
    out = []
    for c in robust.comparisons:
        if isinstance(c, Sweep) and c.field == "matrix_lr":
            for arm in c.others:
                st = mean_ci(per_seed(runs, arm, "val_bpb").values())
                out.append(dict(grid=c.name, preset=arm.preset, matrix_lr=arm.get("matrix_lr"), n=st["n"],
                                val_bpb=st["mean"], selected=arm in chosen))
    return out


def robustness(study, runs, results_dir, est, leave_out=(), interim: bool = False) -> dict:
    """The robustness table of `study` (the recipe-LR study, whose records `runs` are, its estimates
    `est`) beside its robust study's records under results_dir: {rows, selection, preregistration,
    runs}. A damaged robust-study record stops it (RecordError), as a damaged record of the study itself
    does; so does a declared run without a record, or a row not complete, unless `interim` (or runs
    left out)."""
    robust = get_study(study.robustness, results_dir)
    leave_out = set(leave_out or ())
    problems = check_present(robust, results_dir, leave_out)
    if not interim:
        problems += [f"{Path(results_dir) / 'runs' / r.run_id}: no summary.json (the study {robust.name!r} "
                     f"declares run {r.run_id})" for r in robust.runs if r.run_id not in leave_out
                     and not (Path(results_dir) / "runs" / r.run_id / "summary.json").exists()]
    if problems:
        raise RecordError(f"the records of study {robust.name!r} cannot make the robustness table "
                          f"({len(problems)} problem{'s' if len(problems) > 1 else ''}; nothing was written):\n  "
                          + "\n  ".join(problems))
    present = [r.run_id for r in robust.runs if r.run_id not in leave_out
               and (Path(results_dir) / "runs" / r.run_id / "summary.json").exists()]
    robust_runs = load_runs(results_dir, present)
    # the robust study estimates on its own seeds: those below select learning rates (its
    # pre-registration), though the primary arms share them with the grid
    estimating = [r for r in robust_runs if r["spec"].seed >= robust.estimate_from]
    selecting = [r for r in robust_runs if r["spec"].seed < robust.estimate_from]
    seed = study.seed_effect(study.primary)  # the seed paper's effect beside our primary (its d12)
    robust_est = robust_estimates(robust, estimating, selecting, seed)
    archive_est = archive_estimates(study, results_dir)
    earlier = [r for a in study.archived
               for r in archived_rows(Path(results_dir) / ARCHIVE / a.commit, a, archive_est, seed)]
    rows = robustness_rows(study, robust, runs, estimating, est, robust_est)
    open_rows = [r for r in rows if r["family"] in ("primary", "secondary") and r["status"] != "complete"]
    if open_rows and not interim and not leave_out & {r.run_id for r in robust.runs}:
        raise RecordError(f"the robustness table of study {robust.name!r} is not complete ("
                          + "; ".join(f"{r['condition']}: {r['status']}" for r in open_rows)
                          + "); train its declared runs (make study STUDY=robust), or build an interim paper "
                          "(--interim)")
    return dict(rows=earlier + rows,
                selection=selection(robust, selecting), estimates=robust_est, archive_estimates=archive_est,
                archived_runs=[("earlier", archived_list(Path(results_dir) / ARCHIVE / a.commit))
                               for a in study.archived],
                preregistration=dict(zip(("commit", "date"), robust.preregistered or (None, None))),
                runs=robust_runs, study=robust)
