"""
The paper from run records only (no model, no training): the estimates, the tables, the figures and
the text.

    built = report.build(study, "results")      # results/estimates/<study>.json, results/tables, results/figures
    report.show_paper(study, built, "results")  # in 05_paper.ipynb: the text of paper/text/<study>.md.j2

Reads results/runs/<run_id>/{config,summary,eval,diagnostics,provenance}.json + metrics.jsonl and
results/throughput/<preset>.json; iterates the study's comparisons and claims (xsa/studies/registry.py), so
the design of the study lives in one place. Everything is deterministic: the same records give the
same bytes.

It stands on the two wings below it: the record checks (xsa/checks/: the study's record set checked
whole before anything is written, the records read back) and the estimate books (xsa/books/: every
number, computed once and written to results/estimates/). This wing renders them:

- tables, columns: the table builders, every column defined once, and the one table writer
- figures, paper_figures: the figure builders and the one figure saver
- robust, rows: the robustness table's rows, from the estimates
- scale_section, crossscale: the scale study's tables and figures, and the cross-scale rows
- claims:    the seed paper's claims, judged by the confirmatory estimates
- writing:   the text's template rendered: numbers by key, verdicts checked, figures and tables numbered
- notes:     what the paper says of its records rather than its results
- export:    the executed paper notebook to HTML, Markdown and PDF
"""

from __future__ import annotations

from pathlib import Path

from xsa.report.claims import claims_table
from xsa.report.columns import DISPLAY_ARMS, cell, display, headers
from xsa.books.declared import PLANNED_SEEDS, robust_estimates, study_estimates
from xsa.books.estimates import Book, as_written, read_estimates, write_estimates
from xsa.checks.metrics import METRICS
from xsa.report.robust import robustness, secondary_kind
from xsa.books.factorial import d12_book, d12_test_books, factorial_table
from xsa.books.paper_estimates import extrapolation_table, later_books, unlisted_runs, with_sds
from xsa.report.paper_figures import paper_figures, study_compute
from xsa.report.scale_section import scale_figures, scale_parts
from xsa.base.stats import Interval
from xsa.studies.scale import CHECKS, D12_ENDPOINT
from xsa.studies.factorial.d12 import cpu_statement
from xsa.studies.registry import Contrast, Paired, Sweep, Versus, get_study
from xsa.report.notes import left_out_note, machine_warnings
from xsa.report.writing import pct, render, template_for
from xsa.checks.integrity import RecordError, check_records, validate
from xsa.books.verdicts import refuse_unwhole
from xsa.report.figures import (DPI, fig_core_tasks, fig_curves, fig_diag_effects, fig_diagnostics, fig_forest,
                                fig_gap, fig_intervals, fig_lr, fig_sweep, fig_task_effects, fig_throughput)
from xsa.checks.records import complete, curve, load_run, load_runs, load_throughput, metric
from xsa.books.effects import (DIAG_EFFECT_KEYS, DIAG_KEYS, common_seeds, contrast_name, effect_pairs, gap_curves, key,
                                 lr_checks, shown_effects, versus_name)
from xsa.report.tables import (SWEEP_LABELS, arms_table, compute_table, core_tasks_table, diagnostics_effects_table,
                               diagnostics_table, effects_table, fmt, gpu_table, main_table, optimizer_grid_table,
                               power_table, setup_table, task_effects_table, throughput_table, to_markdown, write_table,
                               every_run_table)
from xsa.studies import optimizer_analysis

__all__ = ["build", "validate", "check_records", "RecordError", "show_table", "show_figure", "load_run", "load_runs", "metric",
           "to_markdown", "write_table", "fig_curves", "compute_table"]


def comparison_tables(study, every, fx) -> dict:
    """One table per Versus/Sweep of study.comparisons, under its name (a sweep on the seeds all its
    arms have), on every run with the effects of `fx` (effects.shown_effects); the contrasts go to the
    effects table."""
    tables = {}
    pick = lambda name: (fx[key(name, absolute=True, on="every")], fx[key(name, on="every")])
    for c in study.comparisons:
        if isinstance(c, Versus):
            arms = c.arms() if isinstance(c, Sweep) else c.others
            seeds = common_seeds(every, [a.name for a in c.arms()]) if isinstance(c, Sweep) else None
            tables[c.name] = arms_table(every, [a.name for a in arms], seeds,
                                        {a.name: pick(versus_name(c, a)) for a in arms})
        elif isinstance(c, Paired):  # its effect is in the effects table; its arms side by side here
            tables[c.name] = arms_table(every, [c.b.name], effects={c.b.name: pick(c.name)})
        elif not isinstance(c, Contrast):
            raise TypeError(f"comparison {c.name!r}: unknown kind {type(c).__name__}")
    return tables


