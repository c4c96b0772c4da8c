"""
The scale study's estimates, as its pre-registration states them (results/scale/preregistration.md):
each level's effect, the model's slopes and its predictions for d12 and d24 (xsa/predict.py), the
secondary family with Holm's correction, the learned gate per layer and head, and the T = 512 level of
the robust study's sequence-length seeds. Every estimate says how many of its declared pairs have
records, so an interim report says so; a level whose rule has not declared it yet is "not run".

    est = scale_estimates(results)     # {key: estimate dict}, the keys below
    fig_scale(est, out_dir)            # results/figures/scale.{png,svg}
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from xsa.design import final_bpb
from xsa.predict import ANCHORS, TARGETS, Condition, condition, declared_seeds, fit, model_conditions
from xsa.records import read_json
from xsa.report.figures import FULL, new_figure, save_figure
from xsa.stats import holm, mean_ci, t_pvalue, _t_two_sided
from xsa.studies import get_study
from xsa.study_scale import SECONDARY

LEVELS = ("length x1/3", "length x1", "length x2", "length x4", "heads 1", "heads 2", "heads 4", "heads 8",
          "gate at width 64", "gate at 8 heads", "width 256, 128 steps", "width 256, 384 steps")
SLOPES = {1: "slope per doubling of heads", 2: "slope per doubling of tokens per parameter",
          3: "slope per doubling of sequence length"}
SEQ_SEEDS = range(100, 106)  # the robust study's sequence-length seeds


def _estimate(name: str, c: Condition, declared: int, **more) -> dict:
    st = mean_ci(c.diffs)
    ci = st["ci"]
    return dict(key=name, value=st["mean"], lo=ci.lo, hi=ci.hi, n=c.n, declared=declared,
                p=t_pvalue(st["mean"], st["sd"], c.n), heads=c.heads, tokens_per_param=c.tokens_per_param,
                seq_len=c.seq_len, status=("complete" if c.n and c.n >= declared else
                                           f"interim {c.n}/{declared}" if c.n else "not run"), **more)


def level_estimates(results: Path, study) -> dict:
    """Each level's relative effect on final val bpb (b minus a, per pair), with its interval."""
    out = {}
    for name in LEVELS:
        try:
            pair = study.comparison(name)
        except KeyError:
            out[name] = dict(key=name, value=None, lo=None, hi=None, n=0, declared=0, p=None,
                             status="not run (its learning-rate bracket has not selected yet)")
            continue
        seeds = declared_seeds(study, pair)
        out[name] = _estimate(name, condition(results, pair, seeds), len(seeds), arms=[pair.a.name, pair.b.name])
    return out


def seq_len_levels(results: Path) -> dict:
    """T = 256, 512 and 1024 on the robust study's seeds 100-105 (T = 512 is its primary's arms)."""
    robust = get_study("robust", results)
    pairs = {256: robust.comparison("cpu-w64-d4 tuned T=256"), 512: robust.comparison(robust.primary),
             1024: robust.comparison("cpu-w64-d4 tuned T=1024")}
    return {f"T={t}": _estimate(f"T={t}", condition(results, p, SEQ_SEEDS), len(SEQ_SEEDS)) for t, p in pairs.items()}


def model_estimates(results: Path, sensitivity: bool = False) -> dict:
    """The fit's slopes (with model t p-values), tau, sigma, and the predictions; {} before it can fit."""
    f = fit(model_conditions(results, sensitivity))
    if f is None:
        return {}
    tag = "sensitivity " if sensitivity else ""
    out = {f"{tag}fit": {"key": f"{tag}fit", "conditions": [c.name for c in f.conditions], "df": f.df,
                    "tau": math.sqrt(f.tau2), "sigma": math.sqrt(f.sigma2), "beta": [float(b) for b in f.beta]}}
    for axis, name in SLOPES.items():
        est, lo, hi = f.slope(axis)
        t = abs(est) / math.sqrt(f.cov[axis, axis]) if f.cov[axis, axis] > 0 else float("inf")
        out[tag + name] = dict(key=tag + name, value=est, lo=lo, hi=hi, df=f.df, p=1.0 - _t_two_sided(t, f.df))
    for target, where in TARGETS.items():
        mu, lo, hi = f.predict(**where)
        out[f"{tag}prediction {target}"] = dict(key=f"{tag}prediction {target}", value=mu, lo=lo, hi=hi, **where)
    return out


def gate_map(results: Path, study) -> list[dict]:
    """The learned XSA strength per layer and head of every gate arm: mean and 95% interval over seeds,
    read from each run's summary (learned_gates)."""
    rows = []
    for name in ("gate at width 64", "gate at 8 heads"):
        try:
            pair = study.comparison(name)
        except KeyError:
            continue
        gates = []
        for s in sorted(declared_seeds(study, pair)):
            path = results / "runs" / pair.b.run(s).run_id / "summary.json"
            if path.exists() and (g := read_json(path).get("learned_gates")):
                gates.append(g)
        for layer in range(len(gates[0]) if gates else 0):
            for head in range(len(gates[0][layer] or [])):
                st = mean_ci(g[layer][head] for g in gates)
                rows.append(dict(level=name, layer=layer, head=head, n=st["n"], value=st["mean"],
                                 lo=st["ci"].lo, hi=st["ci"].hi))
    return rows


