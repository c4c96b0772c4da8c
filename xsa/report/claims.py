"""
The seed paper's claims, judged from our records: each Claim of the study names one comparison and
one metric; its verdict comes from the paired estimate and its 95% interval.
"""

from __future__ import annotations

from xsa.report.records import per_seed
from xsa.report.stats import Interval, paired
from xsa.report.tables import overhead


def verdict(n: int, ci: Interval, expect: str, threshold: float = 0.0) -> str:
    """expect 'lower'/'higher' than threshold: supported if the whole CI agrees, contradicted if the
    whole CI disagrees."""
    if not ci.defined:
        return "cannot decide (fewer than 2 paired seeds)" if n < 2 else "cannot decide"
    below, above = ci.hi < threshold, ci.lo > threshold
    if (expect == "lower" and below) or (expect == "higher" and above):
        return "supported"
    if (expect == "lower" and above) or (expect == "higher" and below):
        return "contradicted"
    return "cannot decide (CI includes no effect)"


METRIC_WORDS = {"diag_mass": "mean a_ii"}


def judge(claim, study, runs, tp: dict) -> dict:
    pair = study.comparison(claim.comparison)
    if claim.metric == "overhead":
        t = tp.get(pair.a.preset)
        if t is None:
            return None
        ratio, ci, clock = overhead(t)
        n_pairs = len((t.get("arms") or {}).get("baseline", {}).get("step_times_s") or [])
        return dict(claim=claim.text, theirs=claim.theirs,
                    ours=f"{pair.a.preset}: step-time overhead by {clock} (A/B in one process)",
                    estimate=ratio, n=f"{n_pairs} step pairs" if n_pairs else "A/B", ci95=ci,
                    verdict=verdict(1, ci, claim.expect, claim.threshold))
    d = paired(per_seed(runs, pair.a, claim.metric), per_seed(runs, pair.b, claim.metric))
    what = METRIC_WORDS.get(claim.metric, claim.metric)
    return dict(claim=claim.text, theirs=claim.theirs, ours=f"{pair.name}: XSA - baseline in {what}",
                estimate=d["mean"], n=d["n"], ci95=d["ci"],
                verdict=verdict(d["n"], d["ci"], claim.expect, claim.threshold))


def claims_table(study, runs, tp: dict) -> list[dict]:
    rows = [judge(c, study, runs, tp) for c in study.claims]
    return [r for r in rows if r is not None]
