"""
The optimizer study as data: the seed paper's title question (does XSA, tested with AdamW, carry over to
Muon, and does it train stably there?) at CPU scale, with learning-rate sensitivity as the measure of
stability (Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer training
instabilities", arXiv:2309.14322).

For each width (cpu-w64-d4, cpu-w128-d4; 384 steps, compiled), each optimizer (nanochat's Muon for the
block matrices with AdamW for the rest; AdamW for every parameter) and each arm (baseline, XSA), the
matrix learning rate is swept over 7 points a factor of 2 apart (1.8 orders of magnitude) on the
selection seeds, and selected by SweepRule (xsa/studies/rules.py). At cpu-w64-d4, once an optimizer's
two selections are decided: 20 pairs with each arm at its own selected rate (seeds 100-119), and 10 with
both arms at the baseline's selected rate (seeds 100-109). Muon's grid holds the robust study's
{0.02, 0.04, 0.08, 0.16} on the same seeds and presets, and its tuned pairs are the robust primary's
records where the selection agrees: all are reused by value. Pre-registered with its analysis code
(xsa/studies/optimizer_analysis.py, the document xsa/studies/optimizer_prereg.py) before its first record.
"""

from __future__ import annotations

from pathlib import Path

from xsa.stack.spec import Arm, Run
from xsa.studies.kinds import Contrast, Paired, Study, Sweep, unique_runs, xsa_pair
from xsa.studies.rules import SweepRule

NAME = "optimizer"
SCALE = "CPU scale (2-core CPU, fp32, compiled; 64- and 128-wide models, 4 layers; not d12/d24)"
FAST = dict(cpu_compile=True)  # the compiled CPU path, as the robust, scale and factorial studies
OPTIMIZERS = ("muon", "adamw")
FIELDS = {"muon": "matrix_lr", "adamw": "adamw_matrix_lr"}  # under AdamW the block matrices' LR is its own field
GRIDS = {"muon": (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32),
         "adamw": (0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016)}
SELECTION_SEEDS = {"cpu-w64-d4": (0, 1, 2), "cpu-w128-d4": (0, 1)}  # the robust study's, per width
ESTIMATE_PRESET = "cpu-w64-d4"
TUNED_SEEDS = range(100, 120)  # 20 pairs, each arm at its own selected rate (the robust primary's seeds)
COMMON_SEEDS = range(100, 110)  # 10 pairs, both arms at the baseline's selected rate


def rule(optimizer: str, preset: str) -> SweepRule:
    return SweepRule(GRIDS[optimizer], seeds=SELECTION_SEEDS[preset], field=FIELDS[optimizer])


def pair(optimizer: str, preset: str) -> Paired:
    """Baseline against XSA (alpha 1 on every layer) at `preset`, compiled, under `optimizer`."""
    p = xsa_pair(preset, **FAST)
    return Paired(f"{preset} {optimizer}", p.a.with_(optimizer=optimizer), p.b.with_(optimizer=optimizer))


def label(arm: Arm) -> str:
    return "xsa" if arm.get("xsa_layers") != "none" else "base"


def grid_name(optimizer: str, preset: str, arm: Arm) -> str:
    return f"lr_grid_{preset}_{optimizer}_{label(arm)}"


def tuned_name(optimizer: str) -> str:
    return f"{ESTIMATE_PRESET} {optimizer} tuned"


def common_name(optimizer: str) -> str:
    return f"{ESTIMATE_PRESET} {optimizer} at the baseline's rate"


INTERACTION = "optimizer interaction"  # XSA's effect under Muon minus under AdamW, tuned, paired by seed


def selections(results: Path) -> dict[tuple[str, str, str], tuple[list[float], float | None]]:
    """{(preset, optimizer, arm label): (the grid as far as extended, the selected rate or None)}."""
    return {(preset, opt, label(arm)): rule(opt, preset).state(results, arm)
            for preset in SELECTION_SEEDS for opt in OPTIMIZERS for arm in pair(opt, preset).arms()}


def estimation_pairs(optimizer: str, chosen: dict[str, float]) -> tuple[Paired, Paired]:
    """(tuned, common): each arm at its own selected rate; both at the baseline's."""
    p, field = pair(optimizer, ESTIMATE_PRESET), FIELDS[optimizer]
    a, b = p.a.with_(**{field: chosen["base"]}), p.b.with_(**{field: chosen["xsa"]})
    return Paired(tuned_name(optimizer), a, b), Paired(common_name(optimizer), a, p.b.with_(**{field: chosen["base"]}))


