"""
Tables and figures of the paper, built from run records only (no model, no training).

    built = report.build(study, "results")      # writes results/tables and results/figures

Reads results/runs/<run_id>/{config,summary,eval,diagnostics,provenance}.json + metrics.jsonl and
results/throughput/<preset>.json; iterates the study's comparisons and claims (xsa/studies.py), so
the design of the study lives in one place. Everything is deterministic: the same records give the
same bytes.

- integrity: the study's record set checked whole before anything is written (validate)
- records: reading run folders back, per-seed values of an arm
- stats:   t-intervals, paired differences, contrasts (pure functions)
- tables:  the table builders and the one table writer
- figures: the figure builders and the one figure saver
- claims:  the seed paper's claims, judged
"""

from __future__ import annotations

from pathlib import Path

from xsa.report.claims import claims_table
from xsa.report import text  # noqa: E402 (the paper's sentences)
from xsa.report.integrity import RecordError, check_records, validate
from xsa.report.figures import (fig_core_tasks, fig_curves, fig_diag_effects, fig_diagnostics, fig_forest, fig_gap,
                                fig_intervals, fig_sweep, fig_throughput)
from xsa.report.records import by_arm, complete, curve, finished, load_run, load_runs, load_throughput, metric
from xsa.report.tables import (DIAG_EFFECT_KEYS, DIAG_KEYS, SWEEP_LABELS, arms_table, common_seeds, compute_table,
                               contrast_effect, core_tasks_table, diagnostics_effects_table, diagnostics_table, effect,
                               effects_table, fmt, gpu_table, main_table, power_table, runs_table, setup_table, throughput_table,
                               to_markdown, write_table)

__all__ = ["build", "validate", "check_records", "RecordError", "summary_text", "show_table", "show_figure", "load_run", "load_runs", "metric",
           "to_markdown", "write_table", "fig_curves", "compute_table"]


def comparison_tables(study, runs) -> dict:
    """One table per Versus/Sweep of study.comparisons, under its name (a sweep on the seeds all its
    arms have); the contrasts go to the effects table."""
    from xsa.studies import Contrast, Sweep, Versus
    tables = {}
    for c in study.comparisons:
        if isinstance(c, Sweep):
            arms = [a.name for a in c.all_arms()]
            tables[c.name] = arms_table(runs, arms, c.base.name, seeds=common_seeds(runs, arms))
        elif isinstance(c, Versus):
            tables[c.name] = arms_table(runs, [a.name for a in c.arms], c.base.name)
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
    """Every comparison's val-bpb effect, relative to its reference arm, with its 95% CI."""
    from xsa.studies import Contrast, Versus
    rows = []
    add = lambda label, e, primary=False: rows.append(dict(label=f"{label} (n={e['n']})", mean=e["rel_mean"] and 100 * e["rel_mean"],
                                                            ci=_scaled(e["rel_ci"], 100), primary=primary))
    for p in study.main:
        add(f"XSA vs baseline, {p.name}", effect(runs, p.a, p.b, "val_bpb"), p.name == study.primary)
    for c in study.comparisons:
        if isinstance(c, Contrast):
            if c.second not in study.main:
                add(f"XSA vs baseline, {c.second.name}", effect(runs, c.second.a, c.second.b, "val_bpb"))
            add(f"contrast {c.name}: ({c.second.name}) - ({c.first.name})", contrast_effect(runs, c, "val_bpb"))
        elif isinstance(c, Versus):
            seeds = common_seeds(runs, [a.name for a in c.all_arms()])
            for a in c.arms:
                if a != c.base:
                    add(f"{a.name} vs {c.base.name}", effect(runs, c.base, a, "val_bpb", seeds))
    return rows


def _scaled(ci, k):
    from xsa.report.stats import Interval
    return Interval(ci.lo * k, ci.hi * k) if ci.defined else ci


