"""
The seed paper's claims, judged from the confirmatory estimates (xsa/books/estimates.py): each Claim
of the study names one comparison and one metric; its row gives the estimate it is judged by (the
robust study's pre-registered primary for val bpb at the smaller depth, where that study has records;
otherwise the study's own estimate on its planned seeds), and the verdict:

    supported      the whole 95% interval points the way the seed paper reports
    contradicted   the whole interval points the other way
    not decided    the interval includes no effect

That verdict is at CPU scale, and the row says on what it rests (each arm at its tuned rate, both
arms at one rate, or a one-thread CPU timing). At the seed paper's own scale a claim is "not tested"
until the GPU study has a record of it: a CPU-scale measurement neither supports nor contradicts a
d12 or d24 claim, and a CPU timing says nothing of GPU overhead.

A claim another study's registration judges (Claim.key: the optimizer study's) is read by that
registration's rule (Claim.rule): "not higher", a claim of no harm such as stable training, is
contradicted only where the estimate is decided above zero ("stable means not decided above zero",
results/optimizer/preregistration.md); "carries", whether XSA's gain carries over between optimizers,
by the interaction's registered reading (carries over: supported; larger under either optimizer:
contradicted; cannot tell: not decided).

Relative metrics are judged in percent of the seed's own baseline; CORE, whose values sit near zero
at small scale, in absolute points (xsa/checks/metrics.py says which).
"""

from __future__ import annotations

from xsa.books.estimates import slug
from xsa.report.writing import verdict_of


def claim_key(claim, study, estimates: dict) -> str:
    """The key (study.key) of the estimate a claim is judged by."""
    if claim.key:
        return claim.key
    if claim.metric == "overhead":
        return f"{study.name}.{slug('overhead ' + study.comparison(claim.comparison).a.preset)}"
    if claim.comparison == study.primary and claim.metric == "val_bpb" and study.robustness in estimates \
            and estimates[study.robustness].get("primary") is not None \
            and estimates[study.robustness]["primary"].value is not None:
        return f"{study.robustness}.primary"
    base = "primary" if claim.comparison == study.primary else slug(claim.comparison)
    return f"{study.name}.{base}" + ("" if claim.metric == "val_bpb" else f"_{claim.metric}")


def claims_table(study, estimates: dict) -> list[dict]:
    """One row a claim: the claim, the seed paper's numbers, the estimate's key and value, the verdict."""
    rows = []
    for c in study.claims:
        key = claim_key(c, study, estimates)
        name, _, k = key.partition(".")
        e = estimates.get(name, {}).get(k)
        if e is None:
            continue
        if c.metric == "overhead":  # the claim is of GPU time: a CPU timing is shown beside it, never graded
            verdict = "not graded (CPU timing)"
        else:
            verdict = judge(c, e, estimates.get(name, {}).get(f"{k}_reading"))
        rows.append(dict(claim=c.text, theirs=c.theirs, key=key, metric=c.metric, unit=e.unit, estimate=e.value,
                         ci95=e.ci, n=e.n, verdict=verdict, definition=e.definition, basis=basis(c, key, study),
                         their_scale=their_scale(c, estimates)))
    return rows


# the interaction's registered readings (xsa/books/verdicts.py: OUTCOMES["carries"]) as claim verdicts
CARRIES = {"carries over": "supported", "larger under Muon": "contradicted", "larger under AdamW": "contradicted",
           "cannot tell": "not decided"}


def judge(claim, e, reading=None) -> str:
    """The claim's verdict at CPU scale, by its rule (the module's docstring)."""
    if claim.rule == "carries":
        return CARRIES[reading.verdict] if reading is not None else "cannot decide"
    if claim.rule == "not higher":
        if e.value is None:
            return "cannot decide"
        return "contradicted" if e.decided and e.value > 0 else "supported"
    return verdict_of(e, claim.expect)


def basis(claim, key: str, study) -> str:
    """What the CPU-scale verdict rests on."""
    if claim.metric == "overhead":
        return "1-thread CPU timing"
    if claim.rule == "not higher":
        return "learning-rate sweep; stable unless decided above zero (registered)"
    if claim.rule == "carries":
        return "tuned rates under both optimizers"
    if study.robustness and key.startswith(study.robustness + "."):
        return "tuned rates"
    lrs = {a.get("matrix_lr") for a in study.comparison(claim.comparison).arms()}
    return f"one rate ({', '.join(f'{lr:g}' for lr in sorted(lrs))})"


def their_scale(claim, estimates: dict) -> str:
    """The verdict at the seed paper's depth, from the GPU records, or "not tested": val bpb at d12 from
    the d12 test's registered two-rate endpoint where it has one (several seeds, both rates), else the
    GPU study's single pair."""
    depth = claim.theirs.split(":")[0]
    test = estimates.get("d12-test", {}).get("primary")
    if depth == "d12" and claim.metric == "val_bpb" and test is not None and test.value is not None:
        return verdict_of(test, claim.expect)
    gpu = estimates.get("gpu", {})
    key = ("primary" if depth == "d12" else depth) + ("" if claim.metric == "val_bpb" else f"_{claim.metric}")
    e = gpu.get(key) if depth in ("d12", "d24") and claim.metric != "overhead" else None
    if e is None or e.value is None:
        return "not tested"
    return verdict_of(e, claim.expect)
