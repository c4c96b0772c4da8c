"""
The paper from run records only (no model, no training): the estimates, the tables, the figures and
the text.

    built = report.build(study, "results")      # results/estimates/<study>.json, results/tables, results/figures
    report.show_paper(study, built, "results")  # in 05_paper.ipynb: the text of paper/text/<study>.md.j2

Reads results/runs/<run_id>/{config,summary,eval,diagnostics,provenance}.json + metrics.jsonl and
results/throughput/<preset>.json; iterates the study's comparisons and claims (xsa/studies/registry.py), so
the design of the study lives in one place. Everything is deterministic: the same records give the
same bytes.

- integrity: the study's record set checked whole before anything is written (validate)
- records:   reading run folders back, per-seed values of an arm
- metrics:   every metric defined once (label, header, unit, relative or absolute, where recorded)
- estimates: an estimate (value, interval, n, p, Holm p, definition, run ids) and its files
- declared:  each study's declared estimates, computed once
- tables:    the table builders and the one table writer
- figures:   the figure builders and the one figure saver
- robust, archive, rows: the robustness table's rows, from the estimates
- claims:    the seed paper's claims, judged by the confirmatory estimates
- writing:   the text's template rendered: numbers by key, verdicts checked, figures and tables numbered
"""

from __future__ import annotations

from pathlib import Path

from xsa.report.claims import claims_table
from xsa.report.declared import PLANNED_SEEDS, robust_estimates, study_estimates
from xsa.report.estimates import Book, read_estimates, write_estimates
from xsa.report.metrics import METRICS
from xsa.report.robust import robustness, secondary_kind
from xsa.report.factorial import factorial_book
from xsa.report.scale import scale_section
from xsa.stats import Interval
from xsa.studies.scale import CHECKS
from xsa.studies.registry import Contrast, Paired, Sweep, Versus, get_study
from xsa.report.notes import left_out_note, machine_warnings
from xsa.report.writing import pct, render, template_for
from xsa.report.integrity import RecordError, check_records, validate
from xsa.report.figures import (DPI, fig_core_tasks, fig_curves, fig_diag_effects, fig_diagnostics, fig_forest,
                                fig_gap, fig_intervals, fig_lr, fig_sweep, fig_task_effects, fig_throughput)
from xsa.report.records import complete, curve, load_run, load_runs, load_throughput, metric
from xsa.report.tables import (DIAG_EFFECT_KEYS, DIAG_KEYS, SWEEP_LABELS, arms_table, common_seeds, compute_table,
                               contrast_effect, core_tasks_table, diagnostics_effects_table, diagnostics_table, effect,
                               effects_table, fmt, gpu_table, main_table, power_table, setup_table, task_effects_table,
                               throughput_table, to_markdown, write_table, every_run_table)

__all__ = ["build", "validate", "check_records", "RecordError", "show_table", "show_figure", "load_run", "load_runs", "metric",
           "to_markdown", "write_table", "fig_curves", "compute_table"]


def comparison_tables(study, runs) -> dict:
    """One table per Versus/Sweep of study.comparisons, under its name (a sweep on the seeds all its
    arms have); the contrasts go to the effects table."""
    tables = {}
    for c in study.comparisons:
        if isinstance(c, Sweep):
            arms = [a.name for a in c.arms()]
            tables[c.name] = arms_table(runs, arms, c.base.name, seeds=common_seeds(runs, arms))
        elif isinstance(c, Versus):
            tables[c.name] = arms_table(runs, [a.name for a in c.others], c.base.name)
        elif isinstance(c, Paired):  # its effect is in the effects table; its arms side by side here
            tables[c.name] = arms_table(runs, [c.b.name], c.a.name)
        elif not isinstance(c, Contrast):
            raise TypeError(f"comparison {c.name!r}: unknown kind {type(c).__name__}")
    return tables


def gap_curves(runs, pairs) -> dict:
    """{comparison: {tokens: [per-seed relative val-bpb difference, XSA vs baseline]}} from the
    evaluations logged during training (finished runs only)."""
    out = {}
    for p in pairs:
        by_seed = {arm: {r["spec"].seed: curve(r) for r in runs if r["arm"] == arm.name and complete(r)}
                   for arm in (p.a, p.b)}
        seeds = sorted(by_seed[p.a].keys() & by_seed[p.b].keys())
        series = {}
        for seed in seeds:
            a, b = by_seed[p.a][seed], by_seed[p.b][seed]
            for t in sorted(a.keys() & b.keys()):
                series.setdefault(t, []).append((b[t] - a[t]) / a[t])
        out[f"{p.name} (n = {len(seeds)})"] = series
    return out




