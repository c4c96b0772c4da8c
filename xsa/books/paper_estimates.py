"""
Estimates the paper's text states beyond each study's registered ones, computed from the records where
the text needs them, so that no count or interval is typed into the prose:

    grid_counts(robust, selecting)   # every preset's LR-selection grids: cells where XSA is ahead
    group_moves(robust, selecting)   # the AdamW-group check: where the best matrix LR moved
    factorial_extra(results)         # the factorial study's post hoc and descriptive readings
    later_books(results)             # the factorial's book with them, and the sink and optimizer studies' progress
    seeds_ahead(key, runs, pair)     # the seeds on which XSA ends lower
    unlisted_runs(results, rows)     # the run table's rows for run folders no study's table lists

The factorial's extras are each labelled in their definition: the width x length interaction (post hoc),
the margin by which its registered criterion chose, how often a resample of its seeds chooses the same,
what it chooses without the scale study's x4 level, and the power its two axis contrasts had for the
differences each account predicts.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy import stats as sps

from xsa.studies.factorial import analysis as A
from xsa.studies.factorial import models as FM
from xsa.studies.factorial.design import CELLS
from xsa.books.estimates import Estimate, fact, slug
from xsa.books.factorial import factorial_book
from xsa.checks.records import per_seed
from xsa.base.records import read_json
from xsa.studies.predict import TAU2_GRID
from xsa.base.stats import mean_ci
from xsa.studies.registry import GROUP_SCALES, GROUP_SEEDS, STUDIES, Sweep, get_study, group_arms
from xsa.books.optimizer import optimizer_book
from xsa.books.sink import sink_book

BOOTSTRAP = 200  # seed resamples of the criterion's choice (each refits every candidate five times)
BOOTSTRAP_SEED = 0  # the resamples' RNG: the share is the same number on every build


# -----------------------------------------------------------------------------
# The robust study's selection grids

def grid_counts(robust, selecting) -> dict:
    """For each preset with a matrix-LR grid of both arms: its seed x LR cells and those where XSA's final
    val bpb is below the baseline's (`grid_cells_<preset>`, `grid_cells_ahead_<preset>`), and both summed
    over every grid (`grid_cells_all`, `grid_cells_ahead_all`). Descriptive: the selection seeds."""
    grids: dict[str, dict[bool, Sweep]] = {}
    for c in robust.comparisons:
        if isinstance(c, Sweep) and c.field == "matrix_lr":
            grids.setdefault(c.base.preset, {})[bool(c.base.get("xsa_alpha"))] = c
    est, total, total_ahead, every = {}, 0, 0, []
    for preset, g in sorted(grids.items()):
        if len(g) != 2:
            continue
        cells = ahead = 0
        ids = []
        for lr in sorted(set(g[False].values()) & set(g[True].values())):
            a, b = g[False].base.with_(matrix_lr=lr), g[True].base.with_(matrix_lr=lr)
            pa, pb = per_seed(selecting, a, "val_bpb"), per_seed(selecting, b, "val_bpb")
            for s in sorted(pa.keys() & pb.keys()):
                cells += 1
                ahead += pb[s] < pa[s]
                ids += [a.run(s).run_id, b.run(s).run_id]
        k = slug(preset)
        est[f"grid_cells_{k}"] = fact(f"grid_cells_{k}", cells, "cells", f"{preset}: seed x matrix-LR cells of the "
                                      "selection grids with both arms", "descriptive", ids)
        est[f"grid_cells_ahead_{k}"] = fact(f"grid_cells_ahead_{k}", ahead, "cells", f"{preset}: of those cells, how "
                                            "many have XSA's final val bpb below the baseline's", "descriptive", ids)
        total, total_ahead, every = total + cells, total_ahead + ahead, every + ids
    if every:
        est["grid_cells_all"] = fact("grid_cells_all", total, "cells", "every preset's selection grids: seed x "
                                     "matrix-LR cells with both arms", "descriptive", every)
        est["grid_cells_ahead_all"] = fact("grid_cells_ahead_all", total_ahead, "cells", "of those cells, how many "
                                           "have XSA's final val bpb below the baseline's", "descriptive", every)
    return est


def group_moves(robust, selecting) -> dict:
    """The AdamW-group check (registered as descriptive, two seeds): with the embedding and unembedding LRs
    scaled by each of GROUP_SCALES, each arm of the primary preset at its selected matrix LR and that LR's
    grid neighbours. `group_checked`: the arm-and-scale cases with every run recorded; `group_moved`: of
    those, how many have their lowest mean final val bpb at another matrix LR than the selected one (the
    optimum moved, so the matrix LR was selected at AdamW-group rates that are not the best)."""
    p = robust.comparison(robust.primary)
    checked, moved, ids = 0, 0, []
    for c in (c for c in robust.comparisons
              if isinstance(c, Sweep) and c.field == "matrix_lr" and c.base.preset == p.a.preset):
        tuned = next(x for x in p.arms() if x.with_(matrix_lr=c.base.get("matrix_lr")) == c.base)
        for arms in group_arms(c.base, tuned, c.values()).values():
            seeds = {a.get("matrix_lr"): per_seed(selecting, a, "val_bpb") for a in arms}
            if any(len(v) != len(GROUP_SEEDS) for v in seeds.values()):
                continue  # not recorded whole yet: not counted
            best = min(seeds, key=lambda lr: mean_ci(seeds[lr].values())["mean"])
            checked, moved = checked + 1, moved + (best != tuned.get("matrix_lr"))
            ids += [a.run(s).run_id for a in arms for s in GROUP_SEEDS]
    if not checked:
        return {}
    scales = " and ".join(f"x{s:g}" for s in GROUP_SCALES)
    return {"group_checked": fact("group_checked", checked, "cases", f"{p.a.preset}: arm-and-scale cases of the "
                                  f"AdamW-group check (embedding and unembedding LR {scales}) with every run "
                                  "recorded", "descriptive", ids),
            "group_moved": fact("group_moved", moved, "cases", "of those, how many have their lowest mean final "
                                "val bpb at another matrix LR than the selected one", "descriptive", ids)}


# -----------------------------------------------------------------------------
# The factorial study: post hoc and descriptive readings

def _cell_effects(results: Path) -> dict[str, list[float]]:
    return {c.name: list(A.two_rate(results, c).values()) for c in CELLS}


def interaction(effects: dict[str, list[float]]) -> dict:
    """(w64 long - w64 short) - (w128 long - w128 short) of the cells' two-rate primaries, with a
    Welch-Satterthwaite 95% interval over the four cells taken as independent (as the registered contrasts
    take them)."""
    m = {k: float(np.mean(v)) for k, v in effects.items()}
    var = {k: float(np.var(v, ddof=1)) / len(v) for k, v in effects.items()}
    value = (m["w64 long"] - m["w64 short"]) - (m["w128 long"] - m["w128 short"])
    se = math.sqrt(sum(var.values()))
    df = sum(var.values()) ** 2 / sum(v ** 2 / (len(effects[k]) - 1) for k, v in var.items())
    t = float(sps.t.ppf(0.975, df))
    return dict(value=value, lo=value - t * se, hi=value + t * se, n=min(map(len, effects.values())),
                p=float(2 * sps.t.sf(abs(value) / se, df)))


def welch_power(delta: float, first: list[float], second: list[float], alpha: float = 0.05) -> float:
    """The power of a two-sided Welch test at `alpha` for a true difference `delta`, at the two cells'
    observed SDs and sizes (non-central t)."""
    va, vb = np.var(first, ddof=1) / len(first), np.var(second, ddof=1) / len(second)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(first) - 1) + vb ** 2 / (len(second) - 1))
    crit, nc = sps.t.ppf(1 - alpha / 2, df), delta / se
    return float(sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc))


# at CPU scale steps and tokens seen are one axis, and the three two-axis candidates one fit
# (xsa/studies/factorial/models.py): each distinct fit is scored once and its score given to its ties
DISTINCT = {"tokens per parameter": ("tokens per parameter",), "steps": ("steps", "tokens seen"),
            "steps + parameters": ("steps + parameters", "tokens per parameter + parameters",
                                   "tokens seen + parameters")}


def _fit_at(conds, X: np.ndarray, row: np.ndarray) -> tuple[float, float] | None:
    """(mean, variance of the true effect) at `row` of the fit of xsa/studies/predict.py: fit_design on `conds`
    and X (sigma^2 pooled within conditions, tau^2 the first REML maximum on TAU2_GRID, GLS), with the REML
    likelihood of every grid point computed at once; None where fit_design gives none."""
    if len(conds) <= X.shape[1] or np.linalg.matrix_rank(X) < X.shape[1]:
        return None
    means = np.array([c.mean for c in conds])
    n = np.array([c.n for c in conds], dtype=float)
    sigma2 = sum(float(np.sum((np.array(c.diffs) - c.mean) ** 2)) for c in conds) / float(np.sum(n - 1))
    v = TAU2_GRID[:, None] + (sigma2 / n)[None, :]  # (grid, conditions)
    w = 1.0 / v
    cov = np.linalg.inv(np.einsum("gk,ki,kj->gij", w, X, X))
    beta = np.einsum("gij,gj->gi", cov, (w * means) @ X)
    r = means[None, :] - beta @ X.T
    ll = -0.5 * (np.sum(np.log(v), axis=1) - np.linalg.slogdet(cov)[1] + np.sum(r * r / v, axis=1))
    g = int(np.argmax(ll))  # the first maximum, as max() over the grid takes it
    return float(row @ beta[g]), float(row @ cov[g] @ row) + float(TAU2_GRID[g])


def loco(conds, names) -> float | None:
    """FM.loco (the registered leave-one-condition-out score) with each fit's tau^2 grid computed at once:
    the same score, about a hundred times faster (tests/test_paper_text.py compares the two)."""
    X, score = FM.design(conds, names), 0.0
    for j, c in enumerate(conds):
        keep = [i for i in range(len(conds)) if i != j]
        fitted = _fit_at([conds[i] for i in keep], X[keep], X[j])
        if fitted is None:
            return None
        score += (c.mean - fitted[0]) ** 2 / (fitted[1] + c.var)
    return score


def _choose(conds) -> tuple[list[str], dict]:
    """The registered criterion's choice over `conds` (xsa/studies/factorial/models.py: compare), and the scores."""
    scores = {}
    for k, ties in DISTINCT.items():
        score = loco(conds, FM.CANDIDATES[k])
        scores.update({t: score for t in ties})
    valid = {k: v for k, v in scores.items() if v is not None}
    one = {k: v for k, v in valid.items() if len(FM.CANDIDATES[k]) == 1}
    two = {k: v for k, v in valid.items() if len(FM.CANDIDATES[k]) == 2}
    if not valid:
        return [], scores
    pool = two if two and (not one or min(two.values()) < min(one.values()) - FM.PARSIMONY) else one
    best = min(pool.values())
    return [k for k, v in pool.items() if abs(v - best) <= 1e-9 * max(1.0, best)], scores


