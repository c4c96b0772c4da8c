"""
The d12 test's decision rule (registered with the factorial study, re-registered before any d12
record): how the d12 effect, measured on a GPU at two common rates, is read against the CPU statement.

The CPU statement is the factorial study's conditional d12 number for the model its rules choose
(xsa/studies/factorial/models.py: `d12_conditional`), an interval [L, U] for the true effect at d12; where its
rules make no statement (candidates tied across axes, or none chosen), each candidate's interval is
read in turn. The d12 effect is the per-seed mean over the test's two rates with its 95% t-interval
[l, u] (`endpoint`):

    rejected      [l, u] lies wholly outside [L, U] (below L or above U): the statement fails, in
                  either direction
    consistent    [l, u] lies inside [L, U]
    inconclusive  neither ([l, u] straddles an end of [L, U])

[L, U] is a 95% interval for the truth under the CPU model, so a correct model leaves the truth outside
it 5% of the time, and the rule errs at most about that often. The first registration rejected where
[l, u] missed the central half of [L, U]: a correct model puts the truth outside its central half a
fifth to a third of the time, and a d12 interval far narrower than [L, U] then rejects it
(`error_rate` measures both rules; the registration states the numbers).

    means, per = endpoint(results, study)   # per seed, the two-rate mean; and each rate's effect
    cpu = cpu_statement(results)             # {candidate: (L, U, degrees of freedom)}
    verdict((l, u), (L, U))                  # rejected, consistent or inconclusive

xsa/books/factorial.py (`d12_book`) makes them the test's estimates, which its paper and the claims
table read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import stats as sps

from xsa.studies.factorial.analysis import relative_effects
from xsa.studies.factorial.models import CANDIDATES, Degenerate, compare, conditions


def central_half(lo: float, hi: float) -> tuple[float, float]:
    q = (hi - lo) / 4
    return lo + q, hi - q


def rejects(l, u, lo, hi):
    """The registered rule: the d12 interval lies wholly outside the CPU interval (arrays or floats)."""
    return (u < lo) | (l > hi)


def rejects_central_half(l, u, lo, hi):
    """The first registration's rule, replaced before any d12 record: the d12 interval misses the
    central half of the CPU interval. Kept to state how often it erred."""
    c_lo, c_hi = central_half(lo, hi)
    return (u < c_lo) | (l > c_hi)


RULES = {"registered": rejects, "central half (replaced)": rejects_central_half}


def verdict(d12: tuple[float, float], cpu: tuple[float, float]) -> str:
    """The d12 interval read against the CPU statement's interval, by the registered rule."""
    (l, u), (lo, hi) = d12, cpu
    if not (l <= u and lo <= hi):
        raise ValueError(f"d12 test: an interval whose low end is above its high end: d12 {d12}, CPU {cpu}")
    if rejects(l, u, lo, hi):
        return "rejected"
    if lo <= l and u <= hi:
        return "consistent"
    return "inconclusive"


# -----------------------------------------------------------------------------
# How often the rule errs, by simulation

DRAWS = 20_000


def t_critical(df: int) -> float:
    """The two-sided 95% critical value of Student's t (scipy's: the simulation asks for it often)."""
    return float(sps.t.ppf(0.975, df))


def _truths(rng, cpu: tuple[float, float], df: int, truth, draws: int) -> np.ndarray:
    """True d12 effects: `truth` a number (fixed there), "centre" (the interval's middle), "across"
    (uniform over it) or "model" (as the CPU model says: the middle plus the interval's half-width
    over t_df times a Student t draw on df, so that [L, U] holds the truth 95% of the time)."""
    lo, hi = cpu
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    if truth == "centre":
        return np.full(draws, mid)
    if truth == "across":
        return rng.uniform(lo, hi, draws)
    if truth == "model":
        return mid + half / t_critical(df) * rng.standard_t(df, draws)
    return np.full(draws, float(truth))


def error_rate(cpu: tuple[float, float], df: int, n: int, sd: float, truth="model", rule: str = "registered",
               draws: int = DRAWS, seed: int = 0) -> float:
    """The share of simulated d12 tests whose verdict is "rejected": each draw a true effect (`_truths`),
    n seeds' two-rate effects normal about it with SD `sd`, their 95% t-interval read against `cpu` by
    `rule`. Against a correct model ("model", "centre", "across") it is the rule's error rate; at an
    effect outside [L, U] it is its power."""
    rng = np.random.default_rng(seed)
    theta = _truths(rng, cpu, df, truth, draws)
    x = theta[:, None] + sd * rng.standard_normal((draws, n))
    mean, half = x.mean(axis=1), t_critical(n - 1) * x.std(axis=1, ddof=1) / np.sqrt(n)
    return float(np.mean(RULES[rule](mean - half, mean + half, *cpu)))


# -----------------------------------------------------------------------------
# The test's estimates, read from its records

def cpu_statement(results: Path) -> dict[str, tuple[float, float, int]]:
    """{candidate: (L, U, degrees of freedom)}: the conditional d12 interval of each model the factorial's
    criterion chooses at each seed's two-rate mean (its registered comparison); empty where it chooses
    none (too few conditions) or its effects admit no fit."""
    if not [c for c in conditions(results) if not c.held_out]:  # no factorial record: no statement to test
        return {}
    try:
        cmp = compare(results)
    except Degenerate:
        return {}
    return {name: (d["lo"], d["hi"], len(cmp["conditions"]) - len(CANDIDATES[name]) - 1)
            for name, d in cmp.get("d12_conditional", {}).items()}


def endpoint(results: Path, study) -> tuple[dict[int, float], dict[str, dict[int, float]]]:
    """({seed: the mean over the test's rates of XSA's relative change}, {pair: {seed: that rate's
    change}}): a seed counts in the mean once it has both arms at every rate."""
    seeds = sorted({r.seed for r in study.runs})
    per = {p.name: relative_effects(results, p.a, p.b, seeds) for p in study.main}
    both = set.intersection(*(set(v) for v in per.values())) if per else set()
    return {s: sum(v[s] for v in per.values()) / len(per) for s in sorted(both)}, per
