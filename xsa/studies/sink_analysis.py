"""
The sink study's registered estimates, read from run records (results/runs/<run id>/); the design is
xsa/studies/sink.py. Every effect is relative to the seed's own run and paired by seed (as
xsa/studies/factorial/analysis.py). Per condition c, mechanism m and seed s:

    E_m(s) = XSA's relative effect with the mechanism on both arms      G(s) = E_none(s)
    I_m(s) = E_m(s) - G(s)        the interaction: positive where the mechanism shrinks XSA's gain
    r_m(s) = E_m(s) - G(s) / 2    the half-gain difference: the sink account predicts r >= 0
    O_m(s) = the mechanism's own relative effect on the baseline

- the decision family (Holm over 4): per mechanism, each seed's mean over the conditions it appears in,
  the mean I and the mean r by one-sample t; `decide` turns them into the registered outcome;
- the contrast family (Holm over all of them): per condition, I and O of each mechanism by paired t,
  and the baseline's diffuse-mode rate with against without each mechanism by an exact McNemar test,
  with the mean step-96 entropy of layer MODE_LAYER beside it (descriptive);
- the mode split (XSA's effect within the baseline's sharp and diffuse modes) for every pair of this
  study and every factorial cell and rate; the early-entropy predictor, exploratory;
- the mechanism read-outs: per arm, the mean over seeds of the final logged diagnostics per layer.

Nothing raises on missing or unfinished runs: an estimate over fewer seeds says so by its n.
"""

from __future__ import annotations

import math
from pathlib import Path

from scipy import stats as sps

from xsa.studies.factorial import analysis as A
from xsa.studies.factorial.design import CELLS
from xsa.base.stats import holm
from xsa.studies.rules import final_bpb
from xsa.studies.sink import CONDITIONS, TESTED, Condition, contrast_names, decision_names, sink_study, with_mechanism

ALPHA = A.ALPHA
EARLY_STEP = 96  # the early reading: the logged evaluation at or nearest this step
READOUTS = ("entropy", "diag_mass", "first_mass", "cos_y_v", "attn_logit_max", "gate_mean", "sink_mass")

# the registered outcome of each mechanism's decision, and what the paper says in each
OUTCOMES = {
    "sink": "XSA's gain at this scale is largely a sink effect",
    "partly": "a sink mechanism takes part of XSA's gain, less than half",
    "not sink": "XSA's gain is not explained by a sink",
    "opposite": "the mechanism enlarges XSA's gain",
    "undecided": "this study does not tell whether XSA's gain at this scale is a sink effect",
}


# -----------------------------------------------------------------------------
# Per-seed quantities

def effect(results: Path, c: Condition, m: str) -> dict[int, float]:
    """{seed: E_m}: XSA's relative effect with mechanism m on both arms."""
    p = c.pair(m)
    return A.relative_effects(results, p.a, p.b, c.seeds)


def _combined(results: Path, c: Condition, m: str, weight: float) -> dict[int, float]:
    """{seed: E_m - weight * G} over the seeds with both pairs."""
    e, g = effect(results, c, m), effect(results, c, "none")
    return {s: e[s] - weight * g[s] for s in sorted(e.keys() & g.keys())}


def interaction(results: Path, c: Condition, m: str) -> dict[int, float]:
    """{seed: I_m = E_m - G}."""
    return _combined(results, c, m, 1.0)


def half_gain(results: Path, c: Condition, m: str) -> dict[int, float]:
    """{seed: r_m = E_m - G / 2}: zero where the mechanism takes exactly half of XSA's gain."""
    return _combined(results, c, m, 0.5)


def own_effect(results: Path, c: Condition, m: str) -> dict[int, float]:
    """{seed: O_m}: the baseline with the mechanism against the baseline without it."""
    return A.relative_effects(results, c.pair("none").a, c.pair(m).a, c.seeds)


def pooled(results: Path, m: str, per_seed) -> dict[int, float]:
    """{seed: the mean of per_seed(results, c, m) over the conditions of m that hold the seed}, for the
    seeds with a value in every one of them (as the factorial's two-rate mean)."""
    conds = with_mechanism(m)
    values = {c.name: per_seed(results, c, m) for c in conds}
    out = {}
    for s in sorted({s for c in conds for s in c.seeds}):
        held = [values[c.name].get(s) for c in conds if s in c.seeds]
        if None not in held:
            out[s] = sum(held) / len(held)
    return out


def _with_holm(family: dict[str, dict]) -> dict[str, dict]:
    """Add holm_p over the whole family (a test not run stays in it, as p = 1)."""
    names = list(family)
    for name, adjusted in zip(names, holm([family[k]["p"] for k in names])):
        family[name]["holm_p"] = adjusted
    return family


# -----------------------------------------------------------------------------
# The decision family

def decision_family(results: Path) -> dict[str, dict]:
    """{name: estimate with holm_p}: per tested mechanism, the pooled interaction and half-gain tests."""
    family = {}
    for m in TESTED:
        family[f"{m}, pooled: interaction"] = A.summary(pooled(results, m, interaction).values())
        family[f"{m}, pooled: half gain"] = A.summary(pooled(results, m, half_gain).values())
    assert list(family) == decision_names()
    return _with_holm(family)