def _resample(conds, rng) -> list:
    return [FM.Condition(c.name, c.axes, tuple(rng.choice(c.diffs, size=len(c.diffs), replace=True)), c.held_out)
            for c in conds]


def criterion(results: Path) -> dict[str, Estimate]:
    """The primary model comparison read further: the score margin between the two one-axis accounts, the
    share of seed resamples in which the criterion chooses steps (or tokens seen, its tie), and its choice
    without the scale study's x4 level."""
    conds = [c for c in FM.conditions(results) if not c.held_out]
    chosen, scores = _choose(conds)
    out = {}
    if scores.get("steps") is not None and scores.get("tokens per parameter") is not None:
        out["model_margin"] = fact("model_margin", scores["tokens per parameter"] - scores["steps"], "score",
                                   "the leave-one-condition-out score of tokens per parameter minus that of steps, "
                                   "each seed's two-rate mean (descriptive; the registered margin a two-axis model "
                                   "must clear is model_parsimony)", "descriptive")
    out["model_parsimony"] = fact("model_parsimony", FM.PARSIMONY, "score", "the registered margin by which a "
                                  "two-axis candidate must beat the best one-axis one", "registered")
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    steps = sum(set(_choose(_resample(conds, rng))[0]) <= {"steps", "tokens seen"} for _ in range(BOOTSTRAP))
    out["model_bootstrap_steps"] = fact("model_bootstrap_steps", steps / BOOTSTRAP, "share", f"of {BOOTSTRAP} "
                                        "resamples of each condition's seeds (descriptive), the share in which the "
                                        "registered criterion chooses steps (with tokens seen, its tie)", "descriptive")
    out["model_bootstrap_resamples"] = fact("model_bootstrap_resamples", BOOTSTRAP, "resamples", "resamples of each "
                                            "condition's seeds behind model_bootstrap_steps (numpy default_rng, seed "
                                            f"{BOOTSTRAP_SEED})", "setup")
    without = [c for c in conds if not c.name.startswith("x4")]
    picked, _ = _choose(without)
    out["model_without_x4"] = Estimate("model_without_x4", None, family="verdict", unit="model", metric="",
                                       verdict=" and ".join(picked) or "none", definition="the candidates the "
                                       "registered criterion chooses over the four cells alone, without the scale "
                                       "study's x4 level (descriptive)")
    return out