def forest_rows(study, est) -> list[dict]:
    """Every comparison's val-bpb effect, relative to its reference arm, with its 95% CI; the
    primary comparison on its planned seeds first, then on all its seeds. The learning-rate sweeps
    have their own figure (fig_lr). `est`: the study's estimates, its shown effects among them."""
    rows = []

    def add(label, e, primary=False):
        rows.append(dict(label=f"{label} (n = {e.n})", n=e.n, mean=e.value and 100 * e.value,
                         ci=_scaled(e.ci, 100), primary=primary))
    for p in study.main:
        if p.name == study.primary and study.half_width_target:
            planned, full = est[key(p.name, on="first8")], est[key(p.name)]  # the planned seeds are the first 8
            if planned.n and planned.n < full.n:
                add(f"{p.name}, planned seeds", planned, True)
                add(f"{p.name}, with post hoc seeds", full)
                continue
        add(p.name, est[key(p.name)], p.name == study.primary)
    for c in study.comparisons:
        if isinstance(c, Paired):
            add(c.name, est[key(c.name)])
        elif isinstance(c, Contrast):
            if c.second not in study.main and c.second not in study.comparisons:
                add(c.second.name, est[key(c.second.name)])
            add(f"contrast: ({c.second.name}) - ({c.first.name})", est[key(contrast_name(c))])
        elif isinstance(c, Versus) and not (isinstance(c, Sweep) and c.field == "matrix_lr"):
            for a in c.others:
                if a != c.base:
                    what = (f"{SWEEP_LABELS.get(c.field, c.field).split(' (')[0].replace('XSA ', 'XSA at ')} {a.get(c.field):g}"
                            if isinstance(c, Sweep) else a.name)
                    add(f"{what} vs {c.base.name}", est[key(versus_name(c, a))])
    return rows


def lr_points(study, est) -> dict:
    """The learning-rate check drawn: {preset: {"baseline"/"XSA": [(lr, val bpb relative to the
    baseline at the recipe's LR, CI, n)]}}, on the seeds every arm of the preset's check shares."""
    out = {}
    for preset, mine in lr_checks(study).items():
        out[preset] = {}
        for c in mine:
            es = [(a, est[key(f"lr {preset} {a.name}")]) for a in c.arms()]
            out[preset]["XSA" if c.base.get("xsa_alpha") else "baseline"] = [
                (a.get("matrix_lr"), 0.0 if a == mine[0].base else e.value, e.ci, e.n) for a, e in es if e.n]
    return out


def sweep_ylabel(c) -> str:
    """What a sweep's figure subtracts: the arm at each value minus its reference arm."""
    ref = c.base.get(c.field)
    if all(a.with_(**{c.field: ref}) == c.base for a in c.others):  # the same arm at the reference value
        return f"val bpb minus val bpb at {ref:g}"
    return f"val bpb minus {c.base.name}'s"


def _scaled(ci, k):
    return Interval(ci.lo * k, ci.hi * k) if ci.defined else ci


def robustness_figure_rows(rows) -> list[dict]:
    """The robustness table's rows that are XSA against a baseline under one condition (not the
    differences of effects: contrasts, slope, layer choice), in percent, for fig_forest."""
    keep = [r for r in rows if r.get("rel") is not None
            and (r["family"] != "secondary" or (secondary_kind(r) or ("", ""))[1] == "condition")]
    return [dict(label=f"{r['condition']} (n = {r['n']})", n=r["n"], mean=100 * r["rel"],
                 ci=_scaled(r["rel_ci95"], 100), primary=r["family"] == "primary") for r in keep]


