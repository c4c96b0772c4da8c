"""
The studies, as data: which runs a study trains, which comparisons it reports, and which of the
seed paper's claims each comparison judges.

A study is what `python -m xsa.pipeline --study NAME` executes. Nothing here runs anything: the
pipeline trains `study.runs`, and the report iterates `study.comparisons` and `study.claims`, so
a new arm with its own comparison is one edit in this file.

The kinds these are made of (comparisons, claims, Study) are in xsa/studies/kinds.py.

- smoke:   the whole pipeline in a few minutes at the smoke preset (tests, CI).
- default: the CPU-scale study. Not d12/d24.
- gpu:     the seed paper's depths d12 and d24, both arms, for a GPU server.
- robust:  XSA at each arm's own tuned LR, with two heads, across sequence lengths and layer
           choices, on the compiled CPU path (adaptive: xsa/studies/rules.py; pre-registered, xsa/prereg.py).
- scale:   how XSA's effect moves with training length and heads, and its prediction for d12
           (xsa/studies/scale.py; pre-registered with its model, xsa/studies/predict.py).
- scale-check: the scale study's x4 level with each arm also at the other arm's selected rate (registered
           after the x4 records, before its own runs).
- d12-test: that prediction tested on a GPU server, d12 pairs under a precision rule.
- factorial: two shapes x two lengths x two common matrix LRs: which of steps, tokens per parameter
           and model size carries XSA's gain (xsa/studies/factorial/; pre-registered with its analysis code).
- sink:    is XSA's gain a sink effect? XSA with and without a per-head output gate or a learned sink
           logit, at four of the factorial's conditions (xsa/studies/sink.py; pre-registered with its
           analysis code).
- optimizer: the seed paper's title question: XSA under AdamW and under Muon at each optimizer's tuned
           rates, and learning-rate sensitivity per arm as stability (xsa/studies/optimizer.py; adaptive;
           pre-registered with its analysis code).
"""

from __future__ import annotations

from pathlib import Path

from xsa.studies.rules import LRRule, PrecisionRule
from xsa.studies.factorial.design import factorial_study
from xsa.base.records import REPO_ROOT
from xsa.stack.spec import Arm
from xsa.studies.scale import CHECKS, d12_test_study, scale_study
from xsa.studies.optimizer import optimizer_study
from xsa.studies.sink import sink_study
from xsa.studies.kinds import (Archived, Claim, Contrast, Paired, Study, Sweep, Versus,  # noqa: F401 (Versus: the kinds
                       unique_runs, xsa_pair)                                        # are read from here too)


# The seed paper's numbers ("Exclusive Self-Attention Beyond AdamW: Stability and Generalization
# under Muon Optimization"; GPU scale, nanochat on ClimbMix, one run per arm), typed once: the
# claims below judge against them and the report prints them beside ours, as theirs.
SEED_PAPER = {
    "d12": {"base": dict(val_bpb=0.8484, core=0.1602), "xsa1": dict(val_bpb=0.8457, core=0.1508)},
    "d24": {"base": dict(val_bpb=0.7193, core=0.2593, chatcore=0.3638),
            "xsa1": dict(val_bpb=0.7171, core=0.2606, chatcore=0.3682)},
}


def seed_paper_effect(depth: str) -> float:
    """The seed paper's val-bpb effect at `depth`, relative to its baseline (about -0.32% at d12)."""
    return SEED_PAPER[depth]["xsa1"]["val_bpb"] / SEED_PAPER[depth]["base"]["val_bpb"] - 1


def _seed_claim(text: str, depth: str, comparison: str, metric: str, expect: str) -> "Claim":
    """A claim on one of the seed paper's numbers: its change as it reads, and its effect in the unit
    judged (relative for val bpb, absolute for CORE)."""
    a, b = SEED_PAPER[depth]["base"][metric], SEED_PAPER[depth]["xsa1"][metric]
    return Claim(text, f"{depth}: {a:.4f} -> {b:.4f}", comparison, metric, expect,
                 seed_effect=b / a - 1 if metric == "val_bpb" else b - a)


# the project's first CPU study: 4 and 6 heads of 64 at widths 256 and 384, on the stack of that time
EARLIER = Archived("30bc3ae", (("cpu-d4_base", "cpu-d4_xsa1"), ("cpu-d8_base", "cpu-d8_xsa1"),
                               ("cpu-d4_adamw_base", "cpu-d4_adamw_xsa1")))


def _smoke() -> Study:
    pair = xsa_pair("smoke")
    return Study(
        name="smoke", scale="smoke scale (a 2-layer toy; tests the pipeline, says nothing about XSA)",
        runs=unique_runs(a.run(0) for a in pair.arms()), main=(pair,),
        evaluate=dict(max_per_task=4, sft_steps=10), chat_arms=tuple(pair.arms()),
        diagnostics=dict(), throughput=dict(presets=["smoke"], steps=4),
    )