def power(results: Path, effects: dict[str, list[float]]) -> dict[str, Estimate]:
    """The power each axis contrast had, at 5% two-sided and the cells' observed SDs, for the difference the
    other account predicts: equal tokens per parameter under the steps model's slope, equal steps under
    the tokens-per-parameter model's (each fitted on the primary conditions; post hoc)."""
    conds = [c for c in FM.conditions(results) if not c.held_out]
    ax = {c.name: FM.axes_of(c.config()) for c in CELLS}
    b_steps = FM.fit(conds, ("steps",))[0][1]
    b_tpp = FM.fit(conds, ("tokens_per_param",))[0][1]
    predicted = {
        "equal_tokens_per_param": (b_steps * (ax["w128 long"]["steps"] - ax["w64 short"]["steps"]),
                                   "w64 short", "w128 long", "steps"),
        "equal_steps": (b_tpp * (ax["w128 long"]["tokens_per_param"] - ax["w64 long"]["tokens_per_param"]),
                        "w64 long", "w128 long", "tokens per parameter"),
    }
    out = {}
    for key, (delta, first, second, account) in predicted.items():
        out[f"{key}_predicted"] = fact(f"{key}_predicted", delta, "relative", f"the {key.replace('_', ' ')} contrast "
                                       f"the {account} model predicts (its slope fitted on the primary conditions; "
                                       "post hoc)", "post hoc")
        out[f"{key}_power"] = fact(f"{key}_power", welch_power(delta, effects[first], effects[second]), "power",
                                   f"the power of the {key.replace('_', ' ')} contrast (Welch, two-sided 5%, n = 10 "
                                   f"a cell, the cells' observed SDs) for the difference the {account} model "
                                   "predicts (post hoc)", "post hoc")
    return out