def build(study, results_dir, out_dir=None, leave_out=(), interim: bool = False) -> dict:
    """Write every table and figure of a study's paper into OUT_DIR/tables and OUT_DIR/figures
    (default: results_dir); return the tables (rows) and figure paths. The runs in leave_out (run
    ids) are left out of every table and named in the paper; the paper stage calls validate() first.
    `interim`: the robustness study may still be training (its open rows say interim)."""
    results_dir = Path(results_dir)
    leave_out = sorted(set(leave_out or ()))
    every = load_runs(results_dir, [r.run_id for r in study.runs if r.run_id not in leave_out])
    # the runs every estimate is made on: seeds below estimate_from only select (an LR) and are never reused
    runs = [r for r in every if r["spec"].seed >= study.estimate_from]
    tp = load_throughput(results_dir, study.presets())
    out_dir = Path(out_dir) if out_dir else results_dir
    tables_dir, figures_dir = out_dir / "tables", out_dir / "figures"
    main_arms = [a.name for p in study.main for a in p.arms()]
    own = (robust_estimates(study, runs, [r for r in every if r["spec"].seed < study.estimate_from])
           if study.secondary else study_estimates(study, runs, every, tp))  # a study with a Holm family
    if study.primary == D12_ENDPOINT:  # the d12 test: its registered two-rate endpoint and verdicts
        d12 = d12_book(results_dir, study, cpu_statement(results_dir))
        own.update({k: e for k, e in d12.items() if k not in own})  # each rate's pair keeps its own estimate
    # with every effect a table or figure shows, as the estimates file will hold them (it is written once
    # every record is checked, below): the file is the tables' and figures' one source
    estimates = {study.name: as_written({**own, **shown_effects(study, runs, every)})}
    fx = estimates[study.name]
    gpu = get_study("gpu")
    gpu_runs = load_runs(results_dir, [r.run_id for r in gpu.runs]) if study.name != "gpu" else []
    tables = {
        "setup": setup_table(study),
        "main": main_table(runs, study.main, fx),
        "effects": effects_table(fx, effect_pairs(study), [c for c in study.comparisons if isinstance(c, Contrast)],
                                 scored=study.scores),
        "power": power_table(fx, study.main, study.pilot_seeds, study.claims,
                             study.half_width_target) if study.pilot_seeds else [],
        "arms": arms_table(runs),
        **comparison_tables(study, every, fx),
        "core_tasks": core_tasks_table(runs, main_arms),
        "task_effects": task_effects_table(runs, study.main, fx),
        "diagnostics": diagnostics_table(runs, main_arms),
        "diagnostics_effects": diagnostics_effects_table(runs, study.main, DIAG_EFFECT_KEYS, fx),
        "throughput": throughput_table(tp),
        "runs": every_run_table([(study.name, every)]),
        "compute": compute_table(every),
        "gpu": gpu_table(gpu_runs, gpu, shown_effects(gpu, gpu_runs, gpu_runs)) if any(map(complete, gpu_runs)) else [],
    }
    robust, tables["robustness"], tables["lr_selection"] = None, [], []
    if study.robustness:  # XSA's effect under every condition run, the robust study's records beside ours
        robust = robustness(study, runs, results_dir, estimates[study.name], leave_out, interim)
        tables["robustness"], tables["lr_selection"] = robust["rows"], robust["selection"]
        estimates[study.robustness], estimates["archive"] = robust["estimates"], robust["archive_estimates"]
        tables["setup"] = setup_table(study, robust["study"])
        tables["runs"] = every_run_table([(study.name, every), (robust["study"].name, robust["runs"]),
                                          *robust["archived_runs"]])
    tables["scale"], tables["scale_gates"], across = [], [], None
    if study.prediction:  # the scale study's levels, model and prediction, from what it has trained so far
        estimates[study.prediction], scale_tables, across = scale_parts(study, results_dir, leave_out)
        estimates.update(later_books(results_dir, ours := optimizer_analysis.estimates(results_dir)))  # read once
        tables["factorial"] = with_sds(factorial_table(estimates["factorial"]), estimates["factorial"])
        tables.update(scale_tables, optimizer_grid=optimizer_grid_table(ours))
        done = [(name, load_runs(results_dir, list(estimates[study.prediction][key].runs)))  # its runs so far
                for name, key in ((study.prediction, "runs_done"), *((c.name, f"{c.key}_runs_done") for c in CHECKS))]
        tables["runs"] = tables["runs"] + every_run_table(done)
        tables["runs"] = tables["runs"] + unlisted_runs(results_dir, tables["runs"])  # every other run folder
    # every estimate is computed and nothing is written yet: a study the text states whole that is not
    # (a run of a final study left out, deleted or unfinished) stops the build here, not half-written
    refuse_unwhole(study, estimates, results_dir, leave_out)
    # the scale study's figures, and the paper's across studies (the primary seed by seed, the factorial, ...)
    figures_scale = ({**scale_figures(estimates[study.prediction], across, figures_dir),
                      **paper_figures(results_dir, estimates, tables, figures_dir)} if study.prediction else {})
    for name, est in estimates.items():
        write_estimates(est, results_dir / "estimates", name)
    # at the seed paper's d12 the claims read the d12 test once it has a record (computed, not written here:
    # its own build writes its estimates file)
    tables["claims"] = claims_table(study, {**estimates, **(d12_test_books(results_dir) if study.claims else {})})
    tables["extrapolations"] = extrapolation_table(estimates)  # every d12 and d24 number, conditional
    tables["study_compute"] = study_compute(tables["runs"])  # CPU hours per study, every run counted once
    for name, rows in tables.items():
        write_table(rows, tables_dir, name)
    figures = draw_figures(study, runs, estimates[study.name], tables, figures_dir, main_arms, bool(robust),
                           figures_scale)
    return dict(runs=runs, every=every, tables=tables, figures=figures, throughput=tp, left_out=leave_out,
                robust=robust, estimates=estimates)


