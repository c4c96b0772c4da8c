"""
The sink study's book (xsa/studies/sink.py, its analysis xsa/studies/sink_analysis.py): how far its records
have come while it trains, and, once its last record has landed, its registered decision. Until then no
effect of the study is read into results/estimates/sink.json, as its registration says.

    sink_book(results)   # {key: Estimate}: the progress facts; when complete, the decision as well

The decision, per tested mechanism m (the output gate, the learned sink): XSA's pooled effect without and
with m on both arms (`m_xsa_without`, `m_xsa_with`), the interaction I (`m_interaction`) and the half-gain
difference r (`m_half_gain`) with Holm over the decision family, and the registered outcome (`m_outcome`, a
verdict); per condition and mechanism, XSA's effect (`xsa_<cell>_at_<rate>_<mechanism>`) for the figure.
"""

from __future__ import annotations

from pathlib import Path

from xsa.books.estimates import Estimate, fact, slug, summarised
from xsa.books.verdicts import progress, sink
from xsa.studies import sink_analysis as S
from xsa.studies.factorial import analysis as A
from xsa.studies.registry import get_study
from xsa.studies.rules import final_bpb
from xsa.studies.sink import CONDITIONS, TESTED, decision_names, sink_study, with_mechanism


# the verdicts its book holds once complete, by kind (xsa/books/verdicts.py: OUTCOMES); absent before
VERDICT_KINDS = {f"{m}_outcome": "sink" for m in TESTED}


def sink_book(results) -> dict[str, Estimate]:
    results = Path(results)
    study, reused = sink_study(), {r.run_id for r in get_study("factorial", results).runs}
    new = [r for r in study.runs if r.run_id not in reused]
    done = [r for r in study.runs if final_bpb(results, r) is not None]
    book = {e.key: e for e in (
        fact("runs_declared", len(study.runs), "runs", "runs the sink study declares (its registration)"),
        fact("runs_finished", len(done), "runs", "declared runs with a final record", runs=[r.run_id for r in done]),
        fact("runs_new", len(new), "runs", "declared runs that are not the factorial study's records"),
        fact("runs_new_finished", sum(r.run_id not in reused for r in done), "runs", "new runs with a final record"),
        fact("decision_tests", len(decision_names()), "tests", "the decision family (Holm over its members)"),
        fact("conditions", len(CONDITIONS), "conditions", "the cells and rates the mechanisms are crossed in"),
        fact("final", int(len(done) == len(study.runs)), "flag", "1 when every declared run has a record"),
        progress("progress", len(done), len(study.runs)))}
    if book["progress"].verdict == "complete":
        book.update(decision_book(results))
    return book


def _runs(c, mechanisms) -> list[str]:
    return [arm.run(s).run_id for m in mechanisms for p in [c.pair(m)] for arm in (p.a, p.b) for s in c.seeds]


def decision_book(results: Path) -> dict[str, Estimate]:
    """The registered decision, read from every record of the study (sink_book calls it when complete)."""
    family, book = S.decision_family(results), {}
    outcomes = S.decide(family)
    for m in TESTED:
        runs = [r for c in with_mechanism(m) for r in _runs(c, ("none", m))]
        for what, key in (("interaction", "interaction"), ("half gain", "half_gain")):
            d = family[f"{m}, pooled: {what}"]  # its Holm p as the analysis names it
            book[f"{m}_{key}"] = summarised(f"{m}_{key}", {**d, "p_holm": d["holm_p"]}, "decision",
                                            f"{m}, pooled over its conditions: {what} (I = E_m - G; r = E_m - G/2), "
                                            "per seed, one-sample t, Holm over the decision family", runs=runs)
        for side, of in (("without", "none"), ("with", m)):
            pooled = S.pooled(results, m, lambda r, c, _m, of=of: S.effect(r, c, of))
            book[f"{m}_xsa_{side}"] = summarised(
                f"{m}_xsa_{side}", A.summary(pooled.values()), "descriptive",
                f"XSA's relative effect on val bpb {side} the {m} on both arms, each seed's mean over the conditions "
                f"that cross the {m}", runs=runs)
        book[f"{m}_outcome"] = sink(f"{m}_outcome", outcomes[m]["outcome"], book[f"{m}_interaction"])
    for c in CONDITIONS:
        for m in c.mechanisms:
            key = slug(f"xsa {c.name} {m}")
            book[key] = summarised(key, A.summary(S.effect(results, c, m).values()), "descriptive",
                                   f"{c.name} (matrix LR): XSA's relative effect on val bpb with mechanism {m} on both "
                                   "arms, paired by seed", runs=_runs(c, (m,)))
    return book
