"""
Each study's declared estimates (xsa/books/estimates.py computes them; the studies are data in
xsa/studies/registry.py): every comparison of a study under a key, the pre-registered families with Holm's
correction where the pre-registration states it, and the facts the text states (selected learning
rates, parameter counts, tokens per parameter, cost).

    study_estimates(study, runs, every, tp)              # any study: its comparisons and claims
    robust_estimates(robust, estimating, selecting)      # the robust study's primary and secondary family
    archive_estimates(study, results_dir)                # the earlier study's rows, from its archive
"""

from __future__ import annotations

from pathlib import Path

from xsa.archive import ARCHIVE
from xsa.stack.config import scaling_params
from xsa.stack.presets import make_config
from xsa.checks import metrics as M
from xsa.books.archive import archived_runs, condition as archived_condition
from xsa.books.estimates import (Estimate, contrasted, fact, from_values, not_run, paired, slope, slug, with_holm)
from xsa.books.paper_estimates import grid_counts, group_moves, seeds_ahead
from xsa.checks.records import per_seed
from xsa.books.verdicts import registered
from xsa.base.stats import Interval, differences, relative_differences
from xsa.studies.registry import PRECISION, Contrast, Paired, Sweep, Versus, seed_paper_effect

# the seeds the default study's primary comparison was planned with; seeds from 8 on were added by a
# precision rule stated after an interim look (post hoc)
PLANNED_SEEDS = frozenset(range(8))
# the seed paper's d12 effect on val bpb (relative), set beside the robust study's conditions at that depth
D12 = seed_paper_effect("d12")
# the robust study's secondary family (its pre-registration), by comparison name -> key
ROBUST_KEYS = {"cpu-w128-d4 tuned": "two_heads", "heads": "heads", "cpu-w64-d4 tuned T=256": "t256",
               "cpu-w64-d4 tuned T=1024": "t1024", "sequence-length slope": "slope",
               "last half vs baseline": "last_half", "last half vs all layers": "last_vs_all"}


def _setup(study) -> dict:
    """Per preset: non-embedding parameters, nanochat-unit parameters, and tokens per parameter."""
    out = {}
    for p in study.presets():
        c = make_config(p)
        m = c.model
        s = slug(p)
        out[f"{s}_params"] = fact(f"{s}_params", scaling_params(m), "parameters",
                                  f"{p}: block matrices and lm head (nanochat's scaling unit)")
        out[f"{s}_tokens_per_param"] = fact(f"{s}_tokens_per_param", c.num_tokens / scaling_params(m),
                                            "tokens per parameter", f"{p}: training tokens per block-matrix-and-head "
                                            "parameter (nanochat's unit, its 10-12 at d12)")
        out[f"{s}_tokens"] = fact(f"{s}_tokens", c.num_tokens, "tokens", f"{p}: training tokens at its own context")
        out[f"{s}_heads"] = fact(f"{s}_heads", m.n_head, "heads", f"{p}: attention heads of {m.n_embd // m.n_head}")
    return out


def cost(key, every) -> Estimate:
    """CPU hours of every run of a study: training, CORE and diagnostics, from the records."""
    secs = 0.0
    for r in sorted(every, key=lambda r: r["id"]):  # one order, whichever study's build lists them
        for rec in (r["summary"], ((r["eval"] or {}).get("core_detail") or {}).get("provenance"),
                    (r["diagnostics"] or {}).get("provenance")):
            secs += (rec or {}).get("cpu_time_s") or 0.0
    return fact(key, secs / 3600, "CPU hours", "process CPU time of every run of the study (training, CORE, "
                "diagnostics), from summary.json and the evaluation records", "cost", sorted(r["id"] for r in every))