def draw_figures(study, runs, est, tables, figures_dir, main_arms, robust: bool, drawn: dict) -> dict:
    """Every figure of the paper from its tables, its estimates `est` and, for the training curves, its
    records (`drawn`: those drawn already); a figure with no records now has what an older build drew
    removed, and maps to None."""
    main_runs = [r for r in runs if r["arm"] in main_arms]
    figures = {
        **drawn,
        "gap": fig_gap(gap_curves(est, study.main), figures_dir, "gap"),  # the key figure
        "forest": fig_forest(forest_rows(study, est), figures_dir, "forest",
                             "val bpb change relative to the reference arm (%), 95% CI over paired seeds"),
        "robustness": fig_forest(robustness_figure_rows(tables["robustness"]), figures_dir, "robustness",
                                 "val bpb change, XSA minus baseline (%), 95% CI over paired seeds",
                                 {"the seed paper (d12, one run)": _pct_or_none(study.seed_effect(study.primary))})
        if robust else None,
        "lr": fig_lr(lr_points(study, est), figures_dir, "lr"),
        "train_loss": fig_curves(main_runs, "train_loss", "train loss (nats)", figures_dir, "train_loss"),
        "val_bpb_curves": fig_curves(main_runs, "val_bpb", "val bpb", figures_dir, "val_bpb_curves"),
        "val_bpb_arms": fig_intervals(tables["arms"], "val_bpb", "val bpb", figures_dir, "val_bpb_arms"),
        "core_tasks": fig_core_tasks(tables["core_tasks"], figures_dir, "core_tasks"),
        "task_effects": fig_task_effects(tables["task_effects"], figures_dir, "task_effects"),
        "diagnostics": fig_diagnostics(tables["diagnostics"], DIAG_KEYS, figures_dir, "diagnostics"),
        "diagnostics_effects": fig_diag_effects(tables["diagnostics_effects"], DIAG_EFFECT_KEYS, figures_dir,
                                                "diagnostics_effects"),
        "throughput": fig_throughput(tables["throughput"], figures_dir, "throughput"),
    }
    for c in study.comparisons:
        if isinstance(c, Sweep):
            figures[c.name] = fig_sweep(tables[c.name], c.values(), SWEEP_LABELS.get(c.field, c.field),
                                        figures_dir, c.name, sweep_ylabel(c))
    for name, path in figures.items():  # a figure with no records now: drop what an older build drew
        if path is None:
            for ext in ("png", "svg"):
                (figures_dir / f"{name}.{ext}").unlink(missing_ok=True)
    return figures


def _pct_or_none(x):
    return None if x is None else 100 * x


