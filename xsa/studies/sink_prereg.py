"""
The sink study's registration, generated from its definition (xsa/studies/sink.py) and its analysis
code (sink_analysis.py). Its power and its CPU time are computed from the factorial study's committed
records only (the arms without a mechanism, and the wall times of the same shapes): the study's own
records, wherever they are, are left out, so the text is the same before and after its runs.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path

from xsa.studies.factorial import analysis as A
from xsa.studies.factorial.design import factorial_study
from xsa.studies.factorial.prereg import cpu_seconds_per_step
from xsa.base.records import records_without
from xsa.base.stats import power, seeds_needed
from xsa.studies import sink_analysis as S
from xsa.studies.sink import CONDITIONS, MECHANISMS, TESTED, Condition, contrast_names, sink_study, with_mechanism

BUDGET_HOURS = 15.0  # the CPU time this study may spend
SD_FACTOR = math.sqrt(2)  # I = E_m - G: two effects of equal SD, taken as independent
TARGET = 0.8
DECISION_TESTS = 4


def new_runs(c: Condition) -> list:
    """The condition's runs that the factorial has not declared (the ones this study trains)."""
    old = {r.run_id for r in factorial_study().runs}
    return [arm.run(s) for p in c.pairs().values() for arm in p.arms() for s in c.seeds if arm.run(s).run_id not in old]


def _hours(results: Path, c: Condition, runs: int) -> tuple[float, float, int]:
    """(CPU hours of `runs` runs of the condition, seconds a step, records timed)."""
    per_step, n = cpu_seconds_per_step(results, c.cell.split()[0])
    return runs * per_step * c.config().num_iterations / 3600, per_step, n