def study_estimates(study, runs, every, tp) -> dict:
    """Every comparison of a study on every metric it scores, its claims, its overhead, its setup and cost.
    The primary comparison is `primary` (on its planned seeds where a precision rule added more, which are
    `primary_all`); each other comparison is keyed by its name (estimates.slug)."""
    est = {}
    planned = set(PLANNED_SEEDS) if study.half_width_target and study.pilot_seeds else None
    for p in study.main:
        primary = p.name == study.primary
        key = "primary" if primary else slug(p.name)
        seeds = planned if primary else None
        for metric in M.effect_metrics():
            if metric.startswith("core") and not all(map(study.scores, p.arms())):
                continue
            k = key if metric == "val_bpb" else f"{key}_{metric}"
            est[k] = paired(k, runs, p.a, p.b, metric, seeds, "primary" if primary else "secondary",
                            seed_paper=study.seed_effect(p.name) if metric == "val_bpb" else None)
        if primary and planned is not None:
            est["primary_all"] = paired("primary_all", runs, p.a, p.b, family="post hoc",
                                        seed_paper=study.seed_effect(p.name))
    for c in study.comparisons:
        if isinstance(c, Contrast):
            est[slug(c.name)] = contrasted(slug(c.name), runs, c, family="secondary")
            if c.second not in study.main:
                est[slug(c.second.name)] = paired(slug(c.second.name), runs, c.second.a, c.second.b, family="secondary")
        elif isinstance(c, Paired):
            est[slug(c.name)] = paired(slug(c.name), runs, c.a, c.b, family="secondary")
        elif isinstance(c, Versus):
            for a in c.others:
                if a != c.base:
                    k = slug(f"{c.name} {a.get(c.field):g}" if isinstance(c, Sweep) else f"{c.name} {a.name}")
                    est[k] = paired(k, runs, c.base, a, family="descriptive")
    est.update(lr_check(study, runs))
    est.update(overheads(study, tp))
    est.update(_setup(study))
    est["cost"] = cost("cost", every)
    est["final"] = registered(study.final)
    return est


def lr_check(study, runs) -> dict:
    """The recipe-LR study's learning-rate check, per preset: XSA minus baseline at each LR of its grid
    (one seed), and the LR at which the baseline does best."""
    sweeps = [c for c in study.comparisons if isinstance(c, Sweep) and c.field == "matrix_lr"]
    est = {}
    for preset in dict.fromkeys(c.base.preset for c in sweeps):
        base, xsa = (next(c for c in sweeps if c.base.preset == preset and bool(c.base.get("xsa_alpha")) is x)
                     for x in (False, True))
        grid = sorted(a.get("matrix_lr") for a in base.arms())
        k = slug(f"lr check {preset} recipe")
        est[k] = fact(k, base.base.get("matrix_lr"), "matrix LR", f"{preset}: the recipe's matrix LR")
        at = {lr: (base.base.with_(matrix_lr=lr), xsa.base.with_(matrix_lr=lr)) for lr in grid}
        for lr, (a, b) in at.items():
            k = slug(f"lr check {preset} {lr:g}")
            est[k] = paired(k, runs, a, b, family="descriptive")
        means = {lr: mean for lr, mean in ((lr, _mean(runs, a)) for lr, (a, _) in at.items()) if mean is not None}
        if means:
            best = min(means, key=means.get)
            k = slug(f"lr check {preset} base best")
            est[k] = fact(k, best, "matrix LR", f"{preset}: the matrix LR of the grid {grid} at which the baseline's "
                          "final val bpb is lowest (one seed)", "descriptive")
    return est


def _mean(runs, arm):
    vals = [v for v in per_seed(runs, arm, "val_bpb").values() if v is not None]
    return sum(vals) / len(vals) if vals else None


def overheads(study, tp) -> dict:
    """XSA's step-time overhead per preset of the throughput records (a ratio minus 1)."""
    est = {}
    for preset, t in tp.items():
        ratio, ci, clock = overhead(t)
        n = len((t.get("arms") or {}).get("baseline", {}).get("step_times_s") or [])
        k = slug(f"overhead {preset}")
        est[k] = Estimate(k, ratio, ci.lo, ci.hi, n, unit="relative", metric="step time", family="secondary",
                          definition=f"{preset}: median step {clock} of XSA over the baseline's, minus 1, ABBA in "
                                     "one process; bootstrap 95% interval over step pairs")
    return est


