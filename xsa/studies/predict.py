"""
The scale study's model and its prediction for nanochat's d12, pre-registered with the study
(xsa/studies/scale.py; python -m xsa.prereg --study scale).

The unit is one pair: a seed's relative difference of final val bpb, (XSA - baseline) / baseline.
A condition is one (width, heads, training length, sequence length) at which both arms trained at
their tuned learning rates. The model, a meta-regression with a between-condition variance:

    d_ij = b0 + bH log2(H_j) + bD log2(D_j) + bT log2(T_j / 512) + u_j + e_ij,
    u_j ~ N(0, tau^2) (what the axes leave unexplained), e_ij ~ N(0, sigma^2) (seed noise),

with H the number of heads, D tokens per scaling parameter (nanochat's unit: training tokens per
block-matrix and lm_head parameter) and T the sequence length. Fit in two stages: sigma^2 pooled from
the spread within conditions; tau^2 by restricted maximum likelihood on the condition means (each with
variance tau^2 + sigma^2 / n_j), on a fixed grid; the coefficients by generalised least squares at
that tau^2. Intervals use Student's t with k - 4 degrees of freedom (k conditions). The prediction for
a new condition x is x'b with the 95% interval x'b +/- t sqrt(x' Cov(b) x + tau^2): an interval for
that condition's true effect, which a run with enough pairs can land inside or outside.

The prediction is conditional: no dependence on width or depth beyond what the three axes carry, the
effect linear in the logs, and the axes extrapolated (at most 8 heads and T = 1024 are measured).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import chi2

from xsa.studies.rules import final_bpb
from xsa.stack.presets import scaling_params
from xsa.base.stats import t_critical
from xsa.studies.registry import get_study
from xsa.studies.kinds import Paired
from xsa.studies.scale import HEADS_LEVELS, LENGTH_LEVELS, SELECTION_SEEDS, W256_LONG, W256_SHORT

# the comparisons the model is fitted on (all-layer XSA against the baseline, each arm at its tuned LR)
FIT_SCALE = (*LENGTH_LEVELS.values(), *HEADS_LEVELS.values())
FIT_ROBUST = ("cpu-w64-d4 tuned T=256", "cpu-w64-d4 tuned T=1024")
SENSITIVITY = (W256_SHORT, W256_LONG)  # untuned at width 256: a second fit only

T_REF = 512  # the sequence length of every CPU preset: log2(T / T_REF) is 0 there
AXES = ("heads", "tokens per parameter", "sequence length")
# where the model is asked to predict: nanochat's d12 as the seed paper trains it (12 heads of 64,
# the 324e69c recipe's 10.5 tokens per scaling parameter, T = 2048), and the seed paper's d24 (16 heads)
TARGETS = {"d12": dict(heads=12, tokens_per_param=10.5, seq_len=2048),
           "d24": dict(heads=16, tokens_per_param=10.5, seq_len=2048)}
# a d12 pair's SD on a GPU: about 0.03% per run in modded-nanogpt's records of repeated runs, so about
# 0.03% x sqrt(2) per pair (an assumption the d12 test checks; our CPU pairs show about 0.37%)
GPU_PAIR_SD = 0.0003 * 2 ** 0.5
D12_HALF_WIDTH = 0.001  # the d12 test's interval: +/-0.1%, a third of the seed paper's -0.32%
# larger-scale results beside the prediction (each one run or a few; as their sources report them)
ANCHORS = (
    ("nanochat pull request #702", "d14, one run per arm", -0.0036),
    ("modded-nanogpt pull request #264", "124 M parameters, 6 heads of 128, learnable gate, 10 runs per arm", -0.0014),
    ("parameter-golf pull requests #609 and #1125", "XSA on all layers against the last 4", -0.0015),
)
# the tau^2 grid of the REML search (relative effects are about 1e-3, so tau^2 about 1e-6)
TAU2_GRID = np.concatenate([[0.0], np.geomspace(1e-12, 1e-3, 721)])


class Diffs:
    """A condition's per-pair differences (`diffs`): their count and mean."""

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def mean(self) -> float:
        return float(np.mean(self.diffs))


@dataclass(frozen=True)
class Condition(Diffs):
    """One condition: its name, its place on the three axes, and its per-pair relative differences."""
    name: str
    heads: int
    tokens_per_param: float
    seq_len: int
    diffs: tuple[float, ...]

    def x(self) -> np.ndarray:
        return design_row(self.heads, self.tokens_per_param, self.seq_len)


def design_row(heads: int, tokens_per_param: float, seq_len: int) -> np.ndarray:
    return np.array([1.0, math.log2(heads), math.log2(tokens_per_param), math.log2(seq_len / T_REF)])


def condition(results: Path, pair: Paired, seeds) -> Condition:
    """The pair's condition: its axes read from the XSA arm's config, and the relative difference of
    every seed in `seeds` where both runs have a finished record."""
    cfg = pair.b.config()
    diffs = []
    for s in sorted(seeds):
        a, b = final_bpb(results, pair.a.run(s)), final_bpb(results, pair.b.run(s))
        if a is not None and b is not None:
            diffs.append((b - a) / a)
    return Condition(pair.name, cfg.model.n_head, cfg.num_tokens / scaling_params(cfg.model),
                     cfg.model.sequence_len, tuple(diffs))


