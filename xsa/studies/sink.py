"""
The sink study as data: is XSA's gain at CPU scale a sink effect? If a head gains from XSA because
excluding its own value makes "attend to myself" a cheap way to do nothing, then another way to do
nothing should take most of that gain away. Two such mechanisms, each on every layer and each with
and without XSA (alpha 1 on every layer), both arms at a common matrix LR:

    mechanism   config            what it adds to each head
    none        (the factorial's)  nothing
    gate        attn_gate=True     an output gate 2*sigmoid(Linear(x)), 1 at step 0 (Qiu et al. 2025)
    sink        attn_sink=True     a learned logit in the softmax's denominator with a zero value (gpt-oss)

at four of the factorial's cells and rates (xsa/studies/factorial/design.py), on its seeds:

    condition            seeds      mechanisms
    w64 short at 0.04    100-109    none, gate, sink
    w64 short at 0.08    100-109    none, gate, sink
    w64 long at 0.04     300-309    none, gate, sink
    w128 long at 0.08    300-309    none, gate       (where the sharp/diffuse split of the baseline shows)

The "none" arms are the factorial's arms, identical by value, so their records are reused. The
registered estimates are in xsa/studies/sink_analysis.py, the registration in sink_prereg.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from xsa.studies.factorial.design import SCALE, cell
from xsa.studies.kinds import Paired, Study, seed_by_seed, unique_runs

MECHANISMS = {"none": {}, "gate": dict(attn_gate=True), "sink": dict(attn_sink=True)}
TESTED = ("gate", "sink")  # the mechanisms the decision is about ("none" is the reference)
DECISION_PRIMARY = "gate, pooled"  # the primary: the pooled gate decision (not one pair)


@dataclass(frozen=True)
class Condition:
    """One factorial cell at one common rate, with the mechanisms it crosses with XSA."""
    cell: str
    rate: float
    mechanisms: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.cell} at {self.rate:g}"

    @property
    def seeds(self) -> range:
        return cell(self.cell).seeds

    @property
    def preset(self) -> str:
        return cell(self.cell).preset

    def pair(self, mechanism: str) -> Paired:
        """Baseline against XSA, both with the mechanism. "none" is the factorial's own pair (so its
        runs are the factorial's); the others add the mechanism's fields to both of its arms."""
        p = cell(self.cell).pair(self.rate)
        if mechanism == "none":
            return Paired(f"{self.name}, none", p.a, p.b)
        over = MECHANISMS[mechanism]
        return Paired(f"{self.name}, {mechanism}", p.a.with_(**over), p.b.with_(**over))

    def pairs(self) -> dict[str, Paired]:
        return {m: self.pair(m) for m in self.mechanisms}

    def config(self):
        return self.pair("none").b.config()


CONDITIONS = (Condition("w64 short", 0.04, ("none", "gate", "sink")),
              Condition("w64 short", 0.08, ("none", "gate", "sink")),
              Condition("w64 long", 0.04, ("none", "gate", "sink")),
              Condition("w128 long", 0.08, ("none", "gate")))


def condition(name: str) -> Condition:
    found = [c for c in CONDITIONS if c.name == name]
    if not found:
        raise KeyError(f"sink: no condition {name!r} (conditions: {', '.join(c.name for c in CONDITIONS)})")
    return found[0]


def with_mechanism(mechanism: str) -> tuple[Condition, ...]:
    """The conditions where `mechanism` is crossed with XSA."""
    return tuple(c for c in CONDITIONS if mechanism in c.mechanisms)


# -----------------------------------------------------------------------------
# The two registered families, by name (their estimates: sink_analysis.py)

def decision_names() -> list[str]:
    """The decision family (Holm over these four): per tested mechanism, pooled over its conditions,
    the interaction and the half-gain test."""
    return [f"{m}, pooled: {what}" for m in TESTED for what in ("interaction", "half gain")]


def contrast_names() -> list[str]:
    """The contrast family (Holm over all of these, apart from the decision family): per condition and
    mechanism, the interaction, the mechanism's own effect on the baseline and the baseline's
    diffuse-mode rate with against without it."""
    return [f"{c.name}: {what} {m}" for c in CONDITIONS for m in TESTED if m in c.mechanisms
            for what in ("interaction", "own effect", "diffuse rate")]


def ordered_runs() -> list:
    """Every run, in the order they train: seed by seed across the conditions (the k-th seed of every
    condition before the (k+1)-th of any), the cheapest condition first within a seed, and both arms
    of every mechanism of a seed together, so that a study stopped part-way is balanced."""
    return seed_by_seed(CONDITIONS)


def sink_study() -> Study:
    pairs = tuple(p for c in CONDITIONS for p in c.pairs().values())
    return Study(
        name="sink", scale=SCALE, runs=unique_runs(ordered_runs()), main=pairs,
        primary=CONDITIONS[0].pair("gate").name,  # a pair, as every study's; the decision is pooled (DECISION_PRIMARY)
        core_arms=(), estimate_from=100, diagnostics=None,  # the mechanism is read from the training log's diag
        rules=(("seeds", "10 pairs per condition and mechanism, fixed in advance: the factorial's seeds (100..109 "
                         "in the short conditions, 300..309 in the long ones); no stopping rule"),
               ("learning rates", "both arms of every mechanism at the condition's common matrix LR; no selection"),
               ("reuse", "the arms without a mechanism are the factorial's runs, identical by value"),
               ("decision", "per mechanism, pooled per seed over its conditions: the interaction (XSA's effect with "
                            "the mechanism minus without) and the half-gain difference (with it minus half of "
                            "without), one-sample t; Holm over the four; the outcome table of the registration")),
        secondary=tuple(contrast_names()),
        correction="Holm at a family-wise 5% within each of two families, separately: the decision family (4 "
                   "pooled tests) and the contrast family (per condition: interactions, own effects, diffuse-mode "
                   "rates by exact McNemar)",
        priorities="seed by seed across the four conditions, cheapest first, every mechanism and both arms of a "
                   "seed together",
        preregistered=("aab8ef3", "2026-12-07 04:29"), final=False,
    )