def robust_estimates(robust, estimating, selecting, seed_effect=D12) -> dict:
    """The robust study: its primary endpoint, its secondary family (Holm over the family, a member not
    run counting as p = 1), the LRs its rules selected, the grid's cells, the diagonal mass by heads."""
    est = {}
    try:
        p = robust.comparison(robust.primary)
    except KeyError:
        return {"primary": not_run("primary", "LR selection pending", "primary"), "final": registered(robust.final)}
    est["primary"] = paired("primary", estimating, p.a, p.b, family="primary", seed_paper=seed_effect)
    base, xsa = per_seed(estimating, p.a, "val_bpb"), per_seed(estimating, p.b, "val_bpb")
    est["primary_abs"] = from_values(  # the same effect in the metric's own unit, beside the relative one
        "primary_abs", differences(base, xsa).values(), unit="absolute", metric="val_bpb", family="descriptive",
        definition="the primary endpoint in bits per byte: XSA minus baseline, paired by seed")
    first = set(range(PRECISION.start, PRECISION.start + PRECISION.first))
    est["primary_first"] = paired("primary_first", estimating, p.a, p.b, seeds=first, family="primary",
                                  seed_paper=seed_effect)
    for name in robust.secondary:
        k = ROBUST_KEYS[name]
        try:
            if k == "slope":
                pairs = [robust.comparison(f"{p.name} T={t}") if t != 512 else p for t in (256, 512, 1024)]
                est[k] = slope(k, estimating, pairs)
                continue
            c = robust.comparison(name)
        except KeyError:
            est[k] = not_run(k, "LR selection pending")
            continue
        est[k] = (contrasted(k, estimating, c, family="secondary") if isinstance(c, Contrast)
                  else paired(k, estimating, c.a, c.b, family="secondary",
                              seed_paper=seed_effect if c.a.get("xsa_alpha") in (0, None) else None))
    with_holm(est, [ROBUST_KEYS[n] for n in robust.secondary])
    for pair in robust.main:
        who = "" if pair.name == robust.primary else "_" + slug(pair.a.preset)
        for arm, label in ((pair.a, "base"), (pair.b, "xsa")):
            k = f"lr{who}_{label}"
            est[k] = fact(k, arm.get("matrix_lr"), "matrix LR", f"{arm.preset}: the {label} arm's matrix LR selected "
                          "by the pre-registered rule (lowest mean final val bpb over the selection seeds)")
    est.update(grid_cells(robust, selecting))
    est.update(grid_counts(robust, selecting))  # every preset's grids (xsa/books/paper_estimates.py)
    est.update(group_moves(robust, selecting))  # the AdamW-group check, where its runs are recorded
    est.update(seeds_ahead("primary_seeds_ahead", estimating, robust.comparison(robust.primary)))  # seed by seed
    est["precision_half_width"] = fact("precision_half_width", robust.half_width_target, "relative",
                                       "the precision rule's target: the primary interval's half-width")
    for name in ("first", "block", "most"):
        est[f"precision_{name}"] = fact(f"precision_{name}", getattr(PRECISION, name), "pairs",
                                        f"the precision rule's {name} (pairs)")
    for c in (*robust.main, *(c for c in robust.comparisons if isinstance(c, Contrast))):
        k = "diag_heads" if isinstance(c, Contrast) else f"diag_{slug(c.a.preset)}"
        est[k] = (contrasted(k, estimating, c, "log:diag_mass", "descriptive") if isinstance(c, Contrast)
                  else paired(k, estimating, c.a, c.b, "log:diag_mass", family="descriptive"))
    est.update(_setup(robust))
    est["cost"] = cost("cost", [*estimating, *selecting])
    est["final"] = registered(robust.final)
    return est