def _diffs(results: Path, pair, seeds) -> dict[int, float]:
    """{seed: relative difference} where both runs of the seed have finished records."""
    out = {}
    for s in seeds:
        a, b = final_bpb(results, pair.a.run(s)), final_bpb(results, pair.b.run(s))
        if a is not None and b is not None:
            out[s] = (b - a) / a
    return out


def _contrast(results: Path, study, name: str) -> dict:
    """(second's effect) minus (first's), per seed: does the short run change XSA's effect?"""
    c = study.comparison(name)
    seeds = declared_seeds(study, c.first) & declared_seeds(study, c.second)
    first, second = _diffs(results, c.first, seeds), _diffs(results, c.second, seeds)
    both = sorted(first.keys() & second.keys())
    cfg = c.second.b.config()
    return _estimate(name, Condition(name, cfg.model.n_head, float("nan"), cfg.model.sequence_len,
                                     tuple(second[s] - first[s] for s in both)), len(seeds))


def scale_estimates(results: Path) -> dict:
    """Every estimate of the scale study, keyed; the secondary family with Holm's correction."""
    results = Path(results)
    study = get_study("scale", results)
    est = {**level_estimates(results, study), **seq_len_levels(results), **model_estimates(results),
           **model_estimates(results, sensitivity=True)}
    est["width 256, length"] = _contrast(results, study, "width 256, length")
    family = [est.get(name, {}).get("p") for name in SECONDARY]
    for name, adjusted in zip(SECONDARY, holm(family)):
        if name in est:
            est[name]["p_holm"] = adjusted
    est["anchors"] = [dict(source=s, what=w, value=v) for s, w, v in ANCHORS]
    est["gate map"] = gate_map(results, study)
    return est


def _axis(ax, est, names, x_of, fit, fixed, xlabel, seed_effect, xlim):
    """One panel: the levels with their intervals, the fitted line along one axis (the others fixed),
    the seed paper's d12 effect as a dashed line."""
    for name in names:
        e = est.get(name) or {}
        if e.get("value") is not None:
            err = None if e["lo"] is None else [[e["value"] - e["lo"]], [e["hi"] - e["value"]]]
            ax.errorbar(x_of(e), 100 * e["value"], yerr=None if err is None else 100 * np.array(err), fmt="o",
                        color="C0", ms=4.5, capsize=2.5, lw=1.1)
    if fit:
        xs = np.geomspace(*xlim)
        b = fit["beta"]
        ys = [b[0] + b[1] * math.log2(fixed(x)[0]) + b[2] * math.log2(fixed(x)[1]) for x in xs]
        ax.plot(xs, 100 * np.array(ys), color="C0", lw=0.9, alpha=0.6, label="model (other axes fixed)")
    ax.axhline(100 * seed_effect, color="C3", ls="--", lw=0.9, label="seed paper, d12 (one run)")
    ax.axhline(0, color="0.5", lw=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xlim(*xlim)
    ax.set_xlabel(xlabel)


def fig_scale(est: dict, out_dir, seed_effect: float, name: str = "scale"):
    """XSA's effect against tokens per parameter (one head of 64) and against heads (width 128), each
    level with its 95% interval, the model along that axis, and the d12 and d24 predictions with their
    95% prediction intervals at their own head counts."""
    fig, axes = new_figure(ncols=2, figsize=(FULL, 3.0), sharey=True)
    left, right = axes[0]
    fit = est.get("fit")
    _axis(left, est, [n for n in LEVELS if n.startswith("length")], lambda e: e["tokens_per_param"], fit,
          lambda x: (1, x), "tokens per scaling parameter (1 head of 64, T = 512)", seed_effect, (0.7, 20))
    _axis(right, est, [n for n in LEVELS if n.startswith("heads")], lambda e: e["heads"], fit,
          lambda x: (x, 1.2), "heads at width 128 (T = 512)", seed_effect, (0.7, 20))
    for target, marker in (("d12", "D"), ("d24", "s")):
        p = est.get(f"prediction {target}")
        if p:
            right.errorbar(p["heads"], 100 * p["value"], yerr=[[100 * (p["value"] - p["lo"])], [100 * (p["hi"] - p["value"])]],
                           fmt=marker, color="C1", ms=4.5, capsize=2.5, lw=1.1,
                           label=f"prediction, {target} ({p['tokens_per_param']:g} tok/param, T = {p['seq_len']})")
    left.set_ylabel("XSA's change in final val bpb (%)")
    handles, labels = right.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, frameon=False)
    return save_figure(fig, out_dir, name)
