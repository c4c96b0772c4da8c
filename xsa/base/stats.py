"""
Statistics of the report, as pure functions of numbers: t-intervals over seeds, paired differences,
contrasts of contrasts. Nothing here reads a file or formats text.

An interval is an `Interval` (lo, hi), a number pair; tables format it only when they write.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    """A 95% interval (lo, hi); None ends where it cannot be computed (fewer than two values)."""
    lo: float | None
    hi: float | None

    @property
    def defined(self) -> bool:
        return self.lo is not None and self.hi is not None

    def excludes(self, value: float) -> bool:
        return self.defined and not self.lo <= value <= self.hi

    def text(self, digits: int = 4) -> str:
        return "n/a" if not self.defined else f"[{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def _t_two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer df, in closed form (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2 == 1:
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        s = math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0
        return 2 / math.pi * (theta + s)
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


def t_critical(df: int, level: float = 0.95) -> float:
    """The two-sided critical value of Student's t (bisection on the exact CDF)."""
    lo, hi = 0.0, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_two_sided(mid, df) < level else (lo, mid)
    return (lo + hi) / 2


def mean_ci(values, level: float = 0.95) -> dict:
    """{n, mean, sd, ci: Interval} over the finite values; the interval needs at least two."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return dict(n=0, mean=None, sd=None, ci=Interval(None, None))
    mean = sum(xs) / n
    if n < 2:
        return dict(n=1, mean=mean, sd=None, ci=Interval(None, None))
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_critical(n - 1, level) * sd / math.sqrt(n)
    return dict(n=n, mean=mean, sd=sd, ci=Interval(mean - half, mean + half))


def differences(a: dict, b: dict) -> dict:
    """{seed: b - a} over the seeds both have (each a dict seed -> value, None for missing)."""
    return {s: b[s] - a[s] for s in sorted(a.keys() & b.keys()) if a[s] is not None and b[s] is not None}


def paired(a: dict, b: dict) -> dict:
    """b minus a per seed, as a mean with a t-interval (see mean_ci)."""
    return mean_ci(differences(a, b).values())


def contrast(first: dict, second: dict) -> dict:
    """(second's per-seed differences) minus (first's), as a mean with a t-interval."""
    return mean_ci([second[s] - first[s] for s in sorted(first.keys() & second.keys())])


def relative(a, b):
    """(b - a) / |a|: b's change relative to the baseline a (|a| keeps the sign of the change where the
    baseline is negative); None where either is missing or a is 0. The package's one copy of the
    formula (tests/test_one_idea.py checks that no other module writes it)."""
    return None if a is None or b is None or a == 0 else (b - a) / abs(a)


def relative_differences(a: dict, b: dict) -> dict:
    """{seed: relative(a[seed], b[seed])} over the seeds both have, in seed order: the effect relative to
    the seed's own baseline, paired by seed (a seed with a value missing, or a baseline of 0, has none)."""
    pairs = ((s, relative(a[s], b[s])) for s in sorted(a.keys() & b.keys()))
    return {s: d for s, d in pairs if d is not None}


def normal_cdf(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def power(n: int, sd: float, effect: float, level: float = 0.95) -> float:
    """Probability that a paired t-interval over n seeds excludes zero when the true mean difference
    is `effect` and the per-seed SD is `sd` (normal approximation to the noncentral t:
    P(|mean| / (sd / sqrt n) > t_crit(n - 1)))."""
    if n < 2 or sd <= 0:
        return float("nan")
    ncp = abs(effect) * math.sqrt(n) / sd
    t = t_critical(n - 1, level)
    return normal_cdf(ncp - t) + normal_cdf(-ncp - t)


def seeds_for_half_width(sd: float, half_width: float, level: float = 0.95, most: int = 1000) -> int | None:
    """The fewest paired seeds whose t-interval is at most +/-half_width at this per-seed SD."""
    for n in range(2, most + 1):
        if t_critical(n - 1, level) * sd / math.sqrt(n) <= half_width:
            return n
    return None


def seeds_needed(sd: float, effect: float, target: float = 0.8, level: float = 0.95, most: int = 1000) -> int | None:
    """The fewest paired seeds whose interval excludes zero with probability `target` (see power)."""
    for n in range(2, most + 1):
        if power(n, sd, effect, level) >= target:
            return n
    return None


def t_pvalue(mean: float | None, sd: float | None, n: int) -> float | None:
    """Two-sided p of a one-sample t-test of mean 0 (paired differences): None below two values."""
    if mean is None or sd is None or n < 2:
        return None
    if sd == 0:
        return 0.0 if mean else 1.0
    return 1.0 - _t_two_sided(abs(mean) / (sd / math.sqrt(n)), n - 1)


def holm(pvalues: list) -> list:
    """Holm's step-down adjustment over a family of len(pvalues) tests (family-wise error rate). A test
    not run (None) stays in the family as p = 1, so the family's size is the pre-registered one, and
    its adjusted p is None."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: 1.0 if pvalues[i] is None else pvalues[i])
    adjusted, running = [None] * m, 0.0
    for rank, i in enumerate(order):
        p = 1.0 if pvalues[i] is None else pvalues[i]
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = None if pvalues[i] is None else running
    return adjusted
