"""
Tables and figures of the paper, built from run records only (no model, no training).

    built = report.build(study, "results")      # writes results/tables and results/figures

Reads results/runs/<run_id>/{config,summary,eval,diagnostics,provenance}.json + metrics.jsonl and
results/throughput/<preset>.json; iterates the study's comparisons and claims (xsa/studies.py), so
the design of the study lives in one place. Everything is deterministic: the same records give the
same bytes.

- records: reading run folders back, per-seed values of an arm
- stats:   t-intervals, paired differences, contrasts (pure functions)
- tables:  the table builders and the one table writer
- figures: the figure builders and the one figure saver
- claims:  the seed paper's claims, judged
"""

from __future__ import annotations

from pathlib import Path

from xsa.report.claims import claims_table
from xsa.report.figures import (fig_core_tasks, fig_curves, fig_diagnostics, fig_intervals, fig_sweep,
                                fig_throughput)
from xsa.report.records import by_arm, load_run, load_runs, load_throughput, metric
from xsa.report.tables import (DIAG_KEYS, arms_table, core_tasks_table, diagnostics_table, effects_table, fmt,
                               gpu_table, main_table, runs_table, setup_table, throughput_table, to_markdown,
                               write_table)

__all__ = ["build", "summary_text", "show_table", "show_figure", "load_run", "load_runs", "metric",
           "to_markdown", "write_table", "fig_curves"]

SWEEP_LABELS = {"xsa_alpha": "XSA alpha (all layers)"}


def comparison_tables(study, runs) -> dict:
    """One table per entry of study.comparisons, under its name."""
    from xsa.studies import Contrast, Sweep, Versus
    tables = {}
    for c in study.comparisons:
        if isinstance(c, Sweep):
            tables[c.name] = arms_table(runs, [a.name for a in c.all_arms()], c.base.name)
        elif isinstance(c, Versus):
            tables[c.name] = arms_table(runs, [a.name for a in c.arms], c.base.name)
        elif isinstance(c, Contrast):
            tables[c.name] = effects_table(runs, [c.first, c.second], contrasted=c, metrics=c.metrics)
        else:
            raise TypeError(f"comparison {c.name!r}: unknown kind {type(c).__name__}")
    return tables


def build(study, results_dir, out_dir=None) -> dict:
    """Write every table and figure of a study's paper into OUT_DIR/tables and OUT_DIR/figures
    (default: results_dir); return the tables (rows) and figure paths."""
    from xsa.studies import Sweep
    results_dir = Path(results_dir)
    runs = load_runs(results_dir, [r.run_id for r in study.runs])
    tp = {p: t for p, t in load_throughput(results_dir).items() if p in study.presets()}
    out_dir = Path(out_dir) if out_dir else results_dir
    tables_dir, figures_dir = out_dir / "tables", out_dir / "figures"
    main_arms = [a.name for p in study.main for a in p.arms()]
    tables = {
        "setup": setup_table(study),
        "main": main_table(runs, study.main),
        "claims": claims_table(study, runs, tp),
        "arms": arms_table(runs, baseline=None),
        **comparison_tables(study, runs),
        "effects": effects_table(runs, study.main),
        "core_tasks": core_tasks_table(runs, main_arms),
        "diagnostics": diagnostics_table(runs, main_arms),
        "throughput": throughput_table(tp),
        "runs": runs_table(runs),
        "gpu": gpu_table(results_dir) if study.name != "gpu" else [],
    }
    for name, rows in tables.items():
        write_table(rows, tables_dir, name)
    main_runs = [r for r in runs if r["arm"] in main_arms]
    figures = {
        "train_loss": fig_curves(main_runs, "train_loss", "train loss (nats)", figures_dir, "train_loss"),
        "val_bpb_curves": fig_curves(main_runs, "val_bpb", "val bpb", figures_dir, "val_bpb_curves"),
        "val_bpb_arms": fig_intervals(tables["arms"], "val_bpb", "val bpb", figures_dir, "val_bpb_arms"),
        "core_tasks": fig_core_tasks(tables["core_tasks"], figures_dir, "core_tasks"),
        "diagnostics": fig_diagnostics(tables["diagnostics"], DIAG_KEYS, figures_dir, "diagnostics"),
        "throughput": fig_throughput(tables["throughput"], figures_dir, "throughput"),
    }
    for c in study.comparisons:
        if isinstance(c, Sweep):
            figures[c.name] = fig_sweep(tables[c.name], c.values(), SWEEP_LABELS.get(c.field, c.field),
                                        figures_dir, c.name)
    return dict(runs=runs, tables=tables, figures=figures, throughput=tp)


def summary_text(study, built: dict) -> str:
    """The paper's statements of fact, each derived from the records (Markdown)."""
    from xsa.studies import Contrast
    runs, n_eval = built["runs"], sum(1 for r in built["runs"] if r["eval"])
    lines = [f"**Scale.** Every number of ours below is at {study.scale}. The seed paper's numbers are at "
             f"GPU scale (d12 and d24 on ClimbMix) and are labelled *theirs*; the two are not comparable "
             f"in absolute terms, only in the direction of the effect.",
             "",
             f"**Records.** {len(runs)} of the study's {len(study.runs)} runs have records "
             f"({sum(1 for r in runs if r['summary'])} finished training, {n_eval} evaluated, "
             f"{sum(1 for r in runs if r['diagnostics'])} with diagnostics). Intervals are 95% Student-t "
             f"intervals over seeds; differences are paired by seed (both arms of a seed see the same data).",
             "", "**The seed paper's claims, judged from our records:**", ""]
    for c in built["tables"]["claims"]:
        lines.append(f"- {c['claim']} (theirs: {c['theirs']}). Ours, {c['ours']}: {fmt(c['estimate'])} "
                     f"(n={c['n']}, 95% CI {fmt(c['ci95'])}): **{c['verdict']}**.")
    for c in study.comparisons:
        rows = built["tables"].get(c.name) or []
        if not (isinstance(c, Contrast) and len(rows) == 3 and rows[2]["n_val_bpb"]):
            continue
        first, second, diff = rows
        differs = diff["d_val_bpb_ci95"].excludes(0.0)
        lines += ["", f"**Muon against AdamW.** XSA minus baseline in val bpb: {fmt(first['d_val_bpb'])} "
                  f"(n={first['n_val_bpb']}, 95% CI {fmt(first['d_val_bpb_ci95'])}) under Muon, "
                  f"{fmt(second['d_val_bpb'])} (n={second['n_val_bpb']}, 95% CI {fmt(second['d_val_bpb_ci95'])}) "
                  f"with AdamW only; the difference of the two effects, paired by seed, is {fmt(diff['d_val_bpb'])} "
                  f"(n={diff['n_val_bpb']}, 95% CI {fmt(diff['d_val_bpb_ci95'])}): "
                  + ("**the effect differs between the optimizers**." if differs else
                     "**no difference between the optimizers is detectable**.")]
    return "\n".join(lines) + "\n"


def show_table(built: dict, name: str):
    """A table of `build` as Markdown, for display in a notebook."""
    from IPython.display import Markdown
    return Markdown(to_markdown(built["tables"][name]))


def show_figure(built: dict, name: str):
    """A figure of `build` as an embedded PNG (or a note that its records are missing)."""
    from IPython.display import Image, Markdown
    path = built["figures"].get(name)
    return Image(filename=str(path)) if path else Markdown(f"_{name}: no records yet, so no figure._")
