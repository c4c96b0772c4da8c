"""
Every effect a table or a figure shows, computed once from the run records as estimates
(xsa/books/estimates.py) under the keys `key` names, and written with the study's other estimates
to results/estimates/<study>.json. The tables and figures read these estimates back by the same
keys and compute no effect themselves, so a number in a table, in a figure and in the text has one
source.

    shown = shown_effects(study, runs, every)              # {key: Estimate}
    shown[key("cpu-w64-d4", "val_bpb")]                    # relative, paired by seed
    shown[key("cpu-w64-d4", "val_bpb", absolute=True)]     # the same in bits per byte

A metric judged relative (xsa/checks/metrics.py) gets two estimates, relative and absolute; any other
metric one, in its own unit. `on` names the seeds when they are not all the paired ones: `pilot`,
`first8`, `common` (the seeds every arm of a comparison has), `every` (the selection seeds too).
"""

from __future__ import annotations

from xsa.checks import metrics as M
from xsa.books.estimates import contrasted, fact, from_values, paired, slug
from xsa.checks.records import complete, curve, per_seed
from xsa.base.records import DIAGNOSTIC_METRICS
from xsa.base.stats import relative_differences
from xsa.studies.registry import Contrast, Paired, Sweep, Versus

# the seeds the default study's precision rule looks at first, and that the power table reports
FIRST8 = frozenset(range(8))
DIAG_KEYS = DIAGNOSTIC_METRICS
# the paired effects leave out cos(z, v): zero by construction under XSA, it is a check of the
# projection (validation), and "XSA minus baseline" of it would only restate the baseline's cos(y, v)
DIAG_EFFECT_KEYS = tuple(k for k in DIAG_KEYS if k != "cos_z_v")


def key(name: str, metric: str = "val_bpb", *, absolute: bool = False, on: str = "") -> str:
    """The estimate key of comparison `name`'s effect on `metric` (relative where the metric is judged
    relative, else absolute; `absolute` asks for the absolute one of a relative metric)."""
    return "_".join(x for x in ("fx", slug(name), slug(metric), on, "abs" if absolute else "") if x)


def _pair(est: dict, name: str, runs, a, b, metric: str = "val_bpb", seeds=None, on: str = "") -> None:
    """b minus a in `metric`, paired by seed: in the metric's own unit, and absolute beside a relative one."""
    k = key(name, metric, on=on)
    est[k] = paired(k, runs, a, b, metric, seeds, family="descriptive")
    if M.relative(metric):
        k = key(name, metric, absolute=True, on=on)
        est[k] = paired(k, runs, a, b, metric, seeds, family="descriptive", absolute=True)


def _contrast(est: dict, name: str, runs, c, metric: str) -> None:
    k = key(name, metric)
    est[k] = contrasted(k, runs, c, metric, family="descriptive")
    if M.relative(metric):
        k = key(name, metric, absolute=True)
        est[k] = contrasted(k, runs, c, metric, family="descriptive", absolute=True)


def contrast_name(c) -> str:
    return f"({c.second.name}) minus ({c.first.name})"


def effect_pairs(study) -> list:
    """Every Paired effect a study reports: its main pairs, its Paired comparisons, and the pairs its
    contrasts contrast."""
    contrasts = [c for c in study.comparisons if isinstance(c, Contrast)]
    return list(dict.fromkeys([*study.main, *(c for c in study.comparisons if isinstance(c, Paired)),
                               *(c.second for c in contrasts)]))


def common_seeds(runs, arms) -> set:
    """The seeds every one of `arms` has a finished run of."""
    sets = [set(per_seed(runs, a, "val_bpb")) for a in arms]
    return set.intersection(*sets) if sets else set()


def versus_name(c, a) -> str:
    """An arm of a Versus or Sweep against its base, as the tables and figures name it."""
    return f"{c.name} {a.name}"