def _default() -> Study:
    """The CPU study (README, "The default study"). Pre-registered: the primary endpoint is the final
    val bpb, XSA minus baseline, paired by seed, at cpu-w64-d4 (the longest-trained preset, 8 tokens
    per non-embedding parameter); secondary: the same at cpu-w64-d8 and the depth contrast, CORE
    likelihood measures, the diagnostics, and the contrasts below. Seeds 0 and 1 of both presets are
    the pilot that sized the study (the report recomputes the seeds needed from them). Precision
    rule, stated before the 8th seed finished: if the primary interval's half-width after 8 seeds
    exceeds 0.2% (relative), seeds 8-11 of cpu-w64-d4 are added; they run right after the main
    seeds, before the contrasts (the primary endpoint comes first where the budget binds), and the
    learning-rate check at cpu-w64-d4 keeps one seed to pay for them."""
    d4, d8 = xsa_pair("cpu-w64-d4"), xsa_pair("cpu-w64-d8")
    main_seeds, control_seeds, sweep_seeds = range(8), range(6), range(4)
    adamw = Paired("cpu-w64-d4 AdamW only", d4.a.with_(optimizer="adamw"), d4.b.with_(optimizer="adamw"))
    plain = Paired("cpu-w64-d4 without smear and backout", d4.a.with_(smear=False, backout=False),
                   d4.b.with_(smear=False, backout=False))
    sweep = Sweep.over("alpha_sweep", d4.b, "xsa_alpha", (0.25, 0.5, 0.75, 1.0), seed_arm=d4.a)
    lr = [Sweep.over(f"lr_{label}_{p.name}", arm, "matrix_lr", (0.01, 0.04), seed_arm=arm)
          for p in (d4, d8) for arm, label in ((p.a, "base"), (p.b, "xsa"))]
    lr_seeds = {"cpu-w64-d4": range(1), "cpu-w64-d8": range(1)}
    runs = [a.run(s) for s in range(2) for p in (d4, d8) for a in p.arms()]  # the pilot first
    runs += [a.run(s) for s in main_seeds for p in (d4, d8) for a in p.arms()]
    runs += [a.run(s) for s in range(8, 12) for a in d4.arms()]  # the precision rule's seeds
    runs += [a.run(s) for s in control_seeds for p in (adamw, plain) for a in p.arms()]
    runs += [a.run(s) for s in sweep_seeds for a in sweep.others]
    runs += [a.run(s) for c in lr for s in lr_seeds[c.base.preset] for a in c.others]
    return Study(
        name="default", scale="CPU scale (2-core CPU, fp32; 64-wide models, not the seed paper's d12/d24)",
        runs=unique_runs(runs), main=(d4, d8), primary=d4.name, pilot_seeds=(0, 1),
        half_width_target=0.002, robustness="robust", prediction="scale", archived=(EARLIER,), final=True,
        comparisons=(Contrast("depth", d4, d8), Contrast("optimizer", d4, adamw), Contrast("smear_backout", d4, plain),
                     sweep, *lr),
        claims=(
            _seed_claim("XSA lowers val bpb at the smaller depth", "d12", "cpu-w64-d4", "val_bpb", "lower"),
            _seed_claim("XSA lowers val bpb at the larger depth", "d24", "cpu-w64-d8", "val_bpb", "lower"),
            _seed_claim("XSA lowers Base CORE at the smaller depth", "d12", "cpu-w64-d4", "core", "lower"),
            _seed_claim("XSA raises Base CORE at the larger depth", "d24", "cpu-w64-d8", "core", "higher"),
            *(Claim(f"XSA lowers the diagonal attention mass at the {depth} depth", "mechanism (no number given)",
                    p, "diag_mass", "lower") for p, depth in (("cpu-w64-d4", "smaller"), ("cpu-w64-d8", "larger"))),
            *(Claim(f"XSA's runtime overhead is small (about 5% at most) at the {depth} depth", "small overhead", p,
                    "overhead", "lower", 0.05) for p, depth in (("cpu-w64-d4", "smaller"), ("cpu-w64-d8", "larger"))),
            # the title's claims, judged by the optimizer study's registered endpoints once it is complete
            *(Claim(f"XSA trains as stably as the baseline under Muon at width {w} (learning-rate sensitivity)",
                    "stable training (loss curves; no number given)", "", "lr_sensitivity", "lower",
                    key=f"optimizer.sensitivity_change_muon_cpu_w{w}_d4", rule="not higher") for w in (64, 128)),
            Claim("The optimizer leaves XSA's gain unchanged within the d12 effect: it carries over from AdamW to Muon",
                  "title question (Zhai tested AdamW only)", "", "val_bpb", "lower", key="optimizer.interaction",
                  rule="carries"),
        ),
        core_arms=(*d4.arms(), *d8.arms()),
        # CORE on a fixed 200 items per task (the same items for every run) with the per-item
        # likelihood measures; SFT + ChatCORE is not run at this scale (README, "Evaluation")
        evaluate=dict(max_per_task=200),
        diagnostics=dict(batch_size=8, batches=2),
        throughput=dict(presets=["cpu-w64-d8", "cpu-w64-d4"], steps=50, warmup=3, threads=1),
    )


