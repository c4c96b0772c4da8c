"""
Which parameterisation of training length carries XSA's effect, chosen by the data (registered with
the factorial study), and the d12 numbers each one gives, printed as conditional.

A condition is one (shape, length) with its per-seed relative effects. Each candidate regresses the
condition means on an intercept and log2 of one length axis, optionally with log2 of the scaling
parameters: tokens per parameter, optimizer steps, tokens seen. The fit is the scale study's
(xsa/studies/predict.py): sigma^2 pooled within conditions, tau^2 by REML, coefficients by GLS.

At CPU scale every run takes 4,096 tokens a step, so steps and tokens seen are the same axis, and
with log2 parameters added all three candidates span the same columns: six candidates, three distinct
fits, which tie exactly. They part only at d12 (2^19 tokens a step), where each tied candidate's
conditional number is printed.

Criterion (registered): the leave-one-condition-out score, the sum over conditions of the squared
standardised error of the held-out condition's mean against the fit on the others,
(m_j - x_j b_(-j))^2 / (x_j Cov_(-j) x_j' + tau2_(-j) + s_j^2 / n_j); the lowest wins, except that a
two-axis candidate is chosen over the one-axis ones only where it scores lower than the best of them
by more than PARSIMONY (about what AIC charges for one more coefficient). For the chosen
model: Cochran's heterogeneity test Q_E (fixed-effect weights, chi-square at k - p degrees of freedom),
each condition's residual, and the prediction of each held-out condition (width 256, never fitted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps

from xsa.studies.factorial.analysis import at_rate, two_rate
from xsa.studies.factorial.design import CELLS, Cell
from xsa.studies.predict import Diffs, cochran_q, fit_design
from xsa.stack.presets import make_config, scaling_params
from xsa.studies.scale import W256_LONG, W256_SHORT

CANDIDATES = {
    "tokens per parameter": ("tokens_per_param",),
    "steps": ("steps",),
    "tokens seen": ("tokens",),
    "tokens per parameter + parameters": ("tokens_per_param", "params"),
    "steps + parameters": ("steps", "params"),
    "tokens seen + parameters": ("tokens", "params"),
}
# d12 as the seed paper trains it (nanochat 324e69c's recipe, 12 heads of 64, T = 2048)
D12 = make_config("d12", recipe="nanochat-324e69c")
PARSIMONY = 2.0
X4_SEEDS = range(210, 218)  # the scale study's x4 level with both arms at both rates (its check's seeds)
W256_SEEDS = range(210, 216)
# the conditions beside the cells, borrowed from the scale study's records: x4 at both common rates; at one
# rate also x1/3 and, held out (never fitted), width 256 (as (condition, held out))
X4 = Cell("x4 (1,536 steps)", "cpu-w64-d4-s1536", X4_SEEDS)
AT_ONE_RATE = ((Cell("x1/3 (128 steps)", "cpu-w64-d4-s128", X4_SEEDS), False),
               (Cell(W256_SHORT, "cpu-w256-d4-s128", W256_SEEDS), True), (Cell(W256_LONG, "cpu-w256-d4", W256_SEEDS), True))


class Degenerate(ValueError):
    """The conditions' effects admit no fit: a condition without spread between seeds, a singular design."""


@dataclass(frozen=True)
class Condition(Diffs):
    """A condition: its name, log2 of each axis, its per-pair differences, whether it is held out."""
    name: str
    axes: dict
    diffs: tuple[float, ...]
    held_out: bool = False

    @property
    def var(self) -> float:
        return float(np.var(self.diffs, ddof=1)) / self.n


def axes_of(cfg) -> dict:
    params = scaling_params(cfg.model)
    return dict(tokens_per_param=math.log2(cfg.num_tokens / params), steps=math.log2(cfg.num_iterations),
                tokens=math.log2(cfg.num_tokens), params=math.log2(params))


def condition_cells(cells=CELLS, rate: float | None = None) -> list[tuple[Cell, bool]]:
    """(condition, held out) for each condition the fits read: the cells, then the borrowed ones (x4; at
    one rate also AT_ONE_RATE), one a shape and length: a borrowed condition at a cell's preset is that
    cell's, so a cell at x4 is counted once (as the cell)."""
    out, taken = [], set()
    for c, held in [*((c, False) for c in cells), (X4, False), *(AT_ONE_RATE if rate is not None else ())]:
        if c.preset not in taken:
            taken.add(c.preset)
            out.append((c, held))
    return out


def conditions(results: Path, rate: float | None = None, cells=CELLS) -> list[Condition]:
    """The conditions at both common rates (rate None: each seed's two-rate mean; the factorial's cells
    and the scale study's x4) or at one rate (rate 0.08: also length x1/3, and width 256 held out)."""
    out = [Condition(c.name, axes_of(c.config()),
                     tuple((two_rate(results, c) if rate is None else at_rate(results, c, rate)).values()), held)
           for c, held in condition_cells(cells, rate)]
    return [c for c in out if c.n >= 2]