@dataclass(frozen=True)
class Fit:
    """The fitted model: coefficients (b0, bH, bD, bT), their covariance, tau^2, sigma^2, the
    conditions it was fitted on and its degrees of freedom."""
    beta: np.ndarray
    cov: np.ndarray
    tau2: float
    sigma2: float
    conditions: tuple[Condition, ...]

    @property
    def df(self) -> int:
        return len(self.conditions) - len(self.beta)

    def slope(self, axis: int) -> tuple[float, float, float]:
        """(estimate, lo, hi) of the change in relative effect per doubling of axis (1 heads, 2
        tokens per parameter, 3 sequence length), 95% t-interval."""
        se = math.sqrt(self.cov[axis, axis])
        t = t_critical(self.df)
        return float(self.beta[axis]), float(self.beta[axis] - t * se), float(self.beta[axis] + t * se)

    def predict(self, heads: int, tokens_per_param: float, seq_len: int) -> tuple[float, float, float]:
        """(prediction, lo, hi): the 95% prediction interval of a new condition's true effect."""
        x = design_row(heads, tokens_per_param, seq_len)
        mu = float(x @ self.beta)
        half = t_critical(self.df) * math.sqrt(float(x @ self.cov @ x) + self.tau2)
        return mu, mu - half, mu + half


def gls(means, variances, X):
    W = 1.0 / variances
    cov = np.linalg.inv(X.T @ (X * W[:, None]))
    beta = cov @ (X.T @ (W * means))
    return beta, cov


def reml(tau2: float, means, within, X) -> float:
    """The restricted log-likelihood of tau^2 (constants dropped)."""
    v = tau2 + within
    beta, cov = gls(means, v, X)
    r = means - X @ beta
    return -0.5 * (np.sum(np.log(v)) - np.linalg.slogdet(cov)[1] + np.sum(r * r / v))


def fit_design(conditions, X: np.ndarray):
    """(beta, cov, tau2, sigma2) of the meta-regression of the conditions' means on the design X:
    sigma^2 pooled within conditions, tau^2 by REML on its grid, the coefficients by GLS; None where
    X has no degree of freedom left or an axis does not vary."""
    if len(conditions) <= X.shape[1] or np.linalg.matrix_rank(X) < X.shape[1]:
        return None
    means = np.array([c.mean for c in conditions])
    ss = sum(float(np.sum((np.array(c.diffs) - c.mean) ** 2)) for c in conditions)
    sigma2 = ss / sum(c.n - 1 for c in conditions)
    within = np.array([sigma2 / c.n for c in conditions])
    tau2 = float(max(TAU2_GRID, key=lambda t2: reml(t2, means, within, X)))
    beta, cov = gls(means, tau2 + within, X)
    return beta, cov, tau2, sigma2


def cochran_q(means, variances, X) -> dict:
    """Cochran's heterogeneity test of condition means about their fixed-effect (tau = 0) fit on X, each
    weighted by 1 / its variance: {value: Q, df, p (chi-square at k - p degrees of freedom)}."""
    beta, _ = gls(means, variances, X)
    q = float(np.sum((means - X @ beta) ** 2 / variances))
    df = len(means) - X.shape[1]
    return dict(value=q, df=df, p=float(chi2.sf(q, df)) if df > 0 else None)


def fit(conditions) -> Fit | None:
    """The model fitted on the conditions with at least two pairs; None while fewer than five such
    conditions (one degree of freedom) have landed."""
    used = tuple(c for c in conditions if c.n >= 2)
    if len(used) < 5:
        return None
    model = fit_design(used, np.stack([c.x() for c in used]))
    return None if model is None else Fit(*model, used)


def pairs_to_test(pair_sd: float, half_width: float = 0.001, first: int = 3, most: int = 16) -> int:
    """Paired d12 runs needed for a 95% interval of half-width <= half_width at a per-pair SD of
    pair_sd (relative): the smallest n >= first, at most `most`."""
    for n in range(first, most + 1):
        if t_critical(n - 1) * pair_sd / math.sqrt(n) <= half_width:
            return n
    return most


def declared_seeds(study, pair: Paired) -> set[int]:
    """The seeds the study declares for both arms of `pair`, less the seeds that only select an LR."""
    seeds = [{r.seed for r in study.runs if r.arm == arm} for arm in pair.arms()]
    return (seeds[0] & seeds[1]) - SELECTION_SEEDS - set(range(study.estimate_from))


def model_conditions(results: Path, sensitivity: bool = False) -> list[Condition]:
    """The conditions the model is fitted on, from the records under `results` (those whose rules have
    not declared them yet are left out); with `sensitivity`, the width-256 levels too."""
    out = []
    for name, names in (("scale", FIT_SCALE + (SENSITIVITY if sensitivity else ())), ("robust", FIT_ROBUST)):
        study = get_study(name, results)
        for n in names:
            try:
                pair = study.comparison(n)
            except KeyError:
                continue
            out.append(condition(results, pair, declared_seeds(study, pair)))
    return out