def _claim_rows(rows):
    """The claims table as the paper shows it: the estimate in one cell (its key beside it), the verdict."""
    out = []
    for r in rows:
        ci = r["ci95"]
        if r["estimate"] is None or not ci.defined:
            est = "n/a"
        elif r["unit"] == "relative":
            est = f"{pct(r['estimate'])} [{pct(ci.lo)}, {pct(ci.hi)}]"
        else:
            est = f"{r['estimate']:+.4f} [{ci.lo:+.4f}, {ci.hi:+.4f}]"
        out.append(dict(claim=r["claim"], theirs=r["theirs"], estimate=est, n=r["n"], key=f"`{r['key']}`",
                        basis=r["basis"], verdict=r["verdict"], their_scale=r["their_scale"]))
    return out


def table_markdown(built: dict, name: str, cols=None, **where) -> str:
    """A table of `build` as Markdown for the paper: its DISPLAY columns (or `cols`) under reader's
    headers, fractions as percentages; `where` keeps the rows whose column (the keyword) is one of
    the values given."""
    rows = [r for r in built["tables"][name] if all(r.get(k) in v for k, v in where.items())]
    if name == "claims":
        rows = _claim_rows(rows)
    default = DISPLAY_ARMS if rows and "d_ci95" in rows[0] and display(name) is None else (list(rows[0]) if rows else [])
    cols = [c for c in (cols or display(name) or default) if rows and c in rows[0]]
    shown = [{c: cell(c, r[c]) for c in cols} for r in rows]
    numeric = {c: "r" for c in cols if any(isinstance(r[c], (int, float, Interval)) and not isinstance(r[c], bool)
                                           for r in rows)}
    if "estimate" in cols:
        numeric["estimate"] = "r"  # an estimate with its interval: one line
    return to_markdown(shown, headers(cols), numeric)


def show_table(built: dict, name: str, caption: str | None = None, cols=None, **where):
    """A table of `build` for the paper (Markdown), under its caption where given ("Table 2. ...")."""
    from IPython.display import Markdown
    md = table_markdown(built, name, cols, **where)
    return Markdown((f"{caption}\n\n" if caption else "") + md)


def _png_width(path) -> int | None:
    with open(path, "rb") as f:
        head = f.read(24)
    return int.from_bytes(head[16:20], "big") if head[:8] == b"\x89PNG\r\n\x1a\n" else None


def show_figure(built: dict, name: str, caption: str | None = None):
    """A figure of `build` as an embedded PNG shown at its print size (so its fonts keep their point
    size on the page), with its caption below where given; or a note that its records are missing."""
    from IPython.display import Image, Markdown, display
    path = built["figures"].get(name)
    if not path:
        return Markdown(f"_{name}: no records yet, so no figure._")
    px = _png_width(path)
    image = Image(filename=str(path), width=round(px / DPI * 96) if px else None)
    if caption is None:
        return image
    display(image)
    return Markdown(caption)


def book(built: dict, results_dir) -> Book:
    """The estimates the text may use: every estimates file under results_dir/estimates (a study
    trained on another branch, say), with this build's own in their place."""
    studies = {f.stem: read_estimates(f) for f in sorted((Path(results_dir) / "estimates").glob("*.json"))}
    return Book({**studies, **built["estimates"]})


def paper_blocks(study, built: dict, results_dir) -> list:
    """The paper's text (paper/text/<study>.md.j2) rendered from the estimates, as blocks."""
    source = template_for(study.name).read_text()
    tables = lambda name, cols=None, **where: table_markdown(built, name, cols, **where)
    runs = [*built["runs"], *((built.get("robust") or {}).get("runs") or [])]
    scale = get_study(study.prediction, results_dir) if study.prediction else None
    context = dict(study=study, left_out=left_out_note(built["left_out"]),
                   machine_warnings=machine_warnings(study, built["runs"]), runs=runs, scale_study=scale,
                   scale_checks={c: get_study(c, results_dir) for c in (scale.checks if scale else ())},
                   drawn=sorted(name for name, path in built["figures"].items() if path))
    return render(source, book(built, results_dir), built["figures"], tables, context)


def show_paper(study, built: dict, results_dir) -> None:
    """Display the paper in a notebook: its text as Markdown, each figure at its print size."""
    from IPython.display import Image, Markdown, display
    for kind, content in paper_blocks(study, built, results_dir):
        if kind == "figure":
            path = built["figures"][content]
            px = _png_width(path)
            display(Image(filename=str(path), width=round(px / DPI * 96) if px else None))
        else:
            display(Markdown(content))