def d12_ratios() -> dict[str, Estimate]:
    """How far d12 (FM.D12, the seed paper's recipe) lies from the factorial's short width-64 cell in what no
    CPU run varies: tokens a step, vocabulary and depth, as ratios."""
    cpu = CELLS[0].config()
    step = lambda c: c.num_tokens / c.num_iterations  # noqa: E731
    return {f"d12_ratio_{k}": fact(f"d12_ratio_{k}", v, "ratio", f"d12 over `{CELLS[0].preset}`: {what}")
            for k, v, what in (("batch", step(FM.D12) / step(cpu), "tokens a step"),
                               ("vocab", FM.D12.model.vocab_size / cpu.model.vocab_size, "vocabulary"),
                               ("depth", FM.D12.model.n_layer / cpu.model.n_layer, "layers"))}


def factorial_extra(results) -> dict[str, Estimate]:
    """The factorial study's post hoc and descriptive readings the text states; none before its cells have
    two pairs each."""
    results = Path(results)
    effects = _cell_effects(results)
    if min(map(len, effects.values())) < 2:
        return {}
    i = interaction(effects)
    out = {"width_length_interaction": Estimate(
        "width_length_interaction", i["value"], i["lo"], i["hi"], i["n"], p=i["p"], family="post hoc",
        definition="(w64 long minus w64 short) minus (w128 long minus w128 short) of the two-rate primaries: how much "
                   "more the gain grows with length at width 64 than at 128; Welch-Satterthwaite over the four cells "
                   "(post hoc, stated after the records)")}
    out.update(criterion(results))
    out.update(power(results, effects))
    out.update(d12_ratios())
    return out


def with_sds(rows: list[dict], book: dict[str, Estimate]) -> list[dict]:
    """The factorial table's rows (xsa/books/factorial.py: factorial_table) with each arm's SD of final val
    bpb between seeds at each rate, from the estimates."""
    out = []
    for r in rows:
        lr = r["matrix_lr"]
        at = f"{slug(r['cell'])}_at_{slug(format(lr, 'g'))}" if isinstance(lr, float) else None
        out.append({**r, **{f"sd_{side}": (book[f"{at}_sd_{side}"].value if at and f"{at}_sd_{side}" in book else None)
                            for side in ("base", "xsa")}})
    return out


# -----------------------------------------------------------------------------
# Every extrapolation to d12 or d24, in one table