def forest_rows(study, runs) -> list[dict]:
    """Every comparison's val-bpb effect, relative to its reference arm, with its 95% CI; the
    primary comparison on its planned seeds first, then on all its seeds. The learning-rate sweeps
    have their own figure (fig_lr)."""
    rows = []

    def add(label, e, primary=False):
        rows.append(dict(label=f"{label} (n = {e['n']})", n=e["n"], mean=e["rel_mean"] and 100 * e["rel_mean"],
                         ci=_scaled(e["rel_ci"], 100), primary=primary))
    for p in study.main:
        if p.name == study.primary and study.half_width_target:
            planned = effect(runs, p.a, p.b, "val_bpb", seeds=set(PLANNED_SEEDS))
            if planned["n"] and planned["n"] < effect(runs, p.a, p.b, "val_bpb")["n"]:
                add(f"{p.name}, planned seeds", planned, True)
                add(f"{p.name}, with post hoc seeds", effect(runs, p.a, p.b, "val_bpb"))
                continue
        add(p.name, effect(runs, p.a, p.b, "val_bpb"), p.name == study.primary)
    for c in study.comparisons:
        if isinstance(c, Paired):
            add(c.name, effect(runs, c.a, c.b, "val_bpb"))
        elif isinstance(c, Contrast):
            if c.second not in study.main and c.second not in study.comparisons:
                add(c.second.name, effect(runs, c.second.a, c.second.b, "val_bpb"))
            add(f"contrast: ({c.second.name}) - ({c.first.name})", contrast_effect(runs, c, "val_bpb"))
        elif isinstance(c, Versus) and not (isinstance(c, Sweep) and c.field == "matrix_lr"):
            seeds = common_seeds(runs, [a.name for a in c.arms()])
            for a in c.others:
                if a != c.base:
                    what = (f"{SWEEP_LABELS.get(c.field, c.field).split(' (')[0].replace('XSA ', 'XSA at ')} {a.get(c.field):g}"
                            if isinstance(c, Sweep) else a.name)
                    add(f"{what} vs {c.base.name}", effect(runs, c.base, a, "val_bpb", seeds))
    return rows


