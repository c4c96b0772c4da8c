"""
The figures the paper draws across studies, and the readings they need beyond the estimates files:

    paper_figures(results, estimates, tables, out)   # draws them all: {name: path or None}
    sink_rows(book)                                  # the sink study's effects per condition, once complete
    seed_effects(runs, base, xsa)                    # each seed's paired relative effect on val bpb
    learning_panel(runs, base, xsa)                  # both arms' val bpb curves and their paired gap
    study_compute(rows)                              # CPU hours per study, from the run table's rows

Every number drawn is a record's own or plain arithmetic on records (a difference, a mean, a t-interval in
Python floats), never a machine's last bits, so a figure is the same on any CPU (tests/test_figures_
reproducible.py). The optimizer study's figure is its registered analysis's own (xsa/studies/
optimizer_analysis.py), drawn here with the rest while its records land.
"""

from __future__ import annotations

from pathlib import Path

from xsa.studies.factorial.design import CELLS, RATES
from xsa.report.figures import fig_factorial, fig_forest, fig_heatmap, fig_learning, fig_paired
from xsa.checks.records import complete, load_runs, per_seed
from xsa.base.stats import Interval, mean_ci, relative_differences
from xsa.books.estimates import slug
from xsa.studies.sink import CONDITIONS as SINK_CONDITIONS
from xsa.studies import optimizer_analysis

# the learning curves: the robust study's primary (short) and the factorial's long cells at its higher rate
LONG_RATE = 0.08


def seed_effects(runs, base: str, xsa: str) -> dict[int, float]:
    """{seed: (XSA - baseline) / baseline} in final val bpb, over the seeds both arms finished."""
    return relative_differences(per_seed(runs, base, "val_bpb"), per_seed(runs, xsa, "val_bpb"))


def _by_step(runs, arm: str) -> dict[int, dict[int, float]]:
    """{step: {seed: val bpb}} of one arm's finished runs at every logged evaluation."""
    out: dict[int, dict[int, float]] = {}
    for r in runs:
        if r["arm"] == arm and complete(r):
            for m in r["metrics"] or []:
                if m.get("val_bpb") is not None:
                    out.setdefault(m["step"], {})[r["spec"].seed] = m["val_bpb"]
    return out


def _band(values) -> tuple | None:
    s = mean_ci(values)
    return (s["mean"], s["ci"].lo, s["ci"].hi) if s["ci"].defined else None


def learning_panel(runs, base: str, xsa: str, labels=("baseline", "XSA")) -> dict:
    """{"arms": {label: [(step, mean, lo, hi)]}, "gap": [(step, mean, lo, hi)], "n": pairs}: each arm's val bpb
    and XSA's paired relative gap at every step both arms logged for the same seeds (95% t-bands)."""
    a, b = _by_step(runs, base), _by_step(runs, xsa)
    steps = [s for s in sorted(a.keys() & b.keys()) if a[s].keys() == b[s].keys() and len(a[s]) > 1]
    arms = {label: [(s, *_band(side[s].values())) for s in steps] for label, side in zip(labels, (a, b))}
    gap = [(s, *_band(relative_differences(a[s], b[s]).values())) for s in steps]
    return dict(arms=arms, gap=gap, n=len(a[steps[-1]]) if steps else 0)


def _arms(ids) -> tuple[str, str]:
    """(baseline arm, XSA arm) of a pair's run ids (`<arm>_s<seed>`)."""
    arms = sorted({i.rsplit("_s", 1)[0] for i in ids})
    base = [x for x in arms if "_base" in x]
    xsa = [x for x in arms if "_xsa" in x]
    if len(base) != 1 or len(xsa) != 1:
        raise ValueError(f"not one baseline and one XSA arm: {arms}")
    return base[0], xsa[0]


def _learning(results: Path, primary) -> dict:
    """The learning-curve panels: the robust primary, then each long factorial cell at LONG_RATE."""
    panels = {}
    if primary is not None and primary.runs:
        runs = load_runs(results, list(primary.runs))
        p = learning_panel(runs, *_arms(primary.runs))
        panels[f"w64, 384 steps\ntuned (n = {p['n']})"] = p
    for c in CELLS:
        if "long" in c.name:
            pair = c.pair(LONG_RATE)
            ids = [arm.run(s).run_id for arm in pair.arms() for s in c.seeds]
            p = learning_panel(load_runs(results, ids), pair.a.name, pair.b.name)
            panels[f"{c.name.split()[0]}, 1,097 steps\nLR {LONG_RATE:g} (n = {p['n']})"] = p
    return panels


def study_compute(rows: list[dict]) -> list[dict]:
    """CPU and wall hours per study, from the run table's rows (each run counted once, under the study
    that lists it first; training plus evaluation CPU where recorded)."""
    out: dict[str, dict] = {}
    for r in rows:
        o = out.setdefault(r["study"], dict(study=r["study"], runs=0, cpu_hours=None, wall_hours=None))
        o["runs"] += 1
        for key, total in (("cpu_s", "cpu_hours"), ("eval_cpu_s", "cpu_hours"), ("wall_s", "wall_hours")):
            if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool):  # not "not recorded"
                o[total] = (o[total] or 0.0) + r[key] / 3600
    return list(out.values())


MECHANISM_LABELS = {"none": "XSA alone", "gate": "with the output gate", "sink": "with the learned sink"}


def sink_rows(book: dict) -> list[dict]:
    """XSA's effect (%) in each condition of the sink study, without and with each mechanism on both arms,
    from its book: none until its last record lands (its book holds no effect before)."""
    rows = []
    for c in SINK_CONDITIONS:
        for m in c.mechanisms:
            e = book.get(slug(f"xsa {c.name} {m}"))
            if e is not None and e.value is not None:
                rows.append(dict(label=f"{c.name}, {MECHANISM_LABELS[m]} (n = {e.n})", n=e.n, mean=100 * e.value,
                                 ci=Interval(*(None if x is None else 100 * x for x in (e.lo, e.hi))),
                                 primary=m == "none"))
    return rows


def paper_figures(results, estimates: dict, tables: dict, out_dir) -> dict:
    """Every cross-study figure of the paper under out_dir; a figure with no records maps to None."""
    results, robust, fx = Path(results), estimates.get("robust", {}), estimates.get("factorial", {})
    primary = robust.get("primary")
    effects = seed_effects(load_runs(results, list(primary.runs)), *_arms(primary.runs)) if primary else {}
    return {
        "paired": fig_paired(effects, primary, out_dir, "paired"),
        "learning": fig_learning(_learning(results, primary), out_dir, "learning"),
        "factorial": fig_factorial([c.name for c in CELLS], list(RATES), fx, out_dir, "factorial") if fx else None,
        "gates": fig_heatmap(tables.get("scale_gates") or [], out_dir, "gates", "learned XSA strength"),
        "optimizer_lr": optimizer_analysis.figure(results, out_dir, height=2.0, row=True),
        "sink": fig_forest(sink_rows(estimates.get("sink", {})), out_dir, "sink",
                           "val bpb change, XSA minus baseline (%), 95% CI over paired seeds"),
    }