def grid_cells(robust, selecting) -> dict:
    """The primary preset's LR grids as seed x LR cells: in how many XSA's final val bpb is below the
    baseline's, and XSA minus baseline at each LR over the selection seeds (descriptive)."""
    p = robust.comparison(robust.primary)
    grids = {bool(c.base.get("xsa_alpha")): c for c in robust.comparisons
             if isinstance(c, Sweep) and c.field == "matrix_lr" and c.base.preset == p.a.preset}
    if len(grids) != 2:
        return {}
    est, ahead, cells, ids = {}, 0, 0, []
    for lr in sorted(set(grids[False].values()) & set(grids[True].values())):
        a, b = grids[False].base.with_(matrix_lr=lr), grids[True].base.with_(matrix_lr=lr)
        k = slug(f"grid {lr:g}")
        est[k] = paired(k, selecting, a, b, family="descriptive")
        pa, pb = per_seed(selecting, a, "val_bpb"), per_seed(selecting, b, "val_bpb")
        for s in pa.keys() & pb.keys():
            cells += 1
            ahead += pb[s] < pa[s]
        ids += est[k].runs
    est["grid_lo"], est["grid_hi"] = (fact(f"grid_{end}", lr, "matrix LR", f"the {end} of the primary preset's LR grid")
                                      for end, lr in (("lo", min(grids[False].values())),
                                                      ("hi", max(grids[False].values()))))
    est["grid_cells"] = fact("grid_cells", cells, "cells", f"{p.a.preset}: seed x matrix-LR cells of the selection "
                             "grids with both arms", "descriptive", ids)
    est["grid_cells_ahead"] = fact("grid_cells_ahead", ahead, "cells", f"{p.a.preset}: of those cells, how many "
                                   "have XSA's final val bpb below the baseline's", "descriptive", ids)
    return est


def archive_estimates(study, results_dir) -> dict:
    """The earlier study's XSA pairs, from its archived records (relative, paired by seed): one key a pair,
    e.g. `c30bc3ae_cpu_d4`; an archive not restored gives one estimate saying how to restore it."""
    est = {}
    for a in study.archived:
        runs = archived_runs(Path(results_dir) / ARCHIVE / a.commit)
        if not runs:
            k = f"c{a.commit}"
            est[k] = Estimate(k, None, family="archived", reason=f"not restored: python -m xsa.archive --commit {a.commit}")
            continue
        for base, xsa in a.pairs:
            k = f"c{a.commit}_{slug(base.replace('_base', ''))}"
            va = {s: r["summary"]["val_bpb"] for s, r in runs.get(base, {}).items()}
            vb = {s: r["summary"]["val_bpb"] for s, r in runs.get(xsa, {}).items()}
            d = relative_differences(va, vb)
            cfg = next(iter(runs[xsa].values()))["config"]
            est[f"{k}_tokens_per_param"] = fact(f"{k}_tokens_per_param", archived_condition(cfg)[1]["tokens_per_param"],
                                                "tokens per parameter", f"{xsa}: nanochat's unit", "archived")
            est[f"{k}_heads"] = fact(f"{k}_heads", cfg["model"]["n_head"], "heads", f"{xsa}: attention heads",
                                     "archived")
            est[k] = from_values(k, d.values(), unit="relative", metric="val_bpb", family="archived",
                                 definition=f"val bpb: {xsa} minus {base} relative to each seed's baseline, paired by "
                                            f"seed, records of commit {a.commit} (the stack of that time)",
                                 runs=[f"{a.commit}/{arm}_s{s}" for s in sorted(d) for arm in (base, xsa)])
    return est


def overhead(t: dict) -> tuple:
    """XSA's step-time overhead of a throughput record: (ratio, Interval, clock). On CPU by process
    CPU time, which the other programs sharing the cores do not bend; on GPU by wall time."""
    if t.get("cpu_time_overhead_ratio") is not None:
        lo, hi = t.get("cpu_time_overhead_ci95") or [None, None]
        return t["cpu_time_overhead_ratio"], Interval(lo, hi), "CPU time"
    lo, hi = t.get("overhead_ci95") or [None, None]
    return t.get("overhead_ratio"), Interval(lo, hi), "wall time"
