"""
The scale study's section of the paper: its levels' table, the learned gate per layer and head, the
cross-scale rows, and the scale figure, from the study's estimates (xsa/books/scale.py) once its records
are checked whole.

    book, tables, figures = scale_section(study, results_dir, figures_dir)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from xsa.base.records import read_json, records_without
from xsa.base.stats import Interval
from xsa.books.estimates import Estimate, as_dict, slug
from xsa.books.scale import HEADS_SLOPE, book_key, scale_book, scale_estimates
from xsa.books.scale_check import keys as check_keys
from xsa.checks.integrity import RecordError, check_present
from xsa.report.crossscale import cross_scale_rows, cross_scale_table, fig_cross_scale
from xsa.report.figures import FULL, new_figure, save_figure
from xsa.studies.registry import get_study
from xsa.studies.scale import CHECKS, HEADS_LEVELS, LENGTH_LEVELS, LEVELS, W256_LENGTH


def _log2(x: float) -> float:
    """log2 to 12 decimals: a libm's last bit differs between CPUs (numpy's vector log on AVX-512 and
    AVX2 among them), and a figure drawn from it would differ by a few pixels from host to host."""
    return round(math.log2(x), 12)



def _axis(ax, points, line, fixed, xlabel, xlim):
    """One panel: the levels (x, Estimate) with their intervals and the fitted line along one axis (the
    others fixed; `line` its intercept and slopes, None before the model can fit). The seed paper's d12
    effect is not drawn: on an axis of tokens per parameter or heads it would read as a size to compare with."""
    for x, e in points:
        if e.value is not None:
            err = None if e.lo is None else [[e.value - e.lo], [e.hi - e.value]]
            ax.errorbar(x, 100 * e.value, yerr=None if err is None else 100 * np.array(err), fmt="o",
                        color="C0", ms=4.5, capsize=2.5, lw=1.1)
    if line:  # straight on a log axis: its two ends, from the estimates as written and fixed logarithms
        b0, b1, b2 = line
        ys = [b0 + b1 * _log2(fixed(x)[0]) + b2 * _log2(fixed(x)[1]) for x in xlim]
        ax.plot(list(xlim), [100 * y for y in ys], color="C0", lw=0.9, alpha=0.6, label="model (other axes fixed)")
    ax.axhline(0, color="0.5", lw=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xlim(*xlim)
    ax.set_xlabel(xlabel)



def fig_scale(book: dict, out_dir, name: str = "scale"):
    """XSA's effect against tokens per parameter (one head of 64) and against heads (width 128), each
    level with its 95% interval and the model along that axis, from the study's estimates; the x4
    check's effect at a common rate beside the x4 level (hollow, nudged right). The fit's d12 and d24
    numbers are not drawn: d12 differs from these panels on every axis at once (heads, tokens per
    parameter, context), so no axis here is where it belongs, and the model fails its heterogeneity
    test; the text gives them."""
    fig, axes = new_figure(ncols=2, figsize=(FULL, 3.0), sharey=True)
    left, right = axes[0]
    line = ((book["fit_intercept"].value, book["slope_heads"].value, book["slope_tokens"].value)
            if book.get("fit_intercept") is not None else None)
    tpp = {x: book[f"tokens_per_param_{slug(x)}"].value for x in LENGTH_LEVELS}
    _axis(left, [(tpp[x], book[slug(n)]) for x, n in LENGTH_LEVELS.items()], line, lambda x: (1, x),
          "tokens per scaling parameter (1 head of 64, T = 512)", (0.7, 20))
    check = book.get("check_common_xsa_rate")
    if check is not None and check.n >= 2:
        left.errorbar(1.15 * tpp["x4"], 100 * check.value,
                      yerr=[[100 * (check.value - check.lo)], [100 * (check.hi - check.value)]], fmt="o", mfc="white",
                      color="C0", ms=4.5, capsize=2.5, lw=1.1, label="x4, both arms at XSA's rate (the check)")
    _axis(right, [(h, book[slug(n)]) for h, n in HEADS_LEVELS.items()], line, lambda x: (x, 1.2),
          "heads at width 128 (T = 512)", (0.7, 20))
    left.set_ylabel("XSA's change in final val bpb (%)")
    entries = {}  # a label both panels carry (the model) listed once
    for ax in (right, left):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncols=2, frameon=False)
    return save_figure(fig, out_dir, name)



def _first_record(results: Path, runs) -> str | None:
    """The UTC date of the earliest record among `runs` (their provenance), as the paper prints it."""
    dates = [read_json(p)["date"] for r in runs if (p := results / "runs" / r / "provenance.json").exists()
             and read_json(p).get("date")]
    return min(dates)[:16].replace("T", " ") if dates else None



def scale_table(book: dict[str, Estimate], results: Path) -> list[dict]:
    """The levels as the paper's table shows them: each with its records against its declared pairs,
    and the date of its first record (after the pre-registration's, for the study's own levels)."""
    rows = []
    entries = [(name, book[book_key(name)]) for name in (*LEVELS, W256_LENGTH, HEADS_SLOPE, "T=256", "T=512",
                                                          "T=1024")]
    checked = [(f"{c.key}: {n}", book[k]) for c in CHECKS for n, k in check_keys(c).items()]
    for name, e in (*entries, *checked):
        rows.append(dict(level=name, family=e.family, n=e.n, declared=e.declared, rel=e.value, rel_ci95=e.ci,
                         p_holm=e.p_holm, status=e.status, first_record=_first_record(Path(results), e.runs)))
    return rows



def scale_parts(study, results_dir, leave_out=()):
    """The study's prediction study (scale): its estimates (a book), its tables (the levels, and the learned
    gate per layer and head, the cross-scale rows) and the cross-scale rows its figure draws, computed
    and written nowhere. Its finished records are checked whole first; runs still training or not
    declared yet are its interim state, which the table and the text say. The runs in leave_out are
    analysed as never trained: the study's rules may then declare them again, and their levels say interim."""
    results_dir = Path(results_dir)
    with records_without(results_dir, leave_out) as view:
        scale = get_study(study.prediction, view)
        problems = [p for s in (scale, *(get_study(c, view) for c in scale.checks))  # named by their own paths
                    for p in check_present(s, results_dir, leave_out)]
        if problems:
            raise RecordError(f"the records of study {scale.name!r} cannot make the scale section ({len(problems)} "
                              "problem" + ("s" if len(problems) > 1 else "") + "; nothing was written):\n  "
                              + "\n  ".join(problems) + "\nrepair or retrain those runs, or leave a run out on "
                              "purpose (--leave-out RUN_ID)")
        est = scale_estimates(view)
        book = scale_book(view, est)
        table = scale_table(book, view)
        across = cross_scale_rows(book, scale)  # this study's levels beside the published results
    return book, {"scale": table, "scale_gates": gate_table(est), "cross_scale": cross_scale_table(across)}, across