def shown_effects(study, runs, every) -> dict:
    """Every effect the study's tables and figures show: `runs` are the estimating runs, `every`
    adds the selection seeds (the comparison tables and the learning-rate check show those)."""
    est = {}
    for p in effect_pairs(study):
        for metric in M.effect_metrics():
            if not metric.startswith("core") or all(map(study.scores, p.arms())):
                _pair(est, p.name, runs, p.a, p.b, metric)
    for c in study.comparisons:
        if isinstance(c, Contrast):
            for metric in M.effect_metrics():
                if not metric.startswith("core") or all(map(study.scores, [*c.first.arms(), *c.second.arms()])):
                    _contrast(est, contrast_name(c), runs, c, metric)
    for p in study.main:  # per CORE task, per layer and metric of the diagnostics, and on the first and pilot seeds
        for t in sorted({t for r in runs if r["arm"] in (p.a.name, p.b.name) for t in (r["eval"] or {}).get("tasks") or {}}):
            _pair(est, p.name, runs, p.a, p.b, f"task_bpb:{t}")
        layers = max((len((r["diagnostics"] or {}).get("layers") or []) for r in runs if r["arm"] == p.a.name),
                     default=0)
        for k in DIAG_EFFECT_KEYS:
            for i in range(layers):
                _pair(est, p.name, runs, p.a, p.b, f"diag:{k}:{i}")
        _pair(est, p.name, runs, p.a, p.b, "val_bpb", FIRST8, "first8")
        if study.pilot_seeds:
            _pair(est, p.name, runs, p.a, p.b, "val_bpb", set(study.pilot_seeds), "pilot")
    est.update(_versus(study, runs, every))
    est.update(gap_estimates(runs, study.main))
    return est


def _versus(study, runs, every) -> dict:
    """The comparison tables' effects on every run: each arm of a Versus or Sweep against its base (a
    sweep on the seeds all its arms have), a Paired comparison's b against its a; the forest figure's,
    on the estimating runs and the seeds every arm has (the LR sweeps have their own figure); and the
    learning-rate check against its preset's recipe-rate baseline on the seeds every arm of it has."""
    est = {}
    for c in study.comparisons:
        if isinstance(c, Paired):
            _pair(est, c.name, every, c.a, c.b, on="every")
        if not isinstance(c, Versus):
            continue
        names = [a.name for a in c.arms()]
        seeds = common_seeds(every, names) if isinstance(c, Sweep) else None
        for a in c.arms():
            _pair(est, versus_name(c, a), every, c.base, a, seeds=seeds, on="every")
        if not (isinstance(c, Sweep) and c.field == "matrix_lr"):
            seeds = common_seeds(runs, names)
            for a in c.others:
                if a != c.base:
                    _pair(est, versus_name(c, a), runs, c.base, a, seeds=seeds)
    for preset, checks in lr_checks(study).items():
        arms = [a for c in checks for a in c.arms()]
        seeds, ref = common_seeds(every, [a.name for a in arms]), checks[0].base
        for a in arms:
            _pair(est, f"lr {preset} {a.name}", every, ref, a, seeds=seeds)
    return est


def lr_checks(study) -> dict:
    """{preset: its learning-rate sweeps, the baseline's first}."""
    sweeps = [c for c in study.comparisons if isinstance(c, Sweep) and c.field == "matrix_lr"]
    return {preset: sorted((c for c in sweeps if c.base.preset == preset), key=lambda c: c.base.get("xsa_alpha"))
            for preset in dict.fromkeys(c.base.preset for c in sweeps)}


def gap_estimates(runs, pairs) -> dict:
    """XSA minus baseline in val bpb during training, relative to each seed's baseline, paired by seed, at
    each evaluation after step 0 (both arms are the same model there): `gap_<pair>_<tokens>`, and the
    paired seeds under `gap_<pair>`."""
    est = {}
    for p in pairs:
        by_seed = {arm: {r["spec"].seed: curve(r) for r in runs if r["arm"] == arm.name and complete(r)}
                   for arm in (p.a, p.b)}
        seeds = sorted(by_seed[p.a].keys() & by_seed[p.b].keys())
        series = {}
        for seed in seeds:
            for t, d in relative_differences(by_seed[p.a][seed], by_seed[p.b][seed]).items():
                series.setdefault(t, []).append(d)
        est[gap_key(p.name)] = fact(gap_key(p.name), len(seeds), "seeds", f"{p.name}: the paired seeds of the "
                                    "training-curve gap", "descriptive")
        for t in sorted(t for t in series if t > 0):
            k = gap_key(p.name, t)
            est[k] = from_values(k, series[t], unit="relative", metric="val_bpb", family="descriptive",
                                 definition=f"{p.name}: XSA minus baseline in val bpb after {t} training tokens, "
                                            "relative to each seed's baseline, over the paired seeds logged there")
    return est


def gap_key(pair: str, tokens: int | None = None) -> str:
    return f"gap_{slug(pair)}" + ("" if tokens is None else f"_{tokens}")


def gap_curves(est: dict, pairs) -> dict:
    """{'<pair> (n = k)': {tokens: Estimate}} of the gap estimates, for fig_gap."""
    out = {}
    for p in pairs:
        prefix = gap_key(p.name) + "_"
        out[f"{p.name} (n = {est[gap_key(p.name)].value})"] = {
            int(k[len(prefix):]): e for k, e in est.items() if k.startswith(prefix) and k[len(prefix):].isdigit()}
    return out