def _gpu() -> Study:
    d12, d24 = xsa_pair("d12"), xsa_pair("d24")
    return Study(
        name="gpu", scale="GPU scale (the seed paper's d12 and d24 on ClimbMix)",
        runs=unique_runs(a.run(0) for p in (d12, d24) for a in p.arms()), main=(d12, d24),
        evaluate=dict(max_per_task=None, sft_steps=300), chat_arms=(*d12.arms(), *d24.arms()),
        throughput=dict(presets=["d12", "d24"], steps=50),
    )


# The robust study: XSA at each arm's own tuned learning rate, on the compiled CPU path.
FAST = dict(cpu_compile=True)  # every run of the robust study trains compiled (fp32, inductor)
LR_GRID = (0.02, 0.04, 0.08, 0.16)
PICK = LRRule(LR_GRID, seeds=(0, 1, 2))  # the primary preset's LR selection
PICK_HEADS = LRRule(LR_GRID, seeds=(0, 1))  # the heads preset's
PRECISION = PrecisionRule(first=12, block=4, most=32, half_width=0.002, start=100)
SECONDARY_SEEDS = range(100, 106)  # 6 pairs: sequence length, layer choice
HEADS_SEEDS = range(100, 108)  # 8 pairs at the heads preset
GROUP_SEEDS, GROUP_SCALES = (0, 1), (0.5, 2.0)  # the AdamW-group LR check


def _neighbours(grid, lr) -> list[float]:
    i = grid.index(lr)
    return grid[max(0, i - 1):i + 2]


def group_arms(arm: Arm, tuned: Arm, grid) -> dict[float, list[Arm]]:
    """The AdamW-group check's arms: {scale: `tuned` at its selected matrix LR and the grid's neighbours
    of it, with the embedding and unembedding LRs of `arm` both times scale}."""
    return {scale: [tuned.with_(matrix_lr=lr, embedding_lr=arm.get("embedding_lr") * scale,
                                unembedding_lr=arm.get("unembedding_lr") * scale)
                    for lr in _neighbours(list(grid), tuned.get("matrix_lr"))] for scale in GROUP_SCALES}