def build(study, results_dir, out_dir=None, leave_out=()) -> dict:
    """Write every table and figure of a study's paper into OUT_DIR/tables and OUT_DIR/figures
    (default: results_dir); return the tables (rows) and figure paths. The runs in leave_out (run
    ids) are left out of every table and named in the paper; the paper stage calls validate() first."""
    from xsa.studies import Contrast, Sweep
    results_dir = Path(results_dir)
    leave_out = sorted(set(leave_out or ()))
    runs = load_runs(results_dir, [r.run_id for r in study.runs if r.run_id not in leave_out])
    tp = {p: t for p, t in load_throughput(results_dir).items() if p in study.presets()}
    out_dir = Path(out_dir) if out_dir else results_dir
    tables_dir, figures_dir = out_dir / "tables", out_dir / "figures"
    main_arms = [a.name for p in study.main for a in p.arms()]
    contrasts = [c for c in study.comparisons if isinstance(c, Contrast)]
    pairs = [*study.main, *(c.second for c in contrasts if c.second not in study.main)]  # every Paired effect
    tables = {
        "setup": setup_table(study),
        "main": main_table(runs, study.main),
        "claims": claims_table(study, runs, tp),
        "effects": effects_table(runs, pairs, contrasts, scored=study.scores),
        "power": power_table(runs, study.main, study.pilot_seeds, study.claims,
                             study.half_width_target) if study.pilot_seeds else [],
        "arms": arms_table(runs, baseline=None),
        **comparison_tables(study, runs),
        "core_tasks": core_tasks_table(runs, main_arms),
        "diagnostics": diagnostics_table(runs, main_arms),
        "diagnostics_effects": diagnostics_effects_table(runs, study.main, DIAG_EFFECT_KEYS),
        "throughput": throughput_table(tp),
        "runs": runs_table(runs),
        "compute": compute_table(runs),
        "gpu": gpu_table(results_dir) if study.name != "gpu" else [],
    }
    for name, rows in tables.items():
        write_table(rows, tables_dir, name)
    main_runs = [r for r in runs if r["arm"] in main_arms]
    figures = {
        "gap": fig_gap(gap_curves(runs, study.main), figures_dir, "gap"),  # the key figure
        "forest": fig_forest(forest_rows(study, runs), figures_dir, "forest",
                             "val bpb: effect relative to the reference arm (%), 95% CI over paired seeds"),
        "train_loss": fig_curves(main_runs, "train_loss", "train loss (nats)", figures_dir, "train_loss"),
        "val_bpb_curves": fig_curves(main_runs, "val_bpb", "val bpb", figures_dir, "val_bpb_curves"),
        "val_bpb_arms": fig_intervals(tables["arms"], "val_bpb", "val bpb", figures_dir, "val_bpb_arms"),
        "core_tasks": fig_core_tasks(tables["core_tasks"], figures_dir, "core_tasks"),
        "diagnostics": fig_diagnostics(tables["diagnostics"], DIAG_KEYS, figures_dir, "diagnostics"),
        "diagnostics_effects": fig_diag_effects(tables["diagnostics_effects"], DIAG_EFFECT_KEYS, figures_dir,
                                                "diagnostics_effects"),
        "throughput": fig_throughput(tables["throughput"], figures_dir, "throughput"),
    }
    for c in study.comparisons:
        if isinstance(c, Sweep):
            figures[c.name] = fig_sweep(tables[c.name], c.values(), SWEEP_LABELS.get(c.field, c.field),
                                        figures_dir, c.name)
    for name, path in figures.items():  # a figure with no records now: drop what an older build drew
        if path is None:
            for ext in ("png", "svg"):
                (figures_dir / f"{name}.{ext}").unlink(missing_ok=True)
    return dict(runs=runs, tables=tables, figures=figures, throughput=tp, gap=gap_curves(runs, study.main),
                left_out=leave_out)


