"""
The optimizer study's registration (python -m xsa.prereg --study optimizer), generated from its design
(xsa/studies/optimizer.py) and its analysis code (xsa/studies/optimizer_analysis.py), with its power
and CPU time computed from the committed records of earlier studies. Nothing here reads this study's own
records: the rules' first step is read from an empty results folder, and the power and the cost from a
view of the records without any run this study could train (optimizer.possible_runs) that no earlier
study trained.
"""

from __future__ import annotations

import math
from pathlib import Path

from xsa.studies.factorial.analysis import relative_effects
from xsa.studies.factorial.prereg import cpu_seconds_per_step
from xsa.base.records import records_without
from xsa.base.stats import mean_ci
from xsa.studies import optimizer_analysis as A
from xsa.studies.optimizer import (COMMON_SEEDS, ESTIMATE_PRESET, FIELDS, GRIDS, INTERACTION, OPTIMIZERS,
                                   SELECTION_SEEDS, TUNED_SEEDS, optimizer_study, pair, possible_runs, rule)
from xsa.studies.registry import get_study, seed_paper_effect
from xsa.studies.rules import detectable

EARLIER = ("default", "robust", "factorial")  # the studies whose records this one may reuse
WIDTH = {"cpu-w64-d4": "w64", "cpu-w128-d4": "w128"}  # the shapes factorial.prereg times


def earlier_runs(results: Path) -> set[str]:
    return {r.run_id for name in EARLIER for r in get_study(name, results).runs}


def pair_sd(results: Path) -> dict[str, tuple[float | None, int]]:
    """{source: (per-pair SD of XSA's relative effect, pairs)}: the robust study's tuned Muon pairs (seeds from
    100) and the default study's AdamW-only pairs at cpu-w64-d4 (eager, the preset's AdamW rate)."""
    robust = get_study("robust", results)
    tuned = robust.main[0] if robust.main else None  # none before its LR selection has records
    adamw = get_study("default").comparison("optimizer").second  # the AdamW-only pair of its optimizer contrast
    out = {"muon": (None, 0)}
    for name, p, seeds in (("muon", tuned, range(100, 132)), ("adamw", adamw, range(0, 12))):
        if p is None:
            continue
        st = mean_ci(relative_effects(results, p.a, p.b, seeds).values())
        out[name] = (st["sd"], st["n"])
    return out


def _power(results: Path) -> list[str]:
    sds = pair_sd(results)
    muon, adamw = sds["muon"][0], sds["adamw"][0] or sds["muon"][0]
    if muon is None:
        return ["No committed pairs to size the design by: power not computed.", ""]
    inter = math.sqrt(muon ** 2 + adamw ** 2)  # two independent effects on the same seeds
    n, m = len(TUNED_SEEDS), len(COMMON_SEEDS)
    pct = lambda v: f"{100 * v:.2f}%"
    return [
        f"- Per-pair SD of XSA's relative effect: {pct(muon)} under Muon (the robust study's tuned pairs, "
        f"{sds['muon'][1]} pairs); " + (f"{pct(sds['adamw'][0])} under AdamW (the default study's AdamW-only pairs, "
                                          f"{sds['adamw'][1]} pairs, eager, at the preset's AdamW rate)"
                                          if sds["adamw"][0] else "no AdamW pairs committed: Muon's SD assumed") + ".",
        f"- Detectable with 80% power (interval excludes zero) at n = {n}: {pct(detectable(n, adamw))} under AdamW "
        f"tuned; at n = {m}: {pct(detectable(m, adamw))} (AdamW) and {pct(detectable(m, muon))} (Muon) at the "
        "common rate.",
        f"- The interaction (per seed, Muon's effect minus AdamW's; SD sqrt({pct(muon)}^2 + {pct(adamw)}^2) = "
        f"{pct(inter)} if the two effects of a seed are independent): detectable {pct(detectable(n, inter))} at "
        f"n = {n}, {'below' if detectable(n, inter) < abs(seed_paper_effect('d12')) else 'above'} the size of the "
        f"seed paper's whole effect ({pct(seed_paper_effect('d12'))} at d12): an interaction that large is "
        + ("likely to be detected." if detectable(n, inter) < abs(seed_paper_effect('d12')) else
           "not likely to be detected; the interval's width is what the paper reports."),
        "- LR sensitivity: on 3 (w64) or 2 (w128) selection seeds the bootstrap interval is coarse; only a change "
        "that every resample of the seeds agrees on can be decided.", "",
    ]