def lr_points(study, runs) -> dict:
    """The learning-rate check drawn: {preset: {"baseline"/"XSA": [(lr, val bpb relative to the
    baseline at the recipe's LR, CI, n)]}}, on the seeds every arm of the preset's check shares."""
    sweeps = [c for c in study.comparisons if isinstance(c, Sweep) and c.field == "matrix_lr"]
    out = {}
    for preset in dict.fromkeys(c.base.preset for c in sweeps):
        mine = sorted((c for c in sweeps if c.base.preset == preset), key=lambda c: c.base.get("xsa_alpha"))
        arms = [a for c in mine for a in c.arms()]
        seeds = common_seeds(runs, [a.name for a in arms])
        ref = mine[0].base
        out[preset] = {}
        for c in mine:
            label = "XSA" if c.base.get("xsa_alpha") else "baseline"
            pts = []
            for a in c.arms():
                e = effect(runs, ref, a, "val_bpb", seeds)
                if a == ref and e["n"]:
                    pts.append((a.get("matrix_lr"), 0.0, e["rel_ci"], e["n"]))
                elif e["n"]:
                    pts.append((a.get("matrix_lr"), e["rel_mean"], e["rel_ci"], e["n"]))
            out[preset][label] = pts
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
    tp = {p: t for p, t in load_throughput(results_dir).items() if p in study.presets()}
    out_dir = Path(out_dir) if out_dir else results_dir
    tables_dir, figures_dir = out_dir / "tables", out_dir / "figures"
    main_arms = [a.name for p in study.main for a in p.arms()]
    contrasts = [c for c in study.comparisons if isinstance(c, Contrast)]
    # every Paired effect: the main pairs, Paired comparisons, and the pairs that contrasts contrast
    pairs = list(dict.fromkeys([*study.main, *(c for c in study.comparisons if isinstance(c, Paired)),
                                *(c.second for c in contrasts)]))
    tables = {
        "setup": setup_table(study),
        "main": main_table(runs, study.main),
        "effects": effects_table(runs, pairs, contrasts, scored=study.scores),
        "power": power_table(runs, study.main, study.pilot_seeds, study.claims,
                             study.half_width_target) if study.pilot_seeds else [],
        "arms": arms_table(runs, baseline=None),
        **comparison_tables(study, every),
        "core_tasks": core_tasks_table(runs, main_arms),
        "task_effects": task_effects_table(runs, study.main),
        "diagnostics": diagnostics_table(runs, main_arms),
        "diagnostics_effects": diagnostics_effects_table(runs, study.main, DIAG_EFFECT_KEYS),
        "throughput": throughput_table(tp),
        "runs": every_run_table([(study.name, every)]),
        "compute": compute_table(every),
        "gpu": gpu_table(results_dir) if study.name != "gpu" else [],
    }
    estimates = {study.name: robust_estimates(study, runs, [r for r in every if r["spec"].seed < study.estimate_from])
                 if study.secondary else study_estimates(study, runs, every, tp)}  # a study with a Holm family
    robust, tables["robustness"], tables["lr_selection"] = None, [], []
    if study.robustness:  # XSA's effect under every condition run, the robust study's records beside ours
        robust = robustness(study, runs, results_dir, estimates[study.name], leave_out, interim)
        tables["robustness"], tables["lr_selection"] = robust["rows"], robust["selection"]
        estimates[study.robustness], estimates["archive"] = robust["estimates"], robust["archive_estimates"]
        tables["setup"] = setup_table(study, robust["study"])
        tables["runs"] = every_run_table([(study.name, every), (robust["study"].name, robust["runs"]),
                                          *robust["archived_runs"]])
    tables["scale"], tables["scale_gates"], figures_scale = [], [], {}
    if study.prediction:  # the scale study's levels, model and prediction, from what it has trained so far
        estimates[study.prediction], scale_tables, figures_scale = scale_section(study, results_dir, figures_dir, leave_out)
        estimates["factorial"] = factorial_book(results_dir)  # the factorial study, as far as it has trained
        tables.update(scale_tables)
        done = [(name, load_runs(results_dir, list(estimates[study.prediction][key].runs)))  # its runs so far
                for name, key in ((study.prediction, "runs_done"), *((c.name, f"{c.key}_runs_done") for c in CHECKS))]
        tables["runs"] = tables["runs"] + every_run_table(done)
    for name, est in estimates.items():
        write_estimates(est, results_dir / "estimates", name)
    tables["claims"] = claims_table(study, estimates)
    for name, rows in tables.items():
        write_table(rows, tables_dir, name)
    figures = draw_figures(study, runs, every, tables, figures_dir, main_arms, bool(robust), figures_scale)
    return dict(runs=runs, every=every, tables=tables, figures=figures, throughput=tp, gap=gap_curves(runs, study.main),
                left_out=leave_out, robust=robust, estimates=estimates)


