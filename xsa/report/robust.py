"""
The robustness table: XSA's effect on final val bpb under every condition the project has run, one
row a condition, each saying whether its interval excludes zero and the seed paper's effect.

    rows = robustness_rows(study, robust_study, runs, robust_runs, results_dir)

The rows come from two studies: the recipe-LR study the paper is built from (its primary endpoint on
the planned seeds and with the post hoc ones, and its second depth), and the pre-registered robust
study (xsa/studies.py, `_robust`), an adaptive study whose records land over several sessions:
its primary endpoint at each arm's tuned learning rate, and its secondary family (heads, sequence
length, the slope over sequence length, layer choice), with Holm's correction over that family as
its pre-registration fixes. A row of the robust study reports how many of its declared pairs have
records, so an interim table says so; a step whose rule has not declared its runs yet is "not run".

Only records count: a robust-study run counts once its summary.json is written (its record is then
checked whole by xsa/report/integrity.py, diagnostics aside, which come at the end of a pass).
"""

from __future__ import annotations

import math
from pathlib import Path

from xsa.stats import Interval, holm, mean_ci, relative_differences, t_pvalue
from xsa.report.records import load_runs, per_seed
from xsa.report.tables import contrast_effect, effect
from xsa.report.text import pct, pct_ci

SLOPE = "sequence-length slope"
SEQ_LENS = (256, 512, 1024)  # the slope's sequence lengths: T=512 is the primary's
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
PRIMARY = "tuned LRs (primary)"
DIAGONAL = "log:diag_mass"  # the diagonal attention mass of the training log's final evaluation


def secondary_row(rows, comparison: str) -> dict | None:
    """The row of one secondary comparison (a key of SECONDARY_ROWS), or None."""
    return next((r for r in rows if r["condition"] == SECONDARY_ROWS[comparison][0]), None)


def secondary_kind(row: dict) -> tuple[str, str] | None:
    """(the condition as a sentence names it, kind) of a secondary-family row, by its label."""
    return next(((phrase, kind) for label, phrase, kind in SECONDARY_ROWS.values() if label == row["condition"]),
                None)


def _condition(arm, seq_len=None) -> dict:
    """The columns that say what a row's condition is, read from the arm's config."""
    from xsa.config import scaling_params
    cfg = arm.config()
    m = cfg.model
    return dict(preset=arm.preset, heads=m.n_head, seq_len=seq_len or m.sequence_len,
                layers="all" if arm.get("xsa_layers") in ("all", None) else arm.get("xsa_layers"),
                # nanochat's unit: training tokens per block-matrix-and-lm-head parameter
                tokens_per_param=cfg.num_tokens / scaling_params(m))


def _lrs(a, b) -> str:
    la, lb = a.get("matrix_lr"), b.get("matrix_lr")
    return f"{la:g}" if la == lb else f"{la:g} / {lb:g}"


def _row(label, family, a, b, e, declared, seed_effect, when=None, seq_len=None) -> dict:
    """A row of the pair (a, b) of today's arms, its condition read from b's config."""
    return effect_row(label, family, {**_condition(b, seq_len), "matrix_lr": _lrs(a, b)}, e, declared,
                      seed_effect, when)


def effect_row(label, family, condition: dict, e: dict, declared: int, seed_effect, when=None) -> dict:
    """One row: the condition's columns, the effect (an `effect` dict: relative mean, interval, SD, n),
    whether its interval excludes zero and the seed paper's effect, its two-sided p."""
    ci = e["rel_ci"]
    return dict(condition=label, family=family, **condition, n=e["n"], declared=declared, rel=e["rel_mean"],
                rel_ci95=ci, excludes_zero=ci.excludes(0.0) if ci.defined else None,
                excludes_seed_paper=ci.excludes(seed_effect) if ci.defined and seed_effect is not None else None,
                p=t_pvalue(e["rel_mean"], e["rel_sd"], e["n"]), p_holm=None, first_record=when)