def _cost(results: Path) -> tuple[list[str], float]:
    """The CPU hours of the first step's new runs, the estimation pairs and the grid extensions."""
    first = optimizer_study(results / ".prereg-empty")
    have = earlier_runs(results)
    rates = {p: cpu_seconds_per_step(results, WIDTH[p]) for p in SELECTION_SEEDS}
    per_run = {p: rates[p][0] * pair("muon", p).a.config().num_iterations / 3600 for p in SELECTION_SEEDS}
    new = [r for r in first.runs if r.run_id not in have]
    first_hours = sum(per_run[r.preset] for r in new)
    # at most: every tuned pair new under both optimizers, and XSA at the baseline's rate on the common seeds
    tuned, most = 2 * len(TUNED_SEEDS), len(OPTIMIZERS) * (2 * len(TUNED_SEEDS) + len(COMMON_SEEDS))
    # at most 2 points a side of every grid: 4 more rates, each on the selection seeds, for 4 grids a width
    ext = {p: 4 * len(OPTIMIZERS) * 2 * len(SELECTION_SEEDS[p]) for p in SELECTION_SEEDS}
    total = first_hours + tuned * per_run[ESTIMATE_PRESET]
    lines = [
        f"- First step: {len(first.runs)} runs declared, {len(first.runs) - len(new)} of them records of earlier "
        f"studies (identical by value, reused), {len(new)} new: {first_hours:.1f} CPU hours ("
        + "; ".join(f"{p}: {rates[p][0]:.3f} s a step over {rates[p][1]} compiled records" for p in rates) + ").",
        f"- Estimation: {tuned} new AdamW runs (the tuned pairs), {tuned * per_run[ESTIMATE_PRESET]:.1f} hours, "
        "where each optimizer's two arms select the same rate and Muon's is the robust study's; at most "
        f"{most} new runs ({most * per_run[ESTIMATE_PRESET]:.1f} hours) where every selection differs.",
        f"- Without grid extensions: {total:.1f} CPU hours. Extensions add at most "
        + ", ".join(f"{ext[p]} runs at {p}" for p in ext)
        + f": {sum(ext[p] * per_run[p] for p in ext):.1f} hours more.", "",
    ]
    return lines, total


def _decisions() -> list[str]:
    """What each outcome makes the paper say (decided: Holm-adjusted p below 0.05)."""
    d12, size = f"{100 * seed_paper_effect('d12'):.2f}%", f"{100 * abs(seed_paper_effect('d12')):.2f}%"
    return [
        "## What each outcome makes the paper say", "",
        "- **XSA under AdamW at tuned rates**: decided below zero -> \"XSA lowers final val bpb under AdamW at tuned "
        "rates, by X% [interval]\"; decided above -> \"XSA raises it under AdamW\"; not decided -> \"no effect "
        "detected under AdamW; the interval rules out effects beyond its ends\", with the interval.",
        f"- **The interaction** (the seed paper's question): decided -> \"XSA's gain differs between the optimizers, "
        f"by X% (Muon minus AdamW)\", its sign saying under which it is larger; not decided, the interval within "
        f"+/-{size} -> \"the optimizer changes XSA's gain by less than the seed paper's whole effect ({d12}) "
        "at CPU scale: XSA's result carries over from AdamW to Muon\"; not decided and the interval wider -> "
        "\"CPU scale cannot tell whether XSA's gain depends on the optimizer\", with the interval.",
        "- **At the common rate** (each optimizer): read as the tuned estimate; where it differs in decision from "
        "the tuned one, the paper says that the gain at tuned rates owes part of its size to the rates selected.",
        "- **LR sensitivity change** (each optimizer and width): decided below zero -> \"XSA widens the stable LR "
        "range (lower sensitivity by Wortsman et al.'s measure)\"; decided above -> \"XSA narrows it\"; not decided "
        "-> \"no change in LR sensitivity detected\", with the interval. The seed paper's stability claim under Muon "
        "is judged by the Muon rows: stable means not decided above zero at either width.",
        "- **Divergent and spiky runs, attention-logit and output-logit growth**: descriptive; the paper prints them "
        "per grid point and arm, and says where an arm diverges at a rate where the other does not.",
        "- A selection at the edge of an extended grid is said in the paper; its tuned estimate is then at the "
        "best rate reached, not shown to be the optimum.", "",
    ]


def _design(first) -> list[str]:
    rows = []
    for p, seeds in SELECTION_SEEDS.items():
        for opt in OPTIMIZERS:
            g = ", ".join(f"{v:g}" for v in GRIDS[opt])
            cfg = pair(opt, p).a.config()
            rows.append(f"| `{p}` | {cfg.model.n_embd} | {cfg.model.n_head} of {cfg.model.head_dim} | "
                        f"{cfg.num_iterations} | {opt} | `{FIELDS[opt]}` | {g} | {', '.join(map(str, seeds))} |")
    return ["| preset | width | heads | steps | optimizer | swept field | grid | selection seeds |",
            "|---|---|---|---|---|---|---|---|", *rows, "",
            "Arms (each with the swept field at the grid's values): "
            + "; ".join(f"`{a.name}`" for p in SELECTION_SEEDS for o in OPTIMIZERS for a in pair(o, p).arms()) + ".",
            ""]