def design(conds, names) -> np.ndarray:
    return np.array([[1.0, *(c.axes[a] for a in names)] for c in conds])


def fit(conds, names):
    """(beta, cov, tau2, sigma2) of the meta-regression on `names`, or None when it cannot be fitted."""
    return fit_design(conds, design(conds, names))


def predict(model, row: np.ndarray) -> tuple[float, float]:
    """(mean, variance of the condition's true effect) at a design row."""
    beta, cov, tau2, _ = model
    return float(row @ beta), float(row @ cov @ row) + tau2


def loco(conds, names) -> float | None:
    """The leave-one-condition-out score (lower is better); None where a fit without one cannot be made."""
    score = 0.0
    for j, c in enumerate(conds):
        model = fit(conds[:j] + conds[j + 1:], names)
        if model is None:
            return None
        mu, var = predict(model, design([c], names)[0])
        score += (c.mean - mu) ** 2 / (var + c.var)
    return score


def heterogeneity(conds, names) -> dict:
    """Cochran's Q_E of the fixed-effect fit: its value, degrees of freedom and p."""
    return cochran_q(np.array([c.mean for c in conds]), np.array([c.var for c in conds]), design(conds, names))


def d12_numbers(conds, names) -> dict:
    """Each named candidate's number at d12, fitted on `conds`: its mean and 95% interval for the true
    effect there (t on the candidate's residual degrees of freedom), conditional on the candidate."""
    out = {}
    for name in names:
        axes = CANDIDATES[name]
        t = sps.t.ppf(0.975, len(conds) - len(axes) - 1)
        mu, var = predict(fit(conds, axes), design([Condition("d12", axes_of(D12), ())], axes)[0])
        out[name] = dict(value=mu, lo=mu - t * math.sqrt(var), hi=mu + t * math.sqrt(var))
    return out


def compare(results: Path, rate: float | None = None) -> dict:
    """Every candidate's score; the chosen one (the lowest, ties listed) with its heterogeneity test,
    residuals, held-out predictions and conditional d12 number; and every candidate's d12 number, which
    the text sets side by side where the registered table names no account. Degenerate where the
    effects admit no fit (a condition with no spread between seeds, a singular fit), naming them."""
    every = conditions(results, rate)
    fitted = [c for c in every if not c.held_out]
    where = "each seed's two-rate mean" if rate is None else f"matrix LR {rate:g}"
    if flat := [c.name for c in fitted if not c.var > 0]:  # not > 0: zero, or NaN
        raise Degenerate(f"the factorial's model comparison at {where}: {', '.join(flat)} ha"
                         f"{'s' if len(flat) == 1 else 've'} the same effect on every seed (no spread between "
                         "seeds), and the registered criterion weighs a condition by its variance; no training "
                         "gives that: check those conditions' records")
    try:
        return _compare(every, fitted, where)
    except np.linalg.LinAlgError as e:
        raise Degenerate(f"the factorial's model comparison at {where}: a fit is singular ({e}) on "
                         f"{', '.join(c.name for c in fitted)}") from None


def _compare(every, fitted, where: str) -> dict:
    scores = {name: loco(fitted, axes) for name, axes in CANDIDATES.items()}
    if bad := [k for k, v in scores.items() if v is not None and not math.isfinite(v)]:
        raise Degenerate(f"the factorial's model comparison at {where}: the scores of {', '.join(bad)} are not "
                         "finite (a fit with no residual variance)")
    valid = {k: v for k, v in scores.items() if v is not None}
    if not valid:
        return dict(conditions=[c.name for c in fitted], scores=scores, chosen=[], reason="too few conditions")
    one = {k: v for k, v in valid.items() if len(CANDIDATES[k]) == 1}
    two = {k: v for k, v in valid.items() if len(CANDIDATES[k]) == 2}
    pool = two if two and (not one or min(two.values()) < min(one.values()) - PARSIMONY) else one
    best = min(pool.values())
    chosen = [k for k, v in pool.items() if abs(v - best) <= 1e-9 * max(1.0, best)]
    axes = CANDIDATES[chosen[0]]
    model = fit(fitted, axes)
    residuals = {c.name: c.mean - predict(model, design([c], axes)[0])[0] for c in fitted}
    held = {c.name: dict(observed=c.mean, predicted=predict(model, design([c], axes)[0])[0]) for c in every if c.held_out}
    return dict(conditions=[c.name for c in fitted], scores=scores, chosen=chosen,
                heterogeneity=heterogeneity(fitted, axes), residuals=residuals, held_out=held,
                slopes={a: float(model[0][i + 1]) for i, a in enumerate(axes)}, tau2=model[2],
                d12_conditional=d12_numbers(fitted, chosen), d12_every=d12_numbers(fitted, valid))