def scale_figures(book, across, figures_dir) -> dict:
    """The scale figure (None before its model can fit) and the cross-scale figure (xsa/report/crossscale.py),
    drawn from the numbers as the estimates file holds them (10 decimals, read back as plain floats), not
    from this machine's last bits of the fit (its LAPACK and libm differ between CPUs): the same pixels
    on any host."""
    book, across = as_read(book), [_fixed(r) for r in across]
    return {"scale": fig_scale(book, figures_dir, "scale")
            if "fit_intercept" in book else None, "cross_scale": fig_cross_scale(across, figures_dir)}



def as_read(book: dict) -> dict:
    """The estimates as read_estimates reads them back from the file write_estimates writes."""
    rows = json.loads(json.dumps([as_dict(e) for e in book.values()]))
    return {k: Estimate(**{**r, "runs": tuple(r["runs"])}) for k, r in zip(book, rows)}



def _fixed(row: dict) -> dict:
    """A figure row with its numbers to 10 decimals, as plain floats (as the estimates file holds them)."""
    return {k: round(float(v), 10) if isinstance(v, float) else v for k, v in row.items()}



def scale_section(study, results_dir, figures_dir, leave_out=()):
    """scale_parts with its figures drawn: (book, tables, figures)."""
    book, tables, across = scale_parts(study, results_dir, leave_out)
    return book, tables, scale_figures(book, across, figures_dir)



def gate_table(est: dict) -> list[dict]:
    """The learned gate per level, layer and head, each with its interval over seeds (the table's rows)."""
    return [{**g, "ci": Interval(g["lo"], g["hi"])} for g in est["gate map"]]