def _grid_runs(state: dict, preset: str) -> list[Run]:
    """The preset's grids, seed by seed across its four (optimizer, arm) grids."""
    runs = []
    for s in SELECTION_SEEDS[preset]:
        for opt in OPTIMIZERS:
            r = rule(opt, preset)
            runs += [r.at(arm, lr).run(s) for arm in pair(opt, preset).arms()
                     for lr in state[(preset, opt, label(arm))][0]]
    return runs


def _estimation(state: dict) -> tuple[dict[str, tuple[Paired, Paired]], list[Run]]:
    """The decided optimizers' (tuned, common) pairs at ESTIMATE_PRESET and their runs, seed by seed."""
    decided = {}
    for opt in OPTIMIZERS:
        chosen = {lab: state[(ESTIMATE_PRESET, opt, lab)][1] for lab in ("base", "xsa")}
        if None not in chosen.values():
            decided[opt] = estimation_pairs(opt, chosen)
    runs = []
    for s in TUNED_SEEDS:
        for tuned, common in decided.values():
            runs += [x.run(s) for x in tuned.arms()]
            runs += [x.run(s) for x in common.arms()] if s in COMMON_SEEDS else []
    return decided, runs


def optimizer_study(results: Path) -> Study:
    """The runs the rules have declared so far, in their training order: the cpu-w64-d4 grids (seed by seed),
    then its estimation pairs once an optimizer's two selections are decided, then the cpu-w128-d4 grids."""
    results = Path(results)
    state = selections(results)
    decided, estimation = _estimation(state)
    w64, w128 = SELECTION_SEEDS
    runs = _grid_runs(state, w64) + estimation + _grid_runs(state, w128)
    grids = tuple(Sweep.over(grid_name(opt, preset, arm), arm, FIELDS[opt], state[(preset, opt, label(arm))][0],
                             seed_arm=arm)
                  for preset in SELECTION_SEEDS for opt in OPTIMIZERS for arm in pair(opt, preset).arms())
    main = tuple(decided[opt][0] for opt in ("adamw", "muon") if opt in decided)
    comparisons = tuple(decided[opt][1] for opt in ("adamw", "muon") if opt in decided)
    if len(decided) == 2:
        comparisons += (Contrast(INTERACTION, decided["adamw"][0], decided["muon"][0]),)
    declared = {c.name for c in (*main, *comparisons)}
    wanted = [tuned_name("adamw"), tuned_name("muon"), *(common_name(o) for o in OPTIMIZERS), INTERACTION]
    return Study(
        name=NAME, scale=SCALE, runs=unique_runs(runs), main=main, comparisons=comparisons + grids,
        primary=tuned_name("adamw"), core_arms=(), diagnostics=None,  # its instability reads the training log
        estimate_from=TUNED_SEEDS.start, pending=tuple(n for n in wanted if n not in declared),
        rules=tuple((f"each arm's {FIELDS[o]} under {o} at {p}", rule(o, p).describe())
                    for p in SELECTION_SEEDS for o in OPTIMIZERS)
        + (("estimation pairs", f"at {ESTIMATE_PRESET}, per optimizer once both its selections are decided: each "
            f"arm at its own selected rate on seeds {TUNED_SEEDS.start}..{TUNED_SEEDS.stop - 1}, and both arms at "
            f"the baseline's selected rate on seeds {COMMON_SEEDS.start}..{COMMON_SEEDS.stop - 1}; fixed in "
            "advance, no stopping rule"),),
        secondary=(INTERACTION, *(common_name(o) for o in OPTIMIZERS)),
        correction="Holm at a family-wise 5% over the registered family (xsa/studies/optimizer_analysis.py: FAMILY)",
        priorities=f"the {w64} grids seed by seed, then its estimation pairs seed by seed, then the {w128} grids",
        preregistered=("793ab27", "2026-12-07 04:44"),
    )


def possible_runs() -> set[str]:
    """Every run id the rules could ever declare (each grid extended twice on both sides, estimation at
    any of those rates): what this study may have trained, for a view of the records without it."""
    ids = set()
    for preset in SELECTION_SEEDS:
        for opt in OPTIMIZERS:
            r = rule(opt, preset)
            values = r._values(r.max_extensions, r.max_extensions)
            seeds = [*SELECTION_SEEDS[preset], *(TUNED_SEEDS if preset == ESTIMATE_PRESET else ())]
            ids |= {r.at(arm, lr).run(s).run_id for arm in pair(opt, preset).arms() for lr in values for s in seeds}
    return ids
