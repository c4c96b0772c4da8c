"""
The seed paper's claims, judged from our records. Each Claim of the study names one comparison and
one metric; the verdict states the direction and size of our estimate with its 95% interval, and
whether that interval excludes no effect and whether it excludes the seed paper's own effect:

    XSA changes val bpb by +0.12% [+0.05%, +0.19%] (n = 8): excludes no effect; excludes the seed paper's -0.32%

Relative metrics (val bpb, the likelihood in bits per byte, the diagonal mass) are judged in percent
of the seed's own baseline; CORE, whose values sit near zero at small scale, in absolute points.
"""

from __future__ import annotations

from xsa.stats import Interval
from xsa.report.metrics import label, relative as is_relative
from xsa.report.tables import effect, overhead


def verdict(n: int, ci: Interval, expect: str, threshold: float = 0.0) -> str:
    """expect 'lower'/'higher' than threshold: supported if the whole CI agrees, contradicted if
    the whole CI disagrees, else not decided."""
    if not ci.defined:
        return "cannot decide (fewer than 2 paired seeds)" if n < 2 else "cannot decide"
    below, above = ci.hi < threshold, ci.lo > threshold
    if (expect == "lower" and below) or (expect == "higher" and above):
        return "supported"
    if (expect == "lower" and above) or (expect == "higher" and below):
        return "contradicted"
    return "not decided (the interval includes the threshold)" if threshold else "not decided (the interval includes no effect)"


def _pct(x: float) -> str:
    return f"{100 * x:+.2f}%"


def _num(x: float) -> str:
    return f"{x:+.4f}"


def statement(what: str, est, ci: Interval, n: int, seed, relative: bool) -> str:
    """The verdict sentence of item 5: estimate [interval] (n): zero excluded?; the seed's effect excluded?"""
    f = _pct if relative else _num
    if est is None or not ci.defined:
        return f"XSA's change in {what}: not enough paired seeds (n = {n})"
    text = (f"XSA changes {what} by {f(est)} [{f(ci.lo)}, {f(ci.hi)}] (n = {n}): "
            f"{'excludes' if ci.excludes(0.0) else 'includes'} no effect")
    if seed is not None:
        text += f"; {'excludes' if ci.excludes(seed) else 'includes'} the seed paper's {f(seed)}"
    return text


def judge(claim, study, runs, tp: dict) -> dict | None:
    pair = study.comparison(claim.comparison)
    if claim.metric == "overhead":
        t = tp.get(pair.a.preset)
        if t is None:
            return None
        ratio, ci, clock = overhead(t)
        n_pairs = len((t.get("arms") or {}).get("baseline", {}).get("step_times_s") or [])
        text = (f"XSA's step time is {_pct(ratio)} [{_pct(ci.lo)}, {_pct(ci.hi)}] of the baseline's "
                f"({n_pairs} ABBA step pairs, by {clock}): "
                f"{'below' if ci.hi < claim.threshold else 'not below'} {claim.threshold:.0%}")
        return dict(claim=claim.text, theirs=claim.theirs,
                    ours=f"{pair.a.preset}: step-time overhead by {clock} (A/B in one process)",
                    estimate=ratio, ci95=ci, n=n_pairs, excludes_zero=ci.excludes(0.0), excludes_theirs=None,
                    verdict=verdict(n_pairs, ci, claim.expect, claim.threshold), statement=text)
    e = effect(runs, pair.a, pair.b, claim.metric)
    relative = is_relative(claim.metric)
    est, ci = (e["rel_mean"], e["rel_ci"]) if relative else (e["mean"], e["ci"])
    what = label(claim.metric)
    return dict(claim=claim.text, theirs=claim.theirs, ours=f"{pair.name}: XSA - baseline in {what}"
                + (" (relative)" if relative else ""),
                estimate=est, ci95=ci, n=e["n"], excludes_zero=ci.excludes(0.0) if ci.defined else None,
                excludes_theirs=ci.excludes(claim.seed_effect) if ci.defined and claim.seed_effect is not None else None,
                verdict=verdict(e["n"], ci, claim.expect, claim.threshold),
                statement=statement(what, est, ci, e["n"], claim.seed_effect, relative))


def claims_table(study, runs, tp: dict) -> list[dict]:
    rows = [judge(c, study, runs, tp) for c in study.claims]
    return [r for r in rows if r is not None]