def _robust(results) -> Study:
    """Pre-registered (python -m xsa.prereg --study robust, committed before its first run):

    1. Primary: final val bpb, XSA minus baseline, relative, paired by seed, at cpu-w64-d4 with each
       arm at its own selected matrix LR (PICK on seeds 0-2, never reused), seeds from 100 under the
       precision rule (PRECISION). Also: the AdamW-group LRs (embedding, unembedding) x0.5 and x2 at
       the selected matrix LR and its grid neighbours, seeds 0-1, for each arm: does the optimum move?
    2. Heads: cpu-w128-d4 (2 heads of 64), its own LR selection (PICK_HEADS), 8 pairs; the contrast
       with the primary effect.
    3. Sequence length at 4,096 tokens a step: T = 256 and 1024 at the primary's selected LRs, 6
       pairs each; the slope of the effect against log2 T over T = 256, 512, 1024.
    4. Layer choice: XSA on the last 2 of 4 layers against all layers and the baseline, 6 pairs.
    Arms of a later step are declared once the records have decided the rule they depend on."""
    d4, w128 = xsa_pair("cpu-w64-d4", **FAST), xsa_pair("cpu-w128-d4", **FAST)
    runs, main, comparisons = [], [], []
    grids = {arm.name: PICK.state(results, arm) for arm in d4.arms()}
    for arm, label in ((d4.a, "base"), (d4.b, "xsa")):
        runs += PICK.runs(results, arm)
        comparisons.append(Sweep.over(f"lr_grid_{label}", arm, "matrix_lr", grids[arm.name][0], seed_arm=arm))
    chosen = {name: lr for name, (_, lr) in grids.items()}
    if None not in chosen.values():
        a, b = d4.a.with_(matrix_lr=chosen[d4.a.name]), d4.b.with_(matrix_lr=chosen[d4.b.name])
        primary = Paired("cpu-w64-d4 tuned", a, b)
        main.append(primary)
        runs += [x.run(s) for s in PRECISION.seeds(results, a, b) for x in primary.arms()]
        for arm, tuned in ((d4.a, a), (d4.b, b)):  # the AdamW-group check
            for at in group_arms(arm, tuned, grids[arm.name][0]).values():
                runs += [x.run(s) for s in GROUP_SEEDS for x in at]
        heads = {arm.name: PICK_HEADS.state(results, arm) for arm in w128.arms()}
        runs += [r for arm in w128.arms() for r in PICK_HEADS.runs(results, arm)]
        comparisons += [Sweep.over(f"heads_lr_grid_{label}", arm, "matrix_lr", heads[arm.name][0], seed_arm=arm)
                        for arm, label in ((w128.a, "base"), (w128.b, "xsa"))]
        if None not in (lr for _, lr in heads.values()):
            ha, hb = (arm.with_(matrix_lr=heads[arm.name][1]) for arm in w128.arms())
            pair = Paired("cpu-w128-d4 tuned", ha, hb)
            main.append(pair)
            runs += [x.run(s) for s in HEADS_SEEDS for x in pair.arms()]
            comparisons.append(Contrast("heads", primary, pair))
        for seq, rows in ((256, 16), (1024, 4)):
            pair = Paired(f"cpu-w64-d4 tuned T={seq}", *(x.with_(sequence_len=seq, device_batch_size=rows)
                                                         for x in primary.arms()))
            comparisons.append(pair)
            runs += [x.run(s) for s in SECONDARY_SEEDS for x in pair.arms()]
        last = b.with_(xsa_layers="last:2")
        comparisons += [Paired("last half vs baseline", a, last), Paired("last half vs all layers", b, last)]
        runs += last.runs(SECONDARY_SEEDS)
    return Study(
        name="robust", scale="CPU scale (2-core CPU, fp32, compiled; 64- and 128-wide models, not d12/d24)",
        runs=unique_runs(runs), main=tuple(main), comparisons=tuple(comparisons), primary="cpu-w64-d4 tuned",
        half_width_target=PRECISION.half_width, estimate_from=PRECISION.start, core_arms=(), final=True,
        preregistered=("8717a11", "2026-12-02 00:05"), diagnostics=dict(batch_size=8, batches=2),
        rules=(("each arm's matrix LR at cpu-w64-d4", PICK.describe()),
               ("each arm's matrix LR at cpu-w128-d4", PICK_HEADS.describe()),
               ("the primary comparison's seeds", PRECISION.describe()),
               ("the AdamW-group check", f"embedding and unembedding LR together x{GROUP_SCALES[0]:g} and "
                f"x{GROUP_SCALES[1]:g}, at each arm's selected matrix LR and its grid neighbours, seeds "
                f"{list(GROUP_SEEDS)}; the optimum moved if the lowest mean val bpb at a scale is at another "
                "matrix LR than the selected one (descriptive: 2 seeds)"),
               ("secondary pairs", f"seeds {SECONDARY_SEEDS.start}..{SECONDARY_SEEDS.stop - 1} (sequence length, "
                f"layer choice), {HEADS_SEEDS.start}..{HEADS_SEEDS.stop - 1} (heads), fixed in advance")),
        secondary=("cpu-w128-d4 tuned", "heads", "cpu-w64-d4 tuned T=256", "cpu-w64-d4 tuned T=1024",
                   "sequence-length slope", "last half vs baseline", "last half vs all layers"),
        correction="Holm at a family-wise 5% over the secondary family (paired t-tests of the relative "
                   "differences; the slope by its t-statistic over seeds)",
        priorities="primary (with the AdamW-group check) > heads > sequence length > layer choice; runs are "
                   "declared and trained in that order, and a step not reached is reported as not run",
    )


STUDIES = {"smoke": _smoke, "default": _default, "gpu": _gpu, "robust": _robust, "scale": scale_study,
           **{c.name: c.study for c in CHECKS}, "d12-test": d12_test_study, "factorial": factorial_study,
           "sink": sink_study, "optimizer": optimizer_study}
# studies whose runs depend on the records so far (xsa/studies/rules.py)
ADAPTIVE = {"robust", "scale", *(c.name for c in CHECKS), "d12-test", "optimizer"}


def get_study(name: str, results=None) -> Study:
    """The study `name`; an adaptive one reads the records under `results` (default: results/)."""
    if name not in STUDIES:
        raise ValueError(f"study: unknown study {name!r} (choose from {', '.join(STUDIES)})")
    if name in ADAPTIVE:
        return STUDIES[name](Path(results) if results else REPO_ROOT / "results")
    return STUDIES[name]()