def optimizer_document(results: Path) -> str:
    results = Path(results)
    first = optimizer_study(results / ".prereg-empty")
    with records_without(results, possible_runs() - earlier_runs(results)) as view:
        power, (cost, hours) = _power(view), _cost(view)
    family = ", ".join(f"`{k}`" for k in A.FAMILY)
    return "\n".join([
        "# Pre-registration: the `optimizer` study", "",
        "Generated by `python -m xsa.prereg --study optimizer` from `xsa/studies/optimizer.py` and "
        "`xsa/studies/rules.py` (SweepRule); its analysis code (`xsa/studies/optimizer_analysis.py`) is committed "
        f"with this file, before the study's first record. Scale: {first.scale}.", "",
        "## Question", "",
        "The seed paper asks whether XSA, tested only with AdamW, carries over to Muon and trains stably there. At "
        "CPU scale: how large is XSA's effect under AdamW at tuned rates, does it differ from its effect under "
        "Muon (the interaction), and does XSA change the learning-rate sensitivity of training (Wortsman et al. "
        "2023, arXiv:2309.14322) under either optimizer?", "",
        "## Widths, grids, seeds, arms", "",
        "Every run: 4 layers, T = 512, 8 rows a step (4,096 tokens), the compiled CPU path (fp32), one thread. XSA "
        "is alpha 1 on every layer. Muon: nanochat's Muon for the block matrices, AdamW for the rest (the swept "
        "field is `matrix_lr`); AdamW: AdamW for every parameter (the block matrices' LR is `adamw_matrix_lr`). "
        "Each grid: 7 points a factor of 2 apart, 1.8 orders of magnitude.", "",
        *_design(first),
        f"Estimation at `{ESTIMATE_PRESET}`, per optimizer once both its arms' selections are decided: each arm at "
        f"its own selected rate on seeds {TUNED_SEEDS.start}..{TUNED_SEEDS.stop - 1} ({len(TUNED_SEEDS)} pairs); "
        f"both arms at the baseline's selected rate on seeds {COMMON_SEEDS.start}..{COMMON_SEEDS.stop - 1} "
        f"({len(COMMON_SEEDS)} pairs). Muon's grid holds the robust study's {{0.02, 0.04, 0.08, 0.16}} on the same "
        "seeds and presets, and its tuned pairs are the robust primary's (seeds 100-119) where the selection "
        "agrees with the robust study's: those records are identical by value and reused (their values were known "
        "when this was written). Where an arm's selected rate equals the baseline's, its common-rate runs are its "
        "tuned runs.", "",
        "## Rules", "",
        *[f"- **{what}**: {text}" for what, text in first.rules], "",
        "## Endpoints (`optimizer_analysis.py`)", "",
        f"1. `adamw_tuned`: XSA's relative effect on final val bpb under AdamW at tuned rates, paired t ({len(TUNED_SEEDS)} "
        "pairs). `muon_tuned` (the robust primary) is reported beside it, outside the family.",
        f"2. `interaction` ({INTERACTION}): per seed, XSA's effect under Muon minus under AdamW (both tuned, seeds "
        f"{TUNED_SEEDS.start}..{TUNED_SEEDS.stop - 1}), paired t.",
        "3. `muon_common`, `adamw_common`: XSA's effect with both arms at the baseline's selected rate, paired t.",
        "4. `sensitivity_change/<optimizer>/<preset>`: LR sensitivity per optimizer, width and arm: the mean over the "
        "registered 7-point grid of (the mean over the selection seeds of each run's min(final, initial val bpb), a "
        "diverged run at its initial, minus the lowest such mean over the grid); a percentile seed bootstrap "
        f"({A.BOOT} resamples of the selection seeds, RNG seed {A.BOOT_SEED}); XSA minus baseline with the same "
        "resamples for both arms, its interval and two-sided bootstrap p (twice the smaller share of resampled "
        "changes at or beyond zero on either side).",
        f"5. Per grid point and arm, descriptive: diverged runs (a diverged.json, a non-finite val bpb, or a final "
        f"val bpb above the initial) and spiky runs (a logged train loss more than {A.SPIKE_NATS:g} nat above the "
        f"median of the {A.SPIKE_WINDOW} logged losses before it, the factorial's registered rule); at each run's "
        "end and at the logged evaluation at or just after its largest spike, the per-layer maximum pre-softmax "
        "attention logit (`attn_logit_max`) and the output-logit RMS before the softcap (`logit_rms`), the largest "
        "over the runs of a grid point; a record that predates these diagnostics is reported as not logged.", "",
        f"Family, Holm at a family-wise 5%: {family}. A test not run stays in the family at p = 1.", "",
        *_decisions(),
        "## Power (from committed records of earlier studies)", "",
        *power,
        "## Cost", "",
        *cost,
        "## Order and stopping", "",
        f"{first.priorities[0].upper()}{first.priorities[1:]}; the pipeline declares the runs again after each record, so a grid extension or a "
        "newly decided selection trains next in that order. No stopping rule: every declared run is trained; a "
        "comparison read before its last pair is printed as an interim reading with its count. One figure: final "
        "val bpb against the swept LR per arm, a panel per optimizer and width, every seed drawn, the selected "
        f"rates marked, diverged runs at the top (`{A.FIGURE}`). Estimated CPU time before grid extensions: "
        f"{hours:.1f} hours.", "",
    ])