def _pct(x, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{100 * x:+.{digits}f}%"


def _sd(x) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def _num(x, fmt: str = ".2f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def _power(n: int, sd, effect, level: float = 0.95):
    return None if sd is None or effect is None or not sd else power(n, sd, effect, level)


def _needed(sd, effect, level: float = 0.95):
    return None if sd is None or effect is None or not sd else seeds_needed(sd, effect, TARGET, level)


def gain(values) -> tuple:
    """(mean G, SD of G, n) from the factorial's per-seed effects; the assumed SD of I and the sink
    account's predicted I (half of |mean G|)."""
    st = A.summary(values)
    sd_i = None if st["sd"] is None else SD_FACTOR * st["sd"]
    return st["value"], st["sd"], st["n"], sd_i, None if st["value"] is None else abs(st["value"]) / 2


def _conditions(results: Path) -> tuple[list[str], float]:
    rows, total = [], 0.0
    for c in CONDITIONS:
        cfg = c.config()
        new = new_runs(c)
        hours, per_step, n = _hours(results, c, len(new))
        total += hours
        rows.append(f"| {c.name} | `{c.preset}` | {cfg.model.n_embd} | {cfg.model.n_head} of {cfg.model.head_dim} | "
                    f"{cfg.num_iterations} | {c.rate:g} | {', '.join(c.mechanisms)} | {c.seeds.start}..{c.seeds.stop - 1} | "
                    f"{len(new)} | {_num(hours, '.1f')} (at {_num(per_step, '.3f')} s a step, {n} records) |")
    return rows, total


def _condition_power(results: Path) -> list[str]:
    """Per condition: the factorial's spread of G and the power of I's test at the sink account's effect."""
    worst = 1 - A.ALPHA / len(contrast_names())
    rows = []
    for c in CONDITIONS:
        mean, sd, n, sd_i, pred = gain(S.effect(results, c, "none").values())
        rows.append(f"| {c.name} | {n} | {_pct(mean)} | {_sd(sd)} | {_sd(sd_i)} | {_pct(pred)} | "
                    f"{_num(_power(10, sd_i, pred))} | {_num(_power(10, sd_i, pred, worst))} | "
                    f"{_num(_power(20, sd_i, pred))} | {_needed(sd_i, pred) or 'n/a'} |")
    return [
        f"| condition | factorial pairs | mean G | SD of G | SD of I (x{SD_FACTOR:.3f}) | predicted I | power, 10 "
        f"seeds | 10 seeds at 5%/{len(contrast_names())} | 20 seeds | seeds for {TARGET:g} |",
        "|---|---|---|---|---|---|---|---|---|---|", *rows]


def _pooled_power(results: Path) -> tuple[list[str], dict]:
    """Per tested mechanism: the pooled test's power at the registered 20 seeds and the seeds it needs."""
    rows, needed = [], {}
    worst = 1 - A.ALPHA / DECISION_TESTS
    for m in TESTED:
        mean, sd, n, sd_i, pred = gain(S.pooled(results, m, lambda r, c, _m: S.effect(r, c, "none")).values())
        seeds = len({s for c in with_mechanism(m) for s in c.seeds})
        needed[m] = (_needed(sd_i, pred), _needed(sd_i, pred, worst), seeds)
        rows.append(f"| {m} | {', '.join(c.name for c in with_mechanism(m))} | {n} | {_pct(mean)} | {_sd(sd)} | "
                    f"{_sd(sd_i)} | {_pct(pred)} | {_num(_power(seeds, sd_i, pred))} | "
                    f"{_num(_power(seeds, sd_i, pred, worst))} | {_num(_power(2 * seeds, sd_i, pred))} | "
                    f"{needed[m][0] or 'n/a'} ({needed[m][1] or 'n/a'} at 5%/{DECISION_TESTS}) |")
    return [
        "| mechanism | pooled over | factorial seeds | mean pooled G | SD of pooled G | SD of I | predicted I | power, "
        f"registered seeds | at 5%/{DECISION_TESTS} (Holm's worst case) | twice the seeds | pooled seeds for {TARGET:g} |",
        "|---|---|---|---|---|---|---|---|---|---|---|", *rows], needed


def _budget(total: float, needed: dict) -> list[str]:
    """Whether the budget allows the seeds that 0.8 needs (each further seed costs a tenth of the design)."""
    per_seed = total / 10
    spare = BUDGET_HOURS - total
    fits = max(0, math.floor(spare / per_seed)) if per_seed and math.isfinite(per_seed) else 0
    short = [m for m, (n, _, seeds) in needed.items() if n is None or n > seeds]
    line = (f"Each further seed of every condition costs about {_num(per_seed, '.1f')} CPU hours. The design's "
            f"{_num(total, '.1f')} CPU hours against a budget of about {BUDGET_HOURS:g}: ")
    if not short:
        return [line + "the registered seeds already reach a power of 0.8 for the predicted interaction.", ""]
    if fits == 0:
        return [line + "the budget does not allow more seeds. The study keeps 10 seeds per condition, and its power "
                f"for the interaction the sink account predicts is the one above, short of {TARGET:g} for "
                f"{' and '.join(short)}; a study that fails to decide is reported as undecided, never as no effect.",
                ""]
    return [line + f"{fits} more seed(s) of every condition would fit, short of what {TARGET:g} needs; the "
            "registered seeds stay at 10 per condition (the factorial's, so that no arm without a mechanism is "
            "retrained).", ""]


def _decision_table() -> list[str]:
    return [
        "| outcome | decision rule (Holm p below 0.05 in the decision family) | what the paper says |",
        "|---|---|---|",
        f"| sink | pooled I decided above 0, and mean pooled r at or above 0 | \"{S.OUTCOMES['sink']}\" |",
        f"| partly | pooled I decided above 0, and pooled r decided below 0 | \"{S.OUTCOMES['partly']}\" |",
        f"| not sink | pooled r decided below 0, and pooled I not decided above 0 | \"{S.OUTCOMES['not sink']}\" |",
        f"| opposite | pooled I decided below 0 | \"{S.OUTCOMES['opposite']}\" |",
        f"| undecided | anything else | \"{S.OUTCOMES['undecided']}\" |", ""]


def _head(study, rows, hours) -> list[str]:
    return [
        "# Pre-registration: the `sink` study", "",
        "Generated from `xsa/studies/sink.py` by `xsa/studies/sink_prereg.py`; its analysis code "
        "(`xsa/studies/sink_analysis.py`) is committed with this file, before the study's first record. "
        f"Scale: {study.scale}.", "",
        "## Question", "",
        "Is XSA's gain at this scale a sink effect? Excluding a head's own value makes attending to itself a "
        "cheap way for the head to do nothing. If that is what XSA's gain is, another way for a head to do "
        "nothing, an output gate or a learned sink logit, should take most of the gain away.", "",
        "## Conditions", "",
        "Four of the factorial study's cells and rates, on its seeds. Every run: 4 layers, T = 512, 8 rows a step "
        "(4,096 tokens), the compiled CPU path (fp32), one thread; XSA is alpha 1 on every layer; both arms of a "
        "mechanism at the condition's matrix LR.", "",
        "| condition | preset | width | heads | steps | matrix LR | mechanisms | seeds | new runs | CPU hours |",
        "|---|---|---|---|---|---|---|---|---|---|", *rows, "",
        f"{len(study.runs)} runs in all; the {len(study.runs) - sum(len(new_runs(c)) for c in CONDITIONS)} without a "
        "mechanism are the factorial's records, identical by value, and are reused (their values were known when "
        f"this was written); the other {sum(len(new_runs(c)) for c in CONDITIONS)} are new. Estimated CPU time "
        f"of the new runs: {_num(hours, '.1f')} hours (each shape's CPU seconds a step on the factorial's and "
        "earlier studies' committed compiled records, times the condition's steps; the gate's and the sink's "
        "own cost is not in it and is measured in the throughput table).", "",
        "## Arms", "",
        "Each condition crosses baseline and XSA with each of its mechanisms, on every layer:", "",
        f"- **none**: the factorial's arms (`{CONDITIONS[0].pair('none').a.name}`, `{CONDITIONS[0].pair('none').b.name}`);",
        f"- **gate** (`{', '.join(f'{k}={v}' for k, v in MECHANISMS['gate'].items())}`): each head's output times "
        "2 sigmoid(Linear(x)) on a few input channels before the output projection, zero-initialised so that it "
        "is 1 at step 0 (Qiu et al. 2025); "
        f"e.g. `{CONDITIONS[0].pair('gate').a.name}`, `{CONDITIONS[0].pair('gate').b.name}`;",
        f"- **sink** (`{', '.join(f'{k}={v}' for k, v in MECHANISMS['sink'].items())}`): a learned logit per head in "
        "each softmax's denominator with a zero value, initialised at 0 (as gpt-oss); "
        f"e.g. `{CONDITIONS[0].pair('sink').a.name}`, `{CONDITIONS[0].pair('sink').b.name}`.", "",
        "At w128 long, where the baseline's sharp/diffuse split shows and a run costs most, only the gate is "
        "crossed with XSA; the sink logit is tested at the three w64 conditions.", "",
    ]


def _endpoints() -> list[str]:
    return [
        "## Endpoints (final val bpb, per seed, relative to the seed's own run)", "",
        "- E_m: XSA's relative effect with mechanism m on both arms; G = E_none, XSA's effect without one.",
        "- I_m = E_m - G, the interaction: positive where the mechanism shrinks XSA's gain.",
        "- r_m = E_m - G/2: at or above 0 where the mechanism removes at least half of XSA's gain (the sink "
        "account's prediction); below 0 where it removes less.",
        "- O_m: the mechanism's own relative effect on the baseline.", "",
        f"## Decision family (Holm at a family-wise 5% over {DECISION_TESTS} tests)", "",
        "Per mechanism, pooled per seed: a seed's value is the mean over the conditions it appears in for that "
        "mechanism (seeds 100..109: the two w64-short rates; seeds 300..309: w64 long at 0.04, and for the gate "
        "w128 long at 0.08 too), over the seeds with a pair in every one of them. Two one-sample t-tests "
        "(two-sided) per mechanism, on the mean pooled I and the mean pooled r; 95% t-intervals. The primary is "
        "the gate's decision.", "",
        *_decision_table(),
        f"## Contrast family (Holm at a family-wise 5% over its {len(contrast_names())} tests, apart from the "
        "decision family)", "",
        "Per condition and mechanism: I_m and O_m, each a paired one-sample t-test over seeds; and the baseline's "
        "diffuse-mode rate with the mechanism against without it, on the seeds where both baselines finished, by "
        "an exact McNemar test (a binomial test of the discordant seeds at 1/2), with the mean layer-"
        f"{A.MODE_LAYER} attention entropy of both baselines at the evaluation at or nearest step {S.EARLY_STEP} "
        "printed beside it (descriptive). XSA's effect with and without each mechanism (E_m, G) is reported "
        "per condition with its n and interval.", "",
    ]


def _power_section(results: Path, total: float) -> list[str]:
    pooled, needed = _pooled_power(results)
    return [
        "## Power (from the factorial's committed records, before any record of this study)", "",
        "The per-seed SD of G is the factorial's, at the same condition and seeds. The SD of I is assumed "
        f"{SD_FACTOR:.3f} (sqrt 2) times it (E_m and G as two independent effects of equal spread: an "
        "assumption, the records replace it). The effect is the sink account's: the mechanism removes half of "
        "XSA's gain, I = |mean G| / 2. The half-gain test r under the no-sink account (I = 0, so r = G/2) has the "
        "same effect size; the power printed is a lower bound for it (with E_m and G independent, r's SD is "
        "sqrt(1.25), not sqrt 2, times G's). Power by the normal approximation to the t-test (`xsa.base.stats.power`).", "",
        "Per condition (the contrast family; its worst Holm step is 5% over all of its tests):", "",
        *_condition_power(results), "",
        "Pooled (the decision family; the pooled SD includes the difference between the short and the long "
        "conditions' means, as the registered test treats the 20 seeds as one sample):", "",
        *pooled, "",
        *_budget(total, needed),
    ]


def _readings() -> list[str]:
    return [
        "## Modes, and the early entropy (the factorial's registered rule)", "",
        f"A baseline run is **diffuse** where the final attention entropy of layer {A.MODE_LAYER} (counting from 0, "
        f"averaged over heads, at the last logged evaluation) is at least {A.MODE_ENTROPY:g} nats, else **sharp** "
        "(`xsa.studies.factorial.analysis.mode`). XSA's effect within each of the baseline's modes, with n and the seeds, "
        "is reported for every pair of this study and every factorial cell and rate. The correlation between "
        f"the baseline's layer-{A.MODE_LAYER} entropy at step {S.EARLY_STEP} and the seed's effect (Pearson, "
        "Fisher-z interval) is reported for the same pairs, labelled **exploratory**: it is not a test of this "
        "registration.", "",
        "## Mechanism read-outs (descriptive)", "",
        "Per condition, mechanism and arm, the mean over the finished seeds of the training log's last "
        "evaluation: per layer the attention entropy, the diagonal mass, the first-token mass, cos(y_i, v_i), "
        "the largest attention logit, and the gate's mean (gate arms) or the sink's weight (sink arms); the "
        "output logits' RMS. A metric a run did not log (runs trained before it existed) is reported as "
        "missing, with the number of runs that logged it.", "",
        "## Order and stopping", "",
        "Seed by seed across the four conditions, cheapest first (the k-th seed of every condition before the "
        "(k+1)-th), every mechanism and both arms of a seed together, so that a part-trained study is balanced. "
        "No stopping rule; a reading before the last run is printed as interim, with the number of pairs each "
        "estimate holds.", "",
    ]


def sink_document(results: Path) -> str:
    """The registration's text, from the factorial's committed records only."""
    results = Path(results)
    study = sink_study()
    ours = {r.run_id for c in CONDITIONS for r in new_runs(c)}
    view = records_without(results, ours) if (results / "runs").is_dir() else nullcontext(results)
    with view as records:
        rows, hours = _conditions(records)
        lines = [*_head(study, rows, hours), *_endpoints(), *_power_section(records, hours), *_readings()]
    return "\n".join(lines)