def draw_figures(study, runs, every, tables, figures_dir, main_arms, robust: bool, drawn: dict) -> dict:
    """Every figure of the paper from its tables and records (`drawn`: those drawn already); a figure
    with no records now has what an older build drew removed, and maps to None."""
    main_runs = [r for r in runs if r["arm"] in main_arms]
    figures = {
        **drawn,
        "gap": fig_gap(gap_curves(runs, study.main), figures_dir, "gap"),  # the key figure
        "forest": fig_forest(forest_rows(study, runs), figures_dir, "forest",
                             "val bpb change relative to the reference arm (%), 95% CI over paired seeds"),
        "robustness": fig_forest(robustness_figure_rows(tables["robustness"]), figures_dir, "robustness",
                                 "val bpb change, XSA minus baseline (%), 95% CI over paired seeds",
                                 {"the seed paper (d12, one run)": _pct_or_none(study.seed_effect(study.primary))})
        if robust else None,
        "lr": fig_lr(lr_points(study, every), figures_dir, "lr"),
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


# The columns each table shows in the paper (the CSV and Markdown files keep every column), and
# which hold fractions shown as percentages.
DISPLAY = {
    "setup": ["preset", "layers", "width", "heads", "contexts", "steps", "tokens", "params", "tokens_per_scaling_param",
              "matrix_lrs", "xsa_layers", "runs", "studies"],
    "main": ["scale", "arm", "n", "val_bpb", "val_bpb_ci95", "val_bpb_rel", "core", "core_bpb", "core_bpb_rel"],
    "power": ["comparison", "pilot_n", "pilot_rel_sd", "seed_paper_effect_rel", "seeds_for_80pct_power", "n",
              "rel_sd", "rel_ci_half_width_first8", "rel_ci_half_width", "seeds_for_target"],
    "claims": ["claim", "theirs", "estimate", "n", "basis", "verdict", "their_scale"],
    "effects": ["comparison", "metric", "n", "d", "d_ci95", "rel", "rel_ci95"],
    "diagnostics_effects": ["comparison", "metric", "layer", "n", "baseline", "xsa", "d", "d_ci95", "direction"],
    "diagnostics": ["arm", "layer", "n", "cos_y_v", "cos_z_v", "diag_mass", "first_mass", "entropy", "cos_v_v"],
    "throughput": ["preset", "baseline_tok_per_s", "xsa_tok_per_s", "overhead", "overhead_ci95", "clock", "threads"],
    "task_effects": ["comparison", "task", "n", "rel", "rel_ci95"],
    "runs": ["study", "run", "steps", "val_bpb", "cpu_s", "eval_cpu_s", "wall_s"],
    "compute": ["preset", "stage", "runs", "cpu_min_per_run", "wall_min_per_run", "cpu_hours", "wall_hours"],
    "gpu": ["scale", "arm", "recipe", "n", "val_bpb", "core"],
    "robustness": ["condition", "preset", "matrix_lr", "tokens_per_param", "n", "rel", "rel_ci95",
                   "excludes_seed_paper", "p_holm", "status"],
    "lr_selection": ["grid", "preset", "matrix_lr", "n", "val_bpb", "selected"],
    "scale": ["level", "n", "declared", "rel", "rel_ci95", "p_holm", "status", "first_record"],
    "scale_gates": ["level", "layer", "head", "n", "value", "ci"],
}
PERCENT = {"val_bpb_rel", "core_bpb_rel", "rel", "rel_vs_base", "rel_ci95", "pilot_rel_sd", "seed_paper_effect_rel",
           "rel_sd", "rel_ci_half_width", "rel_ci_half_width_first8", "overhead", "overhead_ci95"}
# spreads and widths are sizes, not changes: no sign
UNSIGNED = {"pilot_rel_sd", "rel_sd", "rel_ci_half_width", "rel_ci_half_width_first8"}
# a header a reader reads (the files keep the column names)
HEADERS = {
    "preset": "preset", "layers": "layers", "width": "width", "heads": "heads", "seq_len": "context",
    "vocab": "vocab", "steps": "steps", "tokens": "tokens", "non_embedding_params": "params (non-emb.)",
    "tokens_per_param": "tokens/param", "tokens_per_scaling_param": "tokens/param (nanochat)", "matrix_lr": "matrix LR", "runs": "runs", "source": "source",
    "scale": "scale", "arm": "arm", "n": "n", "val_bpb_ci95": "95% CI",
    "val_bpb_rel": "vs baseline", "core_bpb_rel": "vs baseline",
    "comparison": "comparison", "pilot_n": "pilot n", "pilot_rel_sd": "pilot SD",
    "seed_paper_effect_rel": "seed paper's effect", "seeds_for_80pct_power": "n for 80% power",
    "rel_sd": "SD, all seeds", "rel_ci_half_width_first8": "half-width at n = 8",
    "rel_ci_half_width": "half-width, all seeds", "seeds_for_target": "n for target", "claim": "claim",
    "theirs": "theirs", "estimate": "ours: estimate [95% CI]", "verdict": "at CPU scale", "metric": "metric",
    "basis": "measured", "their_scale": "at their d12/d24",
    "d": "difference", "d_ci95": "95% CI", "rel": "relative", "rel_ci95": "95% CI", "layer": "layer",
    "baseline": "baseline", "xsa": "XSA", "direction": "interval", "cos_y_v": "cos(y,v)", "cos_z_v": "cos(z,v)",
    "first_mass": "a_i0", "entropy": "entropy", "cos_v_v": "cos(v_i,v_j)",
    "baseline_tok_per_s": "baseline tok/s", "xsa_tok_per_s": "XSA tok/s", "overhead": "overhead",
    "overhead_ci95": "95% CI", "clock": "clock", "threads": "threads", "task": "task", "run": "run",
    "wall_min": "wall min", "cpu_min": "CPU min", "config_hash": "config", "git_commit": "commit",
    "stage": "stage", "cpu_min_per_run": "CPU min/run", "wall_min_per_run": "wall min/run",
    "cpu_hours": "CPU h", "wall_hours": "wall h", "recipe": "recipe", "d_val_bpb_vs_base": "difference",
    "rel_vs_base": "relative", "seed": "seed", "condition": "condition", "excludes_zero": "excl. 0",
    "excludes_seed_paper": "excl. seed paper", "p_holm": "Holm p", "level": "level", "declared": "declared", "first_record": "first record (UTC)", "head": "head", "value": "learned strength", "ci": "95% CI", "status": "records", "grid": "grid",
    "selected": "selected", "key": "estimate key", "study": "study", "cpu_s": "train CPU s", "eval_cpu_s": "CORE + diag. CPU s",
    "wall_s": "wall s", "contexts": "context T", "params": "params", "matrix_lrs": "matrix LRs run",
    "xsa_layers": "XSA layers", "studies": "studies",
    **{name: m.header for name, m in METRICS.items()},  # a metric's header is the metric table's
}
# integers with thousands separators, and fewer digits where four say nothing
DIGITS = {"tokens_per_param": 2, "tokens_per_scaling_param": 1, "matrix_lr": 3, "wall_min": 1, "cpu_min": 1, "cpu_min_per_run": 1,
          "wall_min_per_run": 1, "cpu_hours": 1, "wall_hours": 1, "baseline_tok_per_s": 0, "xsa_tok_per_s": 0,
          "core": 4, "p_holm": 3, "value": 3}


def _percent(value, signed: bool = True):
    if isinstance(value, Interval):
        return "n/a" if not value.defined else f"[{pct(value.lo)}, {pct(value.hi)}]"
    return value if not isinstance(value, float) else pct(value, signed)


def _cell(col, value):
    if value is None:
        return "n/a"
    if col in PERCENT:
        return _percent(value, col not in UNSIGNED)
    if isinstance(value, bool):
        return ("yes" if value else "no") if col.startswith("excludes") or col == "selected" else str(value)
    if isinstance(value, int) and abs(value) >= 10000:
        return f"{value:,}"
    if isinstance(value, float) and col in DIGITS:
        return f"{value:,.{DIGITS[col]}f}"
    if isinstance(value, str) and col in ("comparison", "metric", "task", "direction"):
        value = value.replace("_", " ")
    if isinstance(value, str) and " " not in value and "-" in value:
        return value.replace("-", "\u2011")  # an identifier (cpu-w64-d4) never breaks at its hyphens
    return value if not isinstance(value, Interval) else fmt(value)


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


# a sweep's or an ablation's table (arms_table): the arms and their paired change in val bpb
DISPLAY_ARMS = ["arm", "n", "val_bpb", "val_bpb_ci95", "d_val_bpb_vs_base", "d_ci95", "rel_vs_base", "rel_ci95"]


def table_markdown(built: dict, name: str, cols=None, **where) -> str:
    """A table of `build` as Markdown for the paper: its DISPLAY columns (or `cols`) under reader's
    headers, fractions as percentages; `where` keeps the rows whose column (the keyword) is one of
    the values given."""
    rows = [r for r in built["tables"][name] if all(r.get(k) in v for k, v in where.items())]
    if name == "claims":
        rows = _claim_rows(rows)
    default = DISPLAY_ARMS if rows and "d_ci95" in rows[0] and name not in DISPLAY else (list(rows[0]) if rows else [])
    cols = [c for c in (cols or DISPLAY.get(name, default)) if rows and c in rows[0]]
    shown = [{c: _cell(c, r[c]) for c in cols} for r in rows]
    numeric = {c: "r" for c in cols if any(isinstance(r[c], (int, float, Interval)) and not isinstance(r[c], bool)
                                           for r in rows)}
    if "estimate" in cols:
        numeric["estimate"] = "r"  # an estimate with its interval: one line
    return to_markdown(shown, HEADERS, numeric)


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