def not_run_row(label, family, why) -> dict:
    """A row whose step the study has not declared yet (its rule is still deciding)."""
    return dict(condition=label, family=family, preset=None, heads=None, seq_len=None, layers=None,
                tokens_per_param=None, matrix_lr=None, n=0, declared=0, rel=None, rel_ci95=Interval(None, None),
                excludes_zero=None, excludes_seed_paper=None, p=None, p_holm=None, first_record=None,
                status=f"not run ({why})")


def _declared(study, *arms) -> int:
    """How many estimation seeds (study.estimate_from on) the study declares for every one of `arms`."""
    seeds = [{r.seed for r in study.runs if r.arm == arm and r.seed >= study.estimate_from} for arm in arms]
    return len(set.intersection(*seeds)) if seeds else 0


def minute(date: str) -> str:
    """An ISO date of a record, to the minute: '2026-12-02 00:18' (the records are in UTC)."""
    return date[:16].replace("T", " ")


def _first_record(runs, *arms) -> str | None:
    """The date of the earliest run record of `arms` (provenance date, to the minute, UTC)."""
    names = {a.name for a in arms}
    dates = [r["provenance"]["date"] for r in runs if r["arm"] in names and (r["provenance"] or {}).get("date")]
    return minute(min(dates)) if dates else None


def _slope(runs, pairs) -> dict:
    """Per seed, the least-squares slope of XSA's relative effect against log2 T over SEQ_LENS (per
    doubling of T); then its mean with a t-interval over the seeds that have all three lengths."""
    per_pair = [relative_differences(per_seed(runs, p.a, "val_bpb"), per_seed(runs, p.b, "val_bpb")) for p in pairs]
    xs = [math.log2(t) for t in SEQ_LENS]
    x0 = sum(xs) / len(xs)
    seeds = sorted(set.intersection(*(set(d) for d in per_pair))) if per_pair else []
    slopes = [sum((x - x0) * d[s] for x, d in zip(xs, per_pair)) / sum((x - x0) ** 2 for x in xs) for s in seeds]
    st = mean_ci(slopes)
    return dict(n=st["n"], rel_mean=st["mean"], rel_ci=st["ci"], rel_sd=st["sd"])


def robust_rows(robust, runs, seed_effect) -> list[dict]:
    """The robust study's rows: its primary endpoint, then its pre-registered secondary family in order
    (Holm-adjusted over the whole family; a member not run counts with p = 1)."""
    from xsa.studies import Contrast
    rows = []
    try:
        p = robust.comparison(robust.primary)
    except KeyError:  # the LR selection is still training: nothing declared yet
        return [not_run_row(PRIMARY, "primary", "LR selection pending")]
    rows.append(_row(PRIMARY, "primary", p.a, p.b, effect(runs, p.a, p.b, "val_bpb"),
                     _declared(robust, p.a, p.b), seed_effect, _first_record(runs, p.a, p.b)))
    family = []
    for name in robust.secondary:
        label = SECONDARY_ROWS[name][0]
        if name == SLOPE:
            try:
                pairs = [robust.comparison(f"{p.name} T={t}") if t != 512 else p for t in SEQ_LENS]
            except KeyError:
                pairs = None
            if pairs:
                e = _slope(runs, pairs)
                row = _row(label, "secondary", p.a, p.b, e, min(_declared(robust, q.a, q.b) for q in pairs),
                           None, _first_record(runs, *pairs[0].arms(), *pairs[2].arms()), seq_len="256-1024")
                row["excludes_seed_paper"] = None  # the seed paper has no slope
                family.append(row)
                continue
        try:
            c = robust.comparison(name)
        except KeyError:
            family.append(not_run_row(label, "secondary", "LR selection pending"))
            continue
        if isinstance(c, Contrast):  # (second's effect) - (first's), per seed
            e = contrast_effect(runs, c, "val_bpb")
            row = _row(label, "secondary", c.second.a, c.second.b, e, _declared(robust, *c.second.arms()), None,
                       _first_record(runs, *c.second.arms()))
            row["excludes_seed_paper"] = None
        else:
            row = _row(label, "secondary", c.a, c.b, effect(runs, c.a, c.b, "val_bpb"),
                       _declared(robust, c.a, c.b), seed_effect, _first_record(runs, c.a, c.b),
                       seq_len=c.b.get("sequence_len"))
        family.append(row)
    for row, adjusted in zip(family, holm([r.get("p") for r in family])):
        row["p_holm"] = adjusted
    return rows + family