# (study, key, model, at, fitted on): the scale study's model and its sensitivity fit, and the factorial's six
# registered candidates at each seed's two-rate mean
EXTRAPOLATIONS = (
    ("scale", "prediction_d12", "scale study: heads, tokens per parameter, context", "d12", "all-layer conditions, tuned rates"),
    ("scale", "prediction_d24", "scale study: heads, tokens per parameter, context", "d24", "all-layer conditions, tuned rates"),
    ("scale", "check_prediction_d12", "scale study, refitted", "d12", "all-layer conditions, x4 at XSA's rate"),
    *(("factorial", f"d12_conditional_{slug(name)}", f"factorial: {name}", "d12", "four cells and x4, two-rate mean")
      for name in FM.CANDIDATES),
)


def extrapolation_table(estimates: dict) -> list[dict]:
    """One row per registered extrapolation to d12 or d24: the model, where, what it is fitted on, and its
    number with its 95% interval for the true effect there, conditional on the model."""
    rows = []
    for study, key, name, at, on in EXTRAPOLATIONS:
        e = estimates.get(study, {}).get(key)
        if e is None or e.value is None:
            continue
        rows.append(dict(extrapolation=name, at=at, fitted_on=on, rel=e.value, rel_ci95=e.ci, key=f"{study}.{key}"))
    return rows


# -----------------------------------------------------------------------------
# The run table: every run folder

# the studies whose runs no other table of the paper lists (the optimizer study is adaptive: the runs its
# records have declared so far), in the order a shared run is named
OWNERS = ("factorial", "sink", "optimizer", "d12-test", "gpu", "default")


def _owners(results) -> dict[str, str]:
    """{run id: the first study of OWNERS that declares it}."""
    out = {}
    for name in reversed(OWNERS):
        if name in STUDIES:
            out.update({r.run_id: name for r in get_study(name, results).runs})
    return out


def unlisted_runs(results, rows: list[dict]) -> list[dict]:
    """Rows of the run table for every folder under results/runs with a summary that `rows` does not list:
    its study (the first registered one that declares it), steps, final val bpb, CPU and wall seconds."""
    listed, owners = {r["run"] for r in rows}, _owners(results)
    out = []
    for d in sorted((Path(results) / "runs").glob("*")):
        if d.name in listed or not (d / "summary.json").exists():
            continue
        s = read_json(d / "summary.json")
        cpu = s.get("cpu_time_s")
        out.append(dict(study=owners.get(d.name, "other"), run=d.name, steps=s.get("steps"), val_bpb=s.get("val_bpb"),
                        cpu_s=round(cpu) if cpu is not None else "not recorded", eval_cpu_s=None,
                        wall_s=round(s["wall_time_s"]) if s.get("wall_time_s") else None))
    return out


def seeds_ahead(key: str, runs, pair) -> dict:
    """{key: the seeds on which the pair's b arm (XSA) ends with the lower final val bpb}, over the seeds both
    arms finished (n: those seeds). Descriptive: a count, no model."""
    a, b = per_seed(runs, pair.a, "val_bpb"), per_seed(runs, pair.b, "val_bpb")
    seeds = [s for s in sorted(a.keys() & b.keys()) if a[s] is not None and b[s] is not None]
    ids = [arm.run(s).run_id for s in seeds for arm in (pair.a, pair.b)]
    e = fact(key, sum(b[s] < a[s] for s in seeds), "seeds", f"{pair.name}: seeds on which XSA's final val bpb is the "
             "lower, of those both arms finished", family="descriptive", runs=ids)
    return {key: Estimate(**{**e.__dict__, "n": len(seeds)})}


# -----------------------------------------------------------------------------
# The two studies under way: how far their records have come

def later_books(results, optimizer: dict | None = None) -> dict[str, dict]:
    """The books of the studies after the scale study: the factorial's registered estimates with its post hoc
    readings (factorial_extra), and the sink and optimizer studies' progress (`optimizer`: the optimizer
    study's analysis, where the caller has read it already)."""
    return {"factorial": {**factorial_book(results), **factorial_extra(results)}, **progress_books(results, optimizer)}


def progress_books(results, optimizer: dict | None = None) -> dict[str, dict]:
    """{"sink": ..., "optimizer": ...}: each study's declared and finished runs (and what they cost so far),
    the counts its text states while it trains; no registered outcome is read from them until the last
    record lands (the registrations say when: xsa/books/sink.py, xsa/books/optimizer.py)."""
    return {"sink": sink_book(results), "optimizer": optimizer_book(results, optimizer)}
