"""
The verdicts of the paper's text: what a sentence must say, decided once in code from the estimates and
stored beside them in results/estimates/<study>.json (family "verdict"), so that the template chooses
among its sentences by key and compares no numbers itself:

    {% if s.model_fit.verdict == "fails" %} does not fit its own data ... {% endif %}
    XSA {{ claim("scale.length_x1_3", s.length_x1_3_direction.verdict, say=...) }}

A verdict is an Estimate whose `verdict` is one of its kind's OUTCOMES (the words claim() checks, where
the sentence is a claim), whose `unit` is its kind, whose `definition` states the rule, and whose `runs`
are those of the estimate it judges. Each study's verdicts are made where its estimates are
(scale_verdicts in xsa/books/scale.py's scale_book).

A study whose registration marks it final (xsa/studies/kinds.py: Study.final) has the fact `final`
(1) among its estimates, and its text carries no interim reading: the template states it with
`whole(...)`, which stops the build, naming what is missing, where such a study's estimates are not whole.

    book.update(scale_verdicts(book, seed_effect))   # the scale study's verdicts
    est["final"] = registered(study)                 # every study's registration flag

The tables' own decisions are made here too, so no table function decides one itself:

    side(e)                          # higher, lower or includes 0: the diagnostics effects table's word
    seed_paper_change(depth, metric) # the seed paper's change, beside ours in the main table
"""

from __future__ import annotations

from pathlib import Path

from xsa.books.estimates import Estimate, fact
from xsa.checks import ledger
from xsa.checks.integrity import RecordError
from xsa.studies import registry
from xsa.studies.registry import get_study
from xsa.base.stats import relative
from xsa.studies.registry import SEED_PAPER, seed_paper_effect

# each kind of verdict and its outcomes, in the order its rule tries them
OUTCOMES = {
    "direction": ("lowers", "raises", "does not measurably change"),
    "trend": ("grows with", "shrinks with", "does not measurably depend on"),
    "interval": ("excludes", "includes"),
    "fit": ("fails", "fits"),
    "anchors": ("inside", "partly outside", "outside"),
    # the factorial study's registered decision table (xsa/studies/factorial/analysis.py: axis_verdict), and the
    # length axis of the model its criterion chooses (xsa/studies/factorial/models.py; steps and tokens seen tie)
    "axis": ("steps", "tokens per parameter", "both", "undecided", "neither account"),
    "model": ("tokens per parameter", "steps", "with parameters", "mixed"),
    # the sink study's registered decision table per mechanism (xsa/studies/sink_analysis.py: outcome), and
    # whether a study under way has its last record (its text states no outcome before)
    "sink": ("sink", "partly", "not sink", "opposite", "undecided"),
    # the x4 check's registered reading (results/scale-check/preregistration.md, "How the paper reads them")
    "selection": ("overstated", "holds"),
    # the optimizer study's registered reading of its interaction (results/optimizer/preregistration.md)
    "carries": ("larger under Muon", "larger under AdamW", "carries over", "cannot tell"),
    "progress": ("complete", "training"),
}


# the larger-scale results §4 sets beside the model's d12 number (xsa/books/scale.py: scale_book)
ANCHOR_KEYS = ("anchor_nanochat", "anchor_modded_nanogpt", "anchor_golf")


class NotWhole(ValueError):
    """The text states a study whole (final, with no interim reading) that its estimates say is not."""


def _verdict(key: str, kind: str, outcome: str, rule: str, judged: Estimate | None = None) -> Estimate:
    if outcome not in OUTCOMES[kind]:
        raise ValueError(f"verdict {key!r}: {outcome!r} is not one of {OUTCOMES[kind]}")
    return Estimate(key, None, unit=kind, metric="", family="verdict", definition=rule, verdict=outcome,
                    runs=judged.runs if judged is not None else (), n=judged.n if judged is not None else 0)