def recipe_rows(study, runs, seed_effect) -> list[dict]:
    """The recipe-LR study's rows: its primary on the planned seeds, with the post hoc seeds, and its
    other main pairs (the second depth)."""
    from xsa.report import PLANNED_SEEDS
    rows = []
    for q in study.main:
        if q.name == study.primary:
            pre = effect(runs, q.a, q.b, "val_bpb", seeds=set(PLANNED_SEEDS))
            rows.append(_row("recipe LR, planned seeds", "recipe-LR study", q.a, q.b, pre,
                             len(PLANNED_SEEDS), seed_effect, _first_record(runs, q.a, q.b)))
            full = effect(runs, q.a, q.b, "val_bpb")
            if full["n"] > pre["n"]:
                rows.append(_row(f"recipe LR, + {full['n'] - pre['n']} post hoc seeds", "recipe-LR study",
                                 q.a, q.b, full, full["n"], seed_effect, _first_record(runs, q.a, q.b)))
        else:
            e = effect(runs, q.a, q.b, "val_bpb")
            depth = q.a.config().model.n_layer
            rows.append(_row(f"recipe LR, {depth} layers", "recipe-LR study", q.a, q.b, e, e["n"], seed_effect,
                             _first_record(runs, q.a, q.b)))
    for r in rows:
        r["p"] = None  # confirmatory only on the planned seeds; its verdict is the interval, as written
    return rows


def _status(row) -> str:
    if row.get("status"):
        return row["status"]
    if row["n"] < row["declared"]:
        return f"interim {row['n']}/{row['declared']}"
    return "complete" if row["n"] else "not run"


def robustness_rows(study, robust, runs, robust_runs, seed_effect) -> list[dict]:
    """Every row, the recipe-LR study's first; each with its status (complete, interim, not run)."""
    rows = recipe_rows(study, runs, seed_effect) + robust_rows(robust, robust_runs, seed_effect)
    for r in rows:
        r["status"] = _status(r)
    return rows


def selection(robust, runs) -> list[dict]:
    """Each LR grid of the robust study: per arm and LR, the mean final val bpb over its selection seeds,
    and which LR the rule selected."""
    from xsa.studies import Sweep
    chosen = {x for p in robust.main for x in p.arms()}  # the arms at their selected LRs
    out = []
    for c in robust.comparisons:
        if isinstance(c, Sweep) and c.field == "matrix_lr":
            for arm in c.others:
                st = mean_ci(per_seed(runs, arm, "val_bpb").values())
                out.append(dict(grid=c.name, preset=arm.preset, matrix_lr=arm.get("matrix_lr"), n=st["n"],
                                val_bpb=st["mean"], selected=arm in chosen))
    return out


def group_check(robust, runs) -> list[dict]:
    """The AdamW-group check, descriptive (2 seeds): per arm and scale of the embedding and unembedding
    LRs, the mean final val bpb at the selected matrix LR and its grid neighbours, and whether the
    lowest is at another matrix LR than the selected one (the optimum moved)."""
    from xsa.studies import GROUP_SEEDS, Sweep, group_arms
    if not robust.main:
        return []
    primary = robust.comparison(robust.primary)
    out = []
    for c in (c for c in robust.comparisons
              if isinstance(c, Sweep) and c.field == "matrix_lr" and c.base.preset == primary.a.preset):
        tuned = next(x for x in primary.arms() if x.with_(matrix_lr=c.base.get("matrix_lr")) == c.base)
        for scale, arms in group_arms(c.base, tuned, c.values()).items():
            means = {a.get("matrix_lr"): mean_ci(per_seed(runs, a, "val_bpb").values()) for a in arms}
            whole = all(m["n"] == len(GROUP_SEEDS) for m in means.values())
            best = min(means, key=lambda lr: means[lr]["mean"]) if whole else None
            out.append(dict(grid=c.name, scale=scale, selected=tuned.get("matrix_lr"),
                            means={lr: m["mean"] for lr, m in means.items()}, best=best,
                            moved=None if best is None else best != tuned.get("matrix_lr")))
    return out