def _decided(e: dict, sign: int) -> bool:
    """Whether the Holm-adjusted test rejects zero in the direction `sign`."""
    if e.get("holm_p") is None or e["holm_p"] >= ALPHA or e.get("value") is None:
        return False
    return e["value"] > 0 if sign > 0 else e["value"] < 0


def outcome(i: dict, r: dict) -> str:
    """The registered table, from the interaction estimate i and the half-gain estimate r:
    opposite:  I decided below 0;
    partly:    I decided above 0 and r decided below 0 (less than half the gain removed);
    sink:      I decided above 0 and mean r at or above 0 (at least half removed);
    not sink:  r decided below 0 and I not decided above 0;
    undecided: anything else."""
    if _decided(i, -1):
        return "opposite"
    if _decided(i, +1):
        if _decided(r, -1):
            return "partly"
        return "sink" if r.get("value") is not None and r["value"] >= 0 else "undecided"
    return "not sink" if _decided(r, -1) else "undecided"


def decide(family: dict[str, dict]) -> dict[str, dict]:
    """{mechanism: {outcome, says}} from a decision family (decision_family)."""
    out = {}
    for m in TESTED:
        o = outcome(family[f"{m}, pooled: interaction"], family[f"{m}, pooled: half gain"])
        out[m] = dict(outcome=o, says=OUTCOMES[o])
    return out


def decision(results: Path) -> dict[str, dict]:
    """{mechanism: {outcome, says}}: the registered outcome per mechanism from the records."""
    return decide(decision_family(results))


# -----------------------------------------------------------------------------
# Modes and the early entropy

def run_mode(results: Path, run) -> str | None:
    """The factorial's registered mode of a run (its final layer-MODE_LAYER entropy), None without one."""
    return A.mode(A.final_entropy(A.log_lines(results, run)))


def early_entropy(results: Path, run, step: int = EARLY_STEP) -> float | None:
    """The layer-MODE_LAYER attention entropy at the logged evaluation at or nearest `step` (the
    earlier of two equally near)."""
    evals = [(abs(line["step"] - step), line["step"], line["diag"]["entropy"]) for line in A.log_lines(results, run)
             if "entropy" in line.get("diag", {}) and isinstance(line.get("step"), int)]
    if not evals:
        return None
    entropy = min(evals)[2]
    return entropy[A.MODE_LAYER] if len(entropy) > A.MODE_LAYER else None


def _finished(results: Path, arm, seeds) -> list[int]:
    return [s for s in seeds if final_bpb(results, arm.run(s)) is not None]


def diffuse_rate(results: Path, c: Condition, m: str) -> dict:
    """The baseline's diffuse-mode rate with mechanism m against without it, on the seeds where both
    baselines finished with a mode: value = rate with minus rate without; p by an exact McNemar test
    (a binomial test of the discordant seeds at 1/2; 1 where none is discordant). No interval."""
    without, with_ = c.pair("none").a, c.pair(m).a
    seeds = sorted(set(_finished(results, without, c.seeds)) & set(_finished(results, with_, c.seeds)))
    modes = {s: (run_mode(results, without.run(s)), run_mode(results, with_.run(s))) for s in seeds}
    modes = {s: v for s, v in modes.items() if None not in v}
    n = len(modes)
    lost = sum(a == "diffuse" and b == "sharp" for a, b in modes.values())  # diffuse without, sharp with
    gained = sum(a == "sharp" and b == "diffuse" for a, b in modes.values())
    rate = (lambda k: sum(v[k] == "diffuse" for v in modes.values()) / n) if n else (lambda k: None)
    p = (sps.binomtest(gained, lost + gained, 0.5).pvalue if lost + gained else 1.0) if n else None
    early = {name: A.summary(v for s in seeds if (v := early_entropy(results, arm.run(s))) is not None)
             for name, arm in (("without", without), ("with", with_))}
    return dict(value=None if not n else rate(1) - rate(0), lo=None, hi=None, n=n,
                p=None if p is None else float(p), rate_without=rate(0), rate_with=rate(1),
                discordant=dict(diffuse_to_sharp=lost, sharp_to_diffuse=gained),
                early_entropy=early, early_step=EARLY_STEP, layer=A.MODE_LAYER)


def correlation(xs: list[float], ys: list[float]) -> dict:
    """Pearson's r with a 95% Fisher-z interval and its two-sided p (None where undefined)."""
    n = len(xs)
    out = dict(value=None, lo=None, hi=None, n=n, p=None)
    if n < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return out
    r, p = sps.pearsonr(xs, ys)
    out.update(value=float(r), p=float(p))
    if n > 3 and abs(r) < 1:
        z, half = math.atanh(r), sps.norm.ppf(1 - ALPHA / 2) / math.sqrt(n - 3)
        out.update(lo=math.tanh(z - half), hi=math.tanh(z + half))
    return out