def direction(key: str, e: Estimate) -> Estimate:
    """Which way an effect points: lowers or raises where its direction is decided, else does not
    measurably change."""
    outcome = ("does not measurably change" if not e.decided else "lowers" if e.value < 0 else "raises")
    return _verdict(f"{key}_direction", "direction", outcome, f"which way {key} points: lowers (raises) where its "
                    "95% interval lies below (above) zero and, in a Holm family, its Holm p is below 5%; else does "
                    "not measurably change", e)


def trend(key: str, e: Estimate) -> Estimate:
    """How XSA's gain moves along an axis, from a slope of its (negative-is-a-gain) effect per doubling:
    grows with (a decided negative slope), shrinks with (a decided positive one), or does not measurably
    depend on."""
    outcome = ("does not measurably depend on" if not e.decided else "grows with" if e.value < 0 else "shrinks with")
    return _verdict(f"{key}_trend", "trend", outcome, f"how XSA's gain moves with the axis of {key}: grows with "
                    "(shrinks with) where the slope's 95% interval lies below (above) zero and, in a Holm family, "
                    "its Holm p is below 5%; else does not measurably depend on", e)


def interval(key: str, e: Estimate, x: float, against: str) -> Estimate:
    """Whether an interval excludes or includes the value x."""
    outcome = "excludes" if e.ci.defined and e.ci.excludes(x) else "includes"
    return _verdict(f"{key}_{against}", "interval", outcome, f"whether the 95% interval of {key} excludes "
                    f"{against.replace('_', ' ')} ({x:g}); else includes", e)


def fit(key: str, p: float | None) -> Estimate:
    """Whether a model fits its own conditions: fails where its heterogeneity test rejects at 5%."""
    return _verdict(key, "fit", "fails" if p is not None and p < 0.05 else "fits",
                    "whether the registered model fits its own conditions: fails where Cochran's heterogeneity "
                    "test about its line (model_heterogeneity_p, post hoc) rejects at 5%; else fits")


def anchors(key: str, e: Estimate, values) -> Estimate:
    """Where the larger-scale results lie against an interval: inside (every one), outside (none),
    or partly outside."""
    inside = sum(e.ci.defined and e.lo <= v <= e.hi for v in values)
    outcome = "inside" if inside == len(values) else "outside" if not inside else "partly outside"
    return _verdict(key, "anchors", outcome, f"where the {len(values)} larger-scale results (anchor_*) lie against "
                    f"the 95% interval of {e.key}: inside where every one is within it, outside where none is, "
                    "else partly outside", e)


def side(e: Estimate) -> str:
    """Where an effect's 95% interval lies against zero, in the diagnostics effects table's words: higher
    (above), lower (below), includes 0, or n/a without an interval (no Holm family: a description)."""
    if not e.ci.defined:
        return "n/a"
    return "higher" if e.lo > 0 else "lower" if e.hi < 0 else "includes 0"


def seed_paper_change(depth: str, metric: str) -> float | None:
    """The seed paper's change at `depth` in `metric`, XSA against its baseline relative to the baseline
    (one run an arm, as the paper reports them: xsa/studies/registry.py, SEED_PAPER); None where it
    reports no such number."""
    arms = SEED_PAPER[depth]
    return relative(arms["base"].get(metric), arms["xsa1"].get(metric))


def scale_verdicts(book: dict, seed_effect: float) -> dict[str, Estimate]:
    """The scale study's verdicts (and its x4 check's), as §4 and Appendix C state them, from its book;
    the model's only once it can fit. `seed_effect`: the seed paper's d12 effect the text compares with."""
    out = {}
    for key in ("length_x1_3", "gate_at_width_64", "gate_at_8_heads", "width_256_128_steps", "width_256_length",
                "check_common_xsa_rate", "check_common_base_rate"):
        out[f"{key}_direction"] = direction(key, book[key])
    out["check_selection"] = selection("check_selection", book["check_base_rates"])
    for key in ("slope_tokens", "slope_heads", "heads_slope_w128"):
        if key in book:
            out[f"{key}_trend"] = trend(key, book[key])
    if "model_heterogeneity_p" in book:
        out["model_fit"] = fit("model_fit", book["model_heterogeneity_p"].value)
    if "prediction_d12" in book:
        d12 = book["prediction_d12"]
        out["prediction_d12_zero"] = interval("prediction_d12", d12, 0.0, "zero")
        out["prediction_d12_seed_paper"] = interval("prediction_d12", d12, seed_effect, "seed_paper")
        out["anchors_d12"] = anchors("anchors_d12", d12, [book[k].value for k in ANCHOR_KEYS])
    return out


