"""
The studies, as data: which runs a study trains, which comparisons it reports, and which of the
seed paper's claims each comparison judges.

A study is what `python -m xsa.pipeline --study NAME` executes. Nothing here runs anything: the
pipeline trains `study.runs`, and the report iterates `study.comparisons` and `study.claims`, so
a new arm with its own comparison is one edit in this file.

Comparisons (every difference is paired by seed: both arms of a seed see the same batches). Every
kind has `arms()` (every arm it involves, its reference first) and `pairs()` (the (a, b) pairs whose
b-minus-a effects it reports), so any kind may stand in `Study.main` or `Study.comparisons`:
- Paired(a, b):            b minus a per seed, e.g. XSA minus baseline at one preset.
- Versus(base, others):    each of `others` paired against one reference arm (ablations).
- Sweep(base, field, ..):  a Versus over the values of one field (the alpha sweep).
- Contrast(first, second): (second's effect) minus (first's effect) per seed, e.g. XSA's effect
                           under AdamW minus its effect under Muon.

- smoke:   the whole pipeline in a few minutes at the smoke preset (tests, CI).
- default: the CPU-scale study. Not d12/d24.
- gpu:     the seed paper's depths d12 and d24, both arms, for a GPU server.
- robust:  XSA at each arm's own tuned LR, with two heads, across sequence lengths and layer
           choices, on the compiled CPU path (adaptive: xsa/design.py; pre-registered, xsa/prereg.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pathlib import Path

from xsa.presets import PRESETS
from xsa.design import LRRule, PrecisionRule
from xsa.spec import Arm, Run


# -----------------------------------------------------------------------------
# Comparisons

@dataclass(frozen=True)
class Paired:
    """b minus a, paired by seed."""
    name: str
    a: Arm
    b: Arm
    metrics: tuple[str, ...] = ("val_bpb", "core")

    def arms(self) -> list[Arm]:
        return [self.a, self.b]

    def pairs(self) -> list[tuple[Arm, Arm]]:
        return [(self.a, self.b)]


@dataclass(frozen=True)
class Versus:
    """Each of `others` paired against `base`."""
    name: str
    base: Arm
    others: tuple[Arm, ...]
    metrics: tuple[str, ...] = ("val_bpb",)

    def arms(self) -> list[Arm]:
        return [self.base, *self.others]

    def pairs(self) -> list[tuple[Arm, Arm]]:
        return [(self.base, a) for a in self.others if a != self.base]


@dataclass(frozen=True)
class Sweep(Versus):
    """A Versus over the values of one field; its table and figure list the reference arm too (at
    its own value of the field, e.g. alpha 0 for the baseline of an alpha sweep)."""
    field: str = ""

    @classmethod
    def over(cls, name: str, base: Arm, field_name: str, values, seed_arm: Arm | None = None,
             metrics=("val_bpb",)) -> "Sweep":
        """base.with_(field=v) for every v; `seed_arm` (default base) is the arm each is paired against."""
        arms = tuple(base.with_(**{field_name: v}) for v in values)
        return cls(name, seed_arm or base, arms, tuple(metrics), field_name)

    def values(self) -> list:
        return [a.get(self.field) for a in self.arms()]


@dataclass(frozen=True)
class Contrast:
    """(second's effect) minus (first's effect), per seed: does the effect depend on what differs?"""
    name: str
    first: Paired
    second: Paired
    metrics: tuple[str, ...] = ("val_bpb", "core")

    def arms(self) -> list[Arm]:
        return list(dict.fromkeys([*self.first.arms(), *self.second.arms()]))

    def pairs(self) -> list[tuple[Arm, Arm]]:
        return [*self.first.pairs(), *self.second.pairs()]


@dataclass(frozen=True)
class Claim:
    """One of the seed paper's claims, judged by one metric of one comparison of ours.

    expect: the direction the seed paper reports ("lower" or "higher" than `threshold`).
    metric: a run metric (val_bpb, core, chatcore, diag_mass), or "overhead" (the throughput
    benchmark at the comparison's preset).
    """
    text: str
    theirs: str
    comparison: str
    metric: str
    expect: str
    threshold: float = 0.0
    seed_effect: float | None = None  # the seed paper's effect, in the unit judged: relative for
    # val bpb (-0.0032 for -0.32%), absolute for CORE (see xsa/report/claims.py)


# The seed paper's numbers ("Exclusive Self-Attention Beyond AdamW: Stability and Generalization
# under Muon Optimization"; GPU scale, nanochat on ClimbMix, one run per arm), typed once: the
# claims below judge against them and the report prints them beside ours, as theirs.
SEED_PAPER = {
    "d12": {"base": dict(val_bpb=0.8484, core=0.1602), "xsa1": dict(val_bpb=0.8457, core=0.1508)},
    "d24": {"base": dict(val_bpb=0.7193, core=0.2593, chatcore=0.3638),
            "xsa1": dict(val_bpb=0.7171, core=0.2606, chatcore=0.3682)},
}


def _seed_claim(text: str, depth: str, comparison: str, metric: str, expect: str) -> "Claim":
    """A claim on one of the seed paper's numbers: its change as it reads, and its effect in the unit
    judged (relative for val bpb, absolute for CORE)."""
    a, b = SEED_PAPER[depth]["base"][metric], SEED_PAPER[depth]["xsa1"][metric]
    return Claim(text, f"{depth}: {a:.4f} -> {b:.4f}", comparison, metric, expect,
                 seed_effect=b / a - 1 if metric == "val_bpb" else b - a)


@dataclass(frozen=True)
class Archived:
    """An earlier study whose records `python -m xsa.archive --commit COMMIT` restored from git history
    into results/archive/<commit>/ (read as plain data: its configs are of an older stack); its XSA
    pairs as (baseline arm, XSA arm), run-folder names without the seed."""
    commit: str
    pairs: tuple[tuple[str, str], ...]


# the project's first CPU study: 4 and 6 heads of 64 at widths 256 and 384, on the stack of that time
EARLIER = Archived("30bc3ae", (("cpu-d4_base", "cpu-d4_xsa1"), ("cpu-d8_base", "cpu-d8_xsa1"),
                               ("cpu-d4_adamw_base", "cpu-d4_adamw_xsa1")))


# -----------------------------------------------------------------------------
# Studies

@dataclass(frozen=True)
class Study:
    name: str
    scale: str  # said plainly in the paper: "smoke scale", "CPU scale", "GPU scale"
    runs: tuple[Run, ...]
    main: tuple[Paired, ...]  # the depth pair of the main table (smaller first)
    comparisons: tuple = ()  # Versus, Sweep and Contrast entries, reported in order
    claims: tuple[Claim, ...] = ()
    primary: str = ""  # the pre-registered primary comparison (final val bpb, XSA minus baseline)
    pilot_seeds: tuple[int, ...] = ()  # the seeds whose paired SD sized the study
    half_width_target: float | None = None  # the precision rule's target (relative CI half-width)
    validation: dict = field(default_factory=dict)  # parameters of 00_validation
    evaluate: dict = field(default_factory=dict)  # parameters of 02_evaluate (all runs)
    core_arms: tuple[Arm, ...] | None = None  # arms whose runs get CORE (None: every run)
    chat_arms: tuple[Arm, ...] = ()  # arms whose runs also get SFT + ChatCORE
    diagnostics: dict = field(default_factory=dict)  # parameters of 03_diagnostics
    throughput: dict = field(default_factory=dict)  # parameters of 04_throughput, per preset
    # the pre-registration (python -m xsa.prereg): each rule as (what it decides, the rule), the
    # secondary family and its multiplicity correction, the priorities where the budget binds
    rules: tuple[tuple[str, str], ...] = ()
    secondary: tuple[str, ...] = ()
    correction: str = ""
    priorities: str = ""
    robustness: str = ""  # an adaptive study whose records make this paper's robustness table
    estimate_from: int = 0  # seeds below select (an LR) and are never reused for an estimate
    archived: tuple[Archived, ...] = ()  # earlier studies whose rows the robustness table carries
    # the commit (and its UTC date) that added results/<study>/preregistration.md, before the first run
    # (tests/test_robustness.py checks it against the git history where the checkout has it)
    preregistered: tuple[str, str] = ()

    def __post_init__(self):
        # every paper has a primary comparison: a study that names none reports its first main pair
        if not self.primary and self.main:
            object.__setattr__(self, "primary", self.main[0].name)

    def scores(self, arm: Arm) -> bool:
        """Whether the evaluate stage scores this arm's runs (CORE, and ChatCORE for chat_arms)."""
        arms = {a.name for a in (*(self.core_arms or ()), *self.chat_arms)}
        return self.core_arms is None or arm.name in arms

    def evaluated(self, run: Run) -> bool:
        return self.scores(run.arm)

    def presets(self) -> list[str]:
        return sorted({r.preset for r in self.runs}, key=list(PRESETS).index)

    def data_subsets(self) -> list[str]:
        return sorted({r.config().data for r in self.runs})

    def seed_effect(self, comparison: str):
        """The seed paper's val-bpb effect (relative) that the claims set beside `comparison`, or None."""
        return next((c.seed_effect for c in self.claims if c.comparison == comparison and c.metric == "val_bpb"),
                    None)

    def comparison(self, name: str):
        for c in (*self.main, *self.comparisons):
            if c.name == name:
                return c
        raise KeyError(f"comparison: the study {self.name!r} has no comparison {name!r}")


def _unique(runs) -> tuple[Run, ...]:
    """Drop repeated runs (a sweep's reference arm is also a main arm), keeping the first order."""
    seen, out = set(), []
    for r in runs:
        if r.run_id not in seen:
            seen.add(r.run_id)
            out.append(r)
    return tuple(out)


def xsa_pair(preset: str, **overrides) -> Paired:
    """Baseline against XSA (alpha 1 on every layer) at `preset`, both with `overrides`."""
    base = Arm.of(preset, **overrides)
    return Paired(preset, base, base.with_(xsa_alpha=1.0, xsa_layers="all"))


def _smoke() -> Study:
    pair = xsa_pair("smoke")
    return Study(
        name="smoke", scale="smoke scale (a 2-layer toy; tests the pipeline, says nothing about XSA)",
        runs=_unique(a.run(0) for a in pair.arms()), main=(pair,),
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
        runs=_unique(runs), main=(d4, d8), primary=d4.name, pilot_seeds=(0, 1),
        half_width_target=0.002, robustness="robust", archived=(EARLIER,),
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
        runs=_unique(a.run(0) for p in (d12, d24) for a in p.arms()), main=(d12, d24),
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
        runs=_unique(runs), main=tuple(main), comparisons=tuple(comparisons), primary="cpu-w64-d4 tuned",
        half_width_target=PRECISION.half_width, estimate_from=PRECISION.start, core_arms=(),
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


STUDIES = {"smoke": _smoke, "default": _default, "gpu": _gpu, "robust": _robust}
ADAPTIVE = {"robust"}  # studies whose runs depend on the records so far (xsa/design.py)


def get_study(name: str, results=None) -> Study:
    """The study `name`; an adaptive one reads the records under `results` (default: results/)."""
    if name not in STUDIES:
        raise ValueError(f"study: unknown study {name!r} (choose from {', '.join(STUDIES)})")
    if name in ADAPTIVE:
        from xsa.records import REPO_ROOT
        return STUDIES[name](Path(results) if results else REPO_ROOT / "results")
    return STUDIES[name]()