def early_and_effect(results: Path, a, b, seeds) -> dict[int, tuple[float, float]]:
    """{seed: (the early entropy of a's run, the relative effect of b against a)} over the seeds with both."""
    out = {}
    for s, e in A.relative_effects(results, a, b, seeds).items():
        x = early_entropy(results, a.run(s))
        if x is not None:
            out[s] = (x, e)
    return out


def early_predictor(results: Path, a, b, seeds) -> dict:
    """Exploratory (not registered as a test): the correlation between the baseline's early
    layer-MODE_LAYER entropy and the seed's relative effect of b against a."""
    pairs = early_and_effect(results, a, b, seeds).values()
    return dict(correlation([x for x, _ in pairs], [e for _, e in pairs]), exploratory=True)


def _all_pairs():
    """(key, pair, seeds) of every factorial cell and rate and every pair of this study."""
    yield from ((f"factorial {c.name}@{lr:g}", p, c.seeds) for c in CELLS for lr, p in c.pairs().items())
    yield from ((p.name, p, c.seeds) for c in CONDITIONS for p in c.pairs().values())


def mode_split(results: Path) -> dict[str, dict]:
    """XSA's effect within the baseline's sharp and diffuse modes, with n and the seeds, for every pair."""
    return {key: A.by_mode(results, p.a, p.b, seeds) for key, p, seeds in _all_pairs()}


def early_predictors(results: Path) -> dict[str, dict]:
    """The early-entropy predictor for every pair (exploratory)."""
    return {key: early_predictor(results, p.a, p.b, seeds) for key, p, seeds in _all_pairs()}


# -----------------------------------------------------------------------------
# The contrast family

def contrast_family(results: Path) -> dict[str, dict]:
    """{name: estimate with holm_p}: per condition and tested mechanism, I, O and the diffuse rate."""
    family = {}
    for c in CONDITIONS:
        for m in TESTED:
            if m in c.mechanisms:
                family[f"{c.name}: interaction {m}"] = A.summary(interaction(results, c, m).values())
                family[f"{c.name}: own effect {m}"] = A.summary(own_effect(results, c, m).values())
                family[f"{c.name}: diffuse rate {m}"] = diffuse_rate(results, c, m)
    assert set(family) == set(contrast_names())
    return _with_holm({k: family[k] for k in contrast_names()})


# -----------------------------------------------------------------------------
# Mechanism read-outs

def final_diag(results: Path, run) -> dict | None:
    """The diagnostics of the run's last logged evaluation."""
    diags = [line["diag"] for line in A.log_lines(results, run) if isinstance(line.get("diag"), dict)]
    return diags[-1] if diags else None


def _layer_means(rows: list) -> list[float] | None:
    """The mean per layer over runs (rows of equal length), None without any."""
    rows = [r for r in rows if isinstance(r, list) and r]
    if not rows or len({len(r) for r in rows}) != 1:
        return None
    return [sum(r[i] for r in rows) / len(rows) for i in range(len(rows[0]))]


def arm_readouts(results: Path, arm, seeds) -> dict:
    """{metric: {value: mean per layer or None, n: runs that logged it}} over the arm's finished runs,
    and logit_rms (a float per run) likewise; a metric a run did not log is missing, not an error."""
    diags = [d for s in _finished(results, arm, seeds) if (d := final_diag(results, arm.run(s))) is not None]
    out = {}
    for key in READOUTS:
        rows = [d[key] for d in diags if key in d]
        out[key] = dict(value=_layer_means(rows), n=len(rows))
    rms = [d["logit_rms"] for d in diags if isinstance(d.get("logit_rms"), (int, float))]
    out["logit_rms"] = dict(value=sum(rms) / len(rms) if rms else None, n=len(rms))
    return out


def readouts(results: Path) -> dict[str, dict]:
    """{pair name: {baseline: read-outs, xsa: read-outs}} for every pair of this study."""
    return {p.name: dict(baseline=arm_readouts(results, p.a, c.seeds), xsa=arm_readouts(results, p.b, c.seeds))
            for c in CONDITIONS for p in c.pairs().values()}


# -----------------------------------------------------------------------------
# Everything, as plain numbers

def _clean(x):
    """JSON-able: NaN and infinities become None, tuples lists."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def estimates(results: Path) -> dict:
    """Every registered estimate of the sink study (value, lo, hi, n, p, holm_p), the effects with and
    without each mechanism, the mode split, the exploratory early-entropy predictor and the read-outs.
    An interim reading says so: `declared` and `finished` count the runs, each estimate its pairs."""
    results = Path(results)
    study = sink_study()
    finished = sum(final_bpb(results, r) is not None for r in study.runs)
    family = decision_family(results)
    return _clean(dict(
        study=study.name, declared=len(study.runs), finished=finished, interim=finished < len(study.runs),
        effects={p.name: A.summary(effect(results, c, m).values()) for c in CONDITIONS for m, p in c.pairs().items()},
        decision=dict(family=family, outcomes=decide(family)),
        contrasts=contrast_family(results),
        mode_split=mode_split(results),
        early_entropy=dict(exploratory=True, step=EARLY_STEP, layer=A.MODE_LAYER, pairs=early_predictors(results)),
        readouts=readouts(results),
    ))