def axis(key: str, outcome: str, judged: Estimate) -> Estimate:
    """The account of training length the factorial's two axis contrasts support, by its registered table."""
    return _verdict(key, "axis", outcome, "the factorial study's registered decision table over its two axis contrasts "
                    "(Holm p below 5%): steps where equal tokens per parameter is below zero and equal steps not "
                    "decided; tokens per parameter where equal steps is above zero and equal tokens per parameter not "
                    "decided; both, undecided (neither decided) or neither account (either decided the other way)",
                    judged)


def model(key: str, chosen) -> Estimate:
    """The length axis of the candidates the factorial's criterion chooses (ties listed in the definition)."""
    chosen = list(chosen)
    outcome = ("tokens per parameter" if chosen == ["tokens per parameter"] else
               "steps" if chosen and set(chosen) <= {"steps", "tokens seen"} else
               "with parameters" if chosen and all(c.endswith("+ parameters") for c in chosen) else "mixed")
    return _verdict(key, "model", outcome, "the length axis of the model the registered leave-one-condition-out "
                    f"criterion chooses (chosen: {', '.join(chosen) or 'none'}; at CPU scale steps and tokens seen "
                    "are one axis, and with parameters the three two-axis candidates one fit)")


def selection(key: str, e: Estimate) -> Estimate:
    """The x4 check's registered reading of the baseline at XSA's rate against its own (`e`): the x4 estimate
    overstates XSA's gain at tuned rates where that interval lies below zero (the baseline better at XSA's
    rate), else the baseline's selection holds on the check's seeds."""
    outcome = "overstated" if e.ci.defined and e.hi < 0 else "holds"
    return _verdict(key, "selection", outcome, "the x4 check's registered reading: overstated where the baseline's "
                    "change at XSA's rate against its own has its 95% interval below zero, else holds", e)


def sink(key: str, outcome: str, judged: Estimate) -> Estimate:
    """What the sink study's registered table says of one mechanism, from its pooled interaction and
    half-gain tests (Holm over the four of the decision family)."""
    return _verdict(key, "sink", outcome, "the sink study's registered decision table, from the pooled interaction I "
                    "and half-gain difference r (Holm p below 5%): opposite where I is decided below 0; partly where I "
                    "is decided above 0 and r below 0; sink where I is decided above 0 and r is at or above 0; not "
                    "sink where r is decided below 0 and I is not decided above 0; else undecided", judged)


def progress(key: str, done: int, declared: int, more: bool = False) -> Estimate:
    """Whether a study under way has every declared run's record (and, for an adaptive one, declares no
    more: `more`): complete, or training."""
    return _verdict(key, "progress", "complete" if declared and done == declared and not more else "training",
                    f"complete when every declared run has a final record ({done} of {declared} now) and the study "
                    "declares no more, else training")


def carries(key: str, e: Estimate) -> Estimate:
    """The optimizer study's registered reading of XSA's effect under Muon minus under AdamW: where decided
    (Holm), XSA's gain differs, larger under Muon (a negative difference: a larger drop in loss) or under
    AdamW; carries over where not decided and its interval lies within the seed paper's whole effect either
    side; else cannot tell."""
    bound = abs(seed_paper_effect("d12"))
    outcome = (("larger under Muon" if e.value < 0 else "larger under AdamW") if e.decided else
               "carries over" if e.ci.defined and -bound <= e.lo and e.hi <= bound else "cannot tell")
    return _verdict(key, "carries", outcome, "the optimizer study's registered reading of its interaction: where "
                    "decided after Holm, larger under Muon (negative) or AdamW (positive); carries over where not "
                    f"decided and within +/-{100 * bound:.2f}% (the seed paper's whole d12 effect, the registration's "
                    "yardstick); else cannot tell", e)