def diagonal_by_heads(robust, runs) -> list[dict]:
    """XSA's relative change in diagonal attention mass (mean over layers, paired by seed) at each head
    count of the robust study's tuned pairs, and the heads contrast: does the diagonal change depend on
    the number of heads? From the training log's final evaluation, which every run records (the
    diagnostics stage needs the weights, which only the machine that trained a run has). Rows:
    {label, heads, n, rel_mean, rel_ci}."""
    from xsa.studies import Contrast
    out = []
    for c in (*robust.main, *(c for c in robust.comparisons if isinstance(c, Contrast))):
        if isinstance(c, Contrast):
            e, label, heads = contrast_effect(runs, c, DIAGONAL), "contrast (2 minus 1 heads)", None
        else:
            heads = c.a.config().model.n_head
            e, label = effect(runs, c.a, c.b, DIAGONAL), f"{heads} head{'s' if heads > 1 else ''} ({c.name})"
        out.append(dict(label=label, heads=heads, n=e["n"], rel_mean=e["rel_mean"], rel_ci=e["rel_ci"]))
    return out


def row_sentence(r: dict) -> str:
    """One row as a sentence fragment: 'tuned LRs, ...: -0.30% [-0.50%, -0.10%] (n = 12)'."""
    if not r.get("n"):
        return f"{r['condition']}: {r['status']}"
    ci = r["rel_ci95"]
    return f"{r['condition']}: {pct(r['rel'])} {pct_ci(ci) if ci.defined else '(one pair, no interval)'} (n = {r['n']})"


def robustness(study, runs, results_dir) -> dict:
    """The robustness table of `study` (the recipe-LR study, whose records `runs` are) beside its
    robust study's records under results_dir: {rows, selection, preregistration, runs}. A damaged
    robust-study record stops it (RecordError), as a damaged record of the study itself does."""
    from xsa.report.integrity import RecordError, check_present
    from xsa.studies import get_study
    robust = get_study(study.robustness, results_dir)
    problems = check_present(robust, results_dir)
    if problems:
        raise RecordError(f"the records of study {robust.name!r} cannot make the robustness table "
                          f"({len(problems)} problem{'s' if len(problems) > 1 else ''}; nothing was written):\n  "
                          + "\n  ".join(problems))
    present = [r.run_id for r in robust.runs if (Path(results_dir) / "runs" / r.run_id / "summary.json").exists()]
    robust_runs = load_runs(results_dir, present)
    # the robust study estimates on its own seeds: those below select learning rates (its
    # pre-registration), though the primary arms share them with the grid
    estimating = [r for r in robust_runs if r["spec"].seed >= robust.estimate_from]
    selecting = [r for r in robust_runs if r["spec"].seed < robust.estimate_from]
    seed = study.seed_effect(study.primary)  # the seed paper's effect beside our primary (its d12)
    from xsa.archive import ARCHIVE
    from xsa.report.archive import archived_rows
    earlier = [r for a in study.archived
               for r in archived_rows(Path(results_dir) / ARCHIVE / a.commit, a.commit, a.pairs, seed)]
    return dict(rows=earlier + robustness_rows(study, robust, runs, estimating, seed),
                selection=selection(robust, selecting),
                group_check=group_check(robust, selecting), diagonal=diagonal_by_heads(robust, estimating),
                preregistration=dict(zip(("commit", "date"), robust.preregistered or (None, None))),
                runs=robust_runs, study=robust)