def summary_text(study, built: dict) -> str:
    """The paper's statements of fact, each derived from the records (Markdown)."""
    runs = built["runs"]
    lines = [f"**Scale.** Every number of ours below is at {study.scale}. The seed paper's numbers are at "
             f"GPU scale (d12 and d24 on ClimbMix) and are labelled *theirs*; the two are not comparable "
             f"in absolute terms, only in the direction and relative size of the effect.",
             "",
             f"**Records.** {len(runs)} of the study's {len(study.runs)} runs have records "
             f"({finished(runs)} trained to their horizon, {sum(1 for r in runs if r['eval'])} evaluated, "
             f"{sum(1 for r in runs if r['diagnostics'])} with diagnostics){_left_out(built)}. Intervals are 95% Student-t "
             f"intervals over seeds; differences are paired by seed (both arms of a seed see the same data).",
             "", "**The seed paper's claims, judged from our records:**", ""]
    for c in built["tables"]["claims"]:
        lines.append(f"- {c['claim']} (theirs: {c['theirs']}). {c['statement']}: **{c['verdict']}**.")
    return "\n".join(lines) + "\n"


def _left_out(built: dict) -> str:
    left = built.get("left_out") or []
    return f"; left out by choice, so in no number below: {', '.join(left)}" if left else ""


# The columns each table shows in the paper (the CSV and Markdown files keep every column), and
# which hold fractions shown as percentages.
DISPLAY = {
    "setup": ["preset", "layers", "width", "heads", "seq_len", "vocab", "steps", "tokens", "tokens_per_param",
              "matrix_lr", "runs"],
    "main": ["source", "scale", "arm", "n", "val_bpb", "val_bpb_ci95", "val_bpb_rel", "core", "core_bpb", "core_bpb_rel"],
    "power": ["comparison", "pilot_n", "pilot_rel_sd", "seed_paper_effect_rel", "seeds_for_80pct_power", "n",
              "rel_sd", "rel_ci_half_width_first8", "rel_ci_half_width", "seeds_for_target"],
    "claims": ["claim", "theirs", "statement", "verdict"],
    "effects": ["comparison", "metric", "n", "d", "d_ci95", "rel", "rel_ci95"],
    "diagnostics_effects": ["comparison", "metric", "layer", "n", "baseline", "xsa", "d", "d_ci95", "direction"],
    "throughput": ["preset", "baseline_tok_per_s", "xsa_tok_per_s", "overhead", "overhead_ci95", "clock", "threads"],
    "runs": ["run", "seed", "steps", "val_bpb", "core_bpb", "wall_min", "cpu_min", "config_hash", "git_commit"],
}
PERCENT = {"val_bpb_rel", "core_bpb_rel", "rel", "rel_vs_base", "rel_ci95", "pilot_rel_sd", "seed_paper_effect_rel",
           "rel_sd", "rel_ci_half_width", "rel_ci_half_width_first8", "overhead", "overhead_ci95"}


def _percent(value):
    from xsa.report.stats import Interval
    if isinstance(value, Interval):
        return "n/a" if not value.defined else f"[{100 * value.lo:+.2f}%, {100 * value.hi:+.2f}%]"
    return value if not isinstance(value, float) else f"{100 * value:+.2f}%"


# a sweep's or an ablation's table (arms_table): the arms and their paired change in val bpb
DISPLAY_ARMS = ["arm", "n", "val_bpb", "val_bpb_ci95", "d_val_bpb_vs_base", "d_ci95", "rel_vs_base", "rel_ci95"]


def show_table(built: dict, name: str, **where):
    """A table of `build` as Markdown for the paper: its DISPLAY columns, fractions as percentages;
    `where` keeps the rows whose column (the keyword) is one of the values given."""
    from IPython.display import Markdown
    rows = [r for r in built["tables"][name] if all(r.get(k) in v for k, v in where.items())]
    default = DISPLAY_ARMS if rows and "d_ci95" in rows[0] else (list(rows[0]) if rows else [])
    cols = [c for c in DISPLAY.get(name, default) if rows and c in rows[0]]
    shown = [{c: (_percent(r[c]) if c in PERCENT and r[c] is not None else r[c]) for c in cols} for r in rows]
    return Markdown(to_markdown(shown))


def show_figure(built: dict, name: str):
    """A figure of `build` as an embedded PNG (or a note that its records are missing)."""
    from IPython.display import Image, Markdown
    path = built["figures"].get(name)
    return Image(filename=str(path)) if path else Markdown(f"_{name}: no records yet, so no figure._")