def registered(final: bool) -> Estimate:
    """The fact `final` of a study's estimates: 1 where its registration marks it final."""
    return fact("final", int(bool(final)), "flag", "1 where the study's registration marks it final "
                "(xsa/studies/kinds.py: Study.final): every run its rules declare has a finished record, and the "
                "text states it with no interim reading", family="registration")


def missing(est: dict) -> list[str]:
    """What keeps a study's estimates from being whole: an estimate with fewer pairs than its study
    declares, one not declared yet, runs declared without a finished record."""
    out = [f"{k} ({e.n} of {e.declared} pairs)" for k, e in est.items() if e.declared and e.n < e.declared]
    out += [f"{k} ({e.reason})" for k, e in est.items() if e.reason.startswith("not declared")]
    for k, declared in est.items():  # runs_declared beside runs_done (check_runs_declared beside check_runs_done)
        done = est.get(k.removesuffix("declared") + "done") if k.endswith("runs_declared") else None
        if done is not None and done.value < declared.value:
            out.append(f"{done.key} ({done.value} of {declared.value} runs)")
    return out


def whole(*studies) -> str:
    """'' where each study (the template's e.<study>) is registered final and its estimates are whole;
    else NotWhole naming the study and what it lacks. The template states with it the studies it
    writes with no interim reading."""
    problems = []
    for s in studies:
        flag = s.est.get("final")
        if flag is None or not flag.value:
            problems.append(f"{s.name}: its registration does not mark it final (xsa/studies/registry.py)")
        elif lacking := missing(s.est):
            problems.append(f"{s.name}: " + "; ".join(lacking))
    if problems:
        raise NotWhole("the text states these studies whole, with no interim reading, but:\n  "
                       + "\n  ".join(problems))
    return ""


def _few(ids: list[str], most: int = 12) -> str:
    return ", ".join(ids[:most]) + (f" and {len(ids) - most} more" if len(ids) > most else "")



def unwhole_problems(estimates: dict, results_dir, leave_out=()) -> list[str]:
    """The studies among `estimates` ({study: {key: Estimate}}, what a build is about to write) that
    are registered final (the fact `final`) but whose estimates are not whole (verdicts.missing): the
    text states such a study whole and would stop, so the build stops first, before it writes
    anything, naming what the study lacks and its declared runs without a finished record (a run left
    out by choice among them: a final study has no interim reading to leave it out of)."""
    out, leave_out = [], set(leave_out or ())
    for name, est in estimates.items():
        flag = est.get("final")
        if flag is None or not flag.value or not (lacking := missing(est)):
            continue
        runs = (get_study(name, results_dir).runs if name in registry.STUDIES else ())
        gone = [str(Path(results_dir) / "runs" / r.run_id) + (" (left out)" if r.run_id in leave_out else "")
                for r in runs if r.run_id in leave_out or not ledger.finished(results_dir, r.run_id)]  # its folder
        out.append(f"study {name!r} is registered final (its text states it whole, with no interim reading), but "
                   f"its estimates lack: {'; '.join(lacking)}" + (f"; its runs without a record: {_few(gone)}"
                                                                  if gone else ""))
    return out



def refuse_unwhole(study, estimates: dict, results_dir, leave_out=()) -> None:
    """Raise RecordError, before anything is written, where unwhole_problems finds any."""
    if problems := unwhole_problems(estimates, results_dir, leave_out):
        raise RecordError(f"the estimates of study {study.name!r} cannot make its paper ({len(problems)} problem"
                          f"{'s' if len(problems) > 1 else ''}; nothing was written):\n  " + "\n  ".join(problems)
                          + "\nrepair or retrain those runs; a run of a final study cannot be left out")
