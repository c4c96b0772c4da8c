"""
The kinds a study is made of: comparisons (which arms are paired, and how), the seed paper's claims,
archived studies, and the Study itself. The studies themselves, as data, are in xsa/studies/registry.py (and
xsa/studies/scale.py); nothing here runs anything.

Comparisons (every difference is paired by seed: both arms of a seed see the same batches). Every
kind has `arms()` (every arm it involves, its reference first) and `pairs()` (the (a, b) pairs whose
b-minus-a effects it reports), so any kind may stand in `Study.main` or `Study.comparisons`:
- Paired(a, b):            b minus a per seed, e.g. XSA minus baseline at one preset.
- Versus(base, others):    each of `others` paired against one reference arm (ablations).
- Sweep(base, field, ..):  a Versus over the values of one field (the alpha sweep).
- Contrast(first, second): (second's effect) minus (first's effect) per seed, e.g. XSA's effect
                           under AdamW minus its effect under Muon.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xsa.stack.presets import PRESETS
from xsa.stack.spec import Arm, Run

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
    key: where another study's registered estimate judges it ("study.key", e.g. the optimizer study's
    interaction), that estimate; `rule` then says how its registration reads it (xsa/report/claims.py).
    """
    text: str
    theirs: str
    comparison: str
    metric: str
    expect: str
    threshold: float = 0.0
    seed_effect: float | None = None  # the seed paper's effect, in the unit judged: relative for
    # val bpb (-0.0032 for -0.32%), absolute for CORE (see xsa/report/claims.py)
    key: str | None = None
    rule: str = "direction"  # "direction", "not higher" (a claim of no harm), "carries" (the interaction's reading)


@dataclass(frozen=True)
class Archived:
    """An earlier study whose records `python -m xsa.archive --commit COMMIT` restored from git history
    into results/archive/<commit>/ (read as plain data: its configs are of an older stack); its XSA
    pairs as (baseline arm, XSA arm), run-folder names without the seed."""
    commit: str
    pairs: tuple[tuple[str, str], ...]


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
    # parameters of 03_diagnostics; None: no diagnostics stage (the training log's final evaluation
    # still records the per-layer diagnostics)
    diagnostics: dict | None = field(default_factory=dict)
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
    pending: tuple[str, ...] = ()  # an adaptive study's comparisons its rules have not declared yet
    prediction: str = ""  # an adaptive study whose records make this paper's scale section (its model and prediction)
    checks: tuple[str, ...] = ()  # studies registered after some of this one's records, checking one of its levels
    # every run its rules declare has a finished record and they declare no more: the paper states it whole,
    # with no interim reading (tests/test_verdicts.py holds the flag to the records; xsa/books/verdicts.py
    # stops the build where a final study's estimates are not whole)
    final: bool = False

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


def unique_runs(runs) -> tuple[Run, ...]:
    """Drop repeated runs (a sweep's reference arm is also a main arm), keeping the first order."""
    seen, out = set(), []
    for r in runs:
        if r.run_id not in seen:
            seen.add(r.run_id)
            out.append(r)
    return tuple(out)


def seed_by_seed(groups) -> list[Run]:
    """Every run of `groups` (each with `seeds` and `pairs()`: a cell, a condition), in the order they
    train: the k-th seed of every group before the (k+1)-th of any, both arms of each of its pairs
    together, so that a study stopped part-way is balanced; a group with fewer seeds ends earlier."""
    runs = []
    for k in range(max(len(g.seeds) for g in groups)):
        for g in groups:
            if k < len(g.seeds):
                runs += [arm.run(g.seeds[k]) for pair in g.pairs().values() for arm in pair.arms()]
    return runs


def xsa_pair(preset: str, **overrides) -> Paired:
    """Baseline against XSA (alpha 1 on every layer) at `preset`, both with `overrides`."""
    base = Arm.of(preset, **overrides)
    return Paired(preset, base, base.with_xsa())
