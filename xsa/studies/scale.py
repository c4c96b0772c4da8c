"""
The scale study: how XSA's effect on final val bpb moves with training length and with the number of
heads at CPU scale, and what that predicts for nanochat's d12 (xsa/studies/predict.py). Pre-registered with
its analysis code before its first run (python -m xsa.prereg --study scale).

- S1 training length: cpu-w64-d4 (one head of 64) at 128, 384, 768 and 1,536 steps (x1/3 to x4 of
  the robust primary's 3 x 2^19 tokens; 1.1 to 13.7 tokens per scaling parameter, nanochat's d12
  trains at 10.5-12). x1 is the robust study's primary, whose records it reuses.
- S2 heads at one width: cpu-w128-d4 with 1, 2, 4 and 8 heads (head dim 128 down to 16), the same
  tokens; H = 2 is the robust study's 128-wide pairs, whose records it reuses.
- S3 the learnable gate (xsa_gate, one strength per layer and head, initialised at 0) against a fixed
  alpha = 1, at cpu-w64-d4 and at width 128 with 8 heads.
- S4 the first study's shape on today's stack: 256 wide, four heads of 64, at 128 and 384 steps.

Like the robust study it is adaptive (xsa/studies/rules.py): an LR bracket per arm is trained first where a
level needs one, and its pairs are declared once the bracket has selected; the declared order is the
pre-registered priority (S1 x4 first, then S2, S3, S4).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xsa.studies.rules import LRRule, PrecisionRule
from xsa.stack.presets import make_config, scaling_params
from xsa.stack.spec import Arm
from xsa.studies.kinds import Contrast, Paired, Study, unique_runs, xsa_pair

FAST = dict(cpu_compile=True)  # the compiled CPU path, as the robust study
ROBUST_LR = 0.08  # both arms' selected matrix LR at cpu-w64-d4 and cpu-w128-d4 in the robust study
ROBUST_PRIMARY_SEEDS = range(100, 120)  # its primary's seeds after its precision rule (20 pairs)
ROBUST_HEADS_SEEDS = range(100, 108)  # its 128-wide pairs
BRACKET = (0.04, 0.08, 0.16)
SELECT = LRRule(BRACKET, seeds=(200, 201))  # each arm's LR where a level needs its own (x4, H = 1, H = 8)
ESTIMATE_FROM = 210  # seeds 200-209 select; estimates start at 210 and no seed is used twice in a level
PAIRS = range(ESTIMATE_FROM, ESTIMATE_FROM + 8)  # 8 pairs a level
S4_PAIRS = range(ESTIMATE_FROM, ESTIMATE_FROM + 6)  # 6 pairs a level of S4
PRECISION_X4 = PrecisionRule(first=8, block=4, most=16, half_width=0.002, start=ESTIMATE_FROM)
LENGTHS = {"cpu-w64-d4-s128": "x1/3", "cpu-w64-d4": "x1", "cpu-w64-d4-s768": "x2", "cpu-w64-d4-s1536": "x4"}
SELECTION_SEEDS = frozenset(SELECT.seeds)  # never in an estimate
HEADS = (1, 2, 4, 8)
# every level's name, defined here once: the study's comparisons, its report and its paper use these
LENGTH_LEVELS = {x: f"length {x}" for x in LENGTHS.values()}
HEADS_LEVELS = {h: f"heads {h}" for h in HEADS}
GATE_W64, GATE_H8 = "gate at width 64", "gate at 8 heads"
W256_SHORT, W256_LONG, W256_LENGTH = "width 256, 128 steps", "width 256, 384 steps", "width 256, length"
LEVELS = (*LENGTH_LEVELS.values(), *HEADS_LEVELS.values(), GATE_W64, GATE_H8, W256_SHORT, W256_LONG)
FINAL = True  # every run its rules declare has its record, and they declare no more (Study.final)
# the secondary family (Holm over it; xsa/books/scale.py)
SECONDARY = ("slope per doubling of tokens per parameter", "slope per doubling of heads", GATE_W64, GATE_H8, W256_SHORT,
             W256_LENGTH)


def _lr(arm: Arm) -> float:
    return arm.get("matrix_lr")


def _at(pair: Paired, name: str, lr_a: float, lr_b: float | None = None) -> Paired:
    """The pair, renamed, with its baseline at lr_a and its XSA arm at lr_b (default lr_a)."""
    return Paired(name, pair.a.with_(matrix_lr=lr_a), pair.b.with_(matrix_lr=lr_a if lr_b is None else lr_b))


def _heads(h: int) -> Paired:
    """Baseline against XSA at width 128 with h heads (head dim 128 / h)."""
    return xsa_pair("cpu-w128-d4", n_head=h, n_kv_head=h, **FAST)


def _bracket(results: Path, pair: Paired) -> tuple[list, tuple[float, float] | None]:
    """The bracket's runs of both arms so far, and (baseline's LR, XSA's LR) once both have selected."""
    states = [SELECT.state(results, arm) for arm in pair.arms()]
    runs = [r for arm in pair.arms() for r in SELECT.runs(results, arm)]
    lrs = tuple(lr for _, lr in states)
    return runs, (None if None in lrs else lrs)


def gate_arm(xsa: Arm) -> Arm:
    """The learnable gate beside a fixed-alpha XSA arm: one strength per layer and head, from 0."""
    return xsa.with_(xsa_alpha=0.0, xsa_gate=True)


def _pairs(pair: Paired, seeds) -> list:
    return [x.run(s) for s in seeds for x in pair.arms()]


def length_x4(results: Path) -> tuple[list, Paired | None]:
    """S1's primary level: the bracket's runs and, once both arms have selected, the tuned pair's runs
    under the precision rule; (runs, the tuned pair or None)."""
    x4 = xsa_pair("cpu-w64-d4-s1536", **FAST)
    runs, lrs = _bracket(results, x4)
    if not lrs:
        return runs, None
    tuned = _at(x4, LENGTH_LEVELS["x4"], *lrs)
    return runs + _pairs(tuned, PRECISION_X4.seeds(results, *tuned.arms())), tuned


def head_pairs(results: Path) -> tuple[list, dict]:
    """S2: (runs, {heads: pair} decided so far). Both brackets first; then H = 1 and 8 at their own
    selections, H = 4 at H = 8's (the nearer bracketed count), H = 2 the robust study's pairs."""
    brackets = {h: _bracket(results, _heads(h)) for h in (1, 8)}
    runs = [r for b, _ in brackets.values() for r in b]
    levels = {2: _at(_heads(2), HEADS_LEVELS[2], ROBUST_LR)}
    if brackets[1][1]:
        levels[1] = _at(_heads(1), HEADS_LEVELS[1], *brackets[1][1])
    if brackets[8][1]:
        levels[8] = _at(_heads(8), HEADS_LEVELS[8], *brackets[8][1])
        levels[4] = _at(_heads(4), HEADS_LEVELS[4], *brackets[8][1])
    runs += _pairs(levels[2], ROBUST_HEADS_SEEDS)
    runs += [r for h in (1, 4, 8) if h in levels for r in _pairs(levels[h], PAIRS)]
    return runs, {h: levels[h] for h in HEADS if h in levels}


def other_lengths(x4: Paired | None) -> tuple[list, dict]:
    """S1's other levels: x2 at x4's selection (the nearer bracketed length), x1/3 and x1 at the robust
    selection (x1 is the robust primary, its records reused); (runs, {level: pair})."""
    levels = {"x1/3": _at(xsa_pair("cpu-w64-d4-s128", **FAST), LENGTH_LEVELS["x1/3"], ROBUST_LR),
              "x1": _at(xsa_pair("cpu-w64-d4", **FAST), LENGTH_LEVELS["x1"], ROBUST_LR)}
    runs = []
    if x4 is not None:
        levels["x2"] = _at(xsa_pair("cpu-w64-d4-s768", **FAST), LENGTH_LEVELS["x2"], x4.a.get("matrix_lr"),
                           x4.b.get("matrix_lr"))
        runs += _pairs(levels["x2"], PAIRS)
    runs += _pairs(levels["x1/3"], PAIRS) + _pairs(levels["x1"], ROBUST_PRIMARY_SEEDS)
    if x4 is not None:
        levels["x4"] = x4
    return runs, levels


def scale_study(results: Path) -> Study:
    """The study as its records have decided it so far, its runs in the pre-registered priority order:
    length x4 > heads > lengths x2 and x1/3 > the gate > width 256."""
    runs, x4 = length_x4(results)
    more, heads = head_pairs(results)
    runs += more
    more, lengths = other_lengths(x4)
    runs += more
    # S3: the gate against fixed alpha = 1, new pairs at both places
    gates = [Paired(GATE_W64, lengths["x1"].b, gate_arm(lengths["x1"].b))]
    if 8 in heads:
        gates.append(Paired(GATE_H8, heads[8].b, gate_arm(heads[8].b)))
    runs += [r for g in gates for r in _pairs(g, PAIRS)]
    # S4: the first study's shape at its length and at the primary's, both arms at the robust selection
    short = _at(xsa_pair("cpu-w256-d4-s128", **FAST), W256_SHORT, ROBUST_LR)
    long_ = _at(xsa_pair("cpu-w256-d4", **FAST), W256_LONG, ROBUST_LR)
    runs += _pairs(short, S4_PAIRS) + _pairs(long_, S4_PAIRS)
    pending = [*([LENGTH_LEVELS["x4"], LENGTH_LEVELS["x2"]] if x4 is None else []),
               *(HEADS_LEVELS[h] for h in HEADS if h not in heads), *([] if 8 in heads else [GATE_H8])]
    return Study(
        name="scale", scale="CPU scale (2-core CPU, fp32, compiled; 64- to 256-wide models, not d12/d24)",
        runs=unique_runs(runs), main=tuple(lengths[k] for k in LENGTHS.values() if k in lengths),
        comparisons=(*heads.values(), *gates, short, long_, Contrast(W256_LENGTH, long_, short)),
        primary=LENGTH_LEVELS["x4"], half_width_target=PRECISION_X4.half_width, core_arms=(), pending=tuple(pending),
        preregistered=("8c19852", "2026-12-02 22:07"), checks=tuple(c.name for c in CHECKS),
        diagnostics=dict(batch_size=8, batches=2), final=FINAL,
    )


@dataclass(frozen=True)
class RateCheck:
    """A check of one level of the scale study, registered after that level's records and before its
    own runs: each arm also trained at the other arm's selected matrix LR on the level's first pairs, so
    that both arms meet at either common rate and each arm's two rates are compared on seeds that did not
    select them. Where both arms of the level selected one rate (or share one by the study's rules) that
    pair is already at the common rate: the check trains nothing, its one comparison is the level's own
    pair on its seeds, and it is whole once their records exist. A new check is one entry of CHECKS; its
    registration (`python -m xsa.prereg --study NAME`) is committed before its first run, and its
    estimates are the `<key>_*` entries of results/estimates/scale.json."""
    name: str  # the study's name
    level: str  # the scale study's level it checks ("length x4"), as the scale study names it
    preset: str  # that level's preset
    key: str  # its estimates' prefix in the scale study's book ("check")
    seeds: range = PAIRS  # the level's first pairs
    preregistered: tuple[str, str] | None = None  # (commit, UTC date) of its registration
    final: bool = False  # every run it declares has its record (Study.final)

    @property
    def label(self) -> str:
        return self.level.removeprefix("length ")  # "x4", "heads 8"

    @property
    def order(self) -> tuple[str, str, str, str]:
        """Its four comparisons, in the order its registration lists them (at one rate, the first alone)."""
        x = self.label
        return (f"{x}, both at XSA's rate", f"{x} baseline, XSA's rate against its own",
                f"{x}, both at the baseline's rate", f"{x} XSA, the baseline's rate against its own")

    def tuned(self, results: Path) -> Paired | None:
        """The level as the scale study has declared it (each arm at the rate its rules gave it), or None
        while they have not (its bracket, or the one it borrows, has not selected)."""
        scale = scale_study(results)
        if self.level in scale.pending:
            return None
        level = scale.comparison(self.level)  # a KeyError names a level the study does not have
        if not isinstance(level, Paired) or level.a.preset != self.preset:
            raise ValueError(f"{self.name}: the scale study's level {self.level!r} is not one pair at preset "
                             f"{self.preset!r}")
        return level

    def study(self, results: Path) -> Study:
        """The baseline at XSA's selected rate first, then XSA at the baseline's (a pair each seed);
        nothing is declared before the level has been declared. Where both arms have one rate the level's
        own pairs on the check's seeds are its runs and its one comparison (nothing pending)."""
        level = self.tuned(results)
        if level is None:
            return Study(name=self.name, scale=self._scale(make_config(self.preset)), runs=(), main=(),
                         pending=self.order, final=self.final)
        tuned_base, tuned_xsa = level.arms()
        lr_base, lr_xsa = _lr(tuned_base), _lr(tuned_xsa)
        base_at_xsa, xsa_at_base = tuned_base.with_(matrix_lr=lr_xsa), tuned_xsa.with_(matrix_lr=lr_base)
        first = Paired(self.order[0], base_at_xsa, tuned_xsa)  # at one rate: the level's own pair
        pairs = (Paired(self.order[1], tuned_base, base_at_xsa), Paired(self.order[2], tuned_base, xsa_at_base),
                 Paired(self.order[3], tuned_xsa, xsa_at_base)) if lr_base != lr_xsa else ()
        runs = [base_at_xsa.run(s) for s in self.seeds] + [xsa_at_base.run(s) for s in self.seeds]
        return Study(name=self.name, scale=self._scale(tuned_base.config()), runs=unique_runs(runs), main=(first,),
                     comparisons=pairs, primary=first.name, core_arms=(), estimate_from=ESTIMATE_FROM,
                     diagnostics=dict(batch_size=8, batches=2), preregistered=self.preregistered, final=self.final)

    @staticmethod
    def _scale(cfg) -> str:
        return f"CPU scale (2-core CPU, fp32, compiled; {describe_level(cfg)}; not d12/d24)"


def describe_level(cfg) -> str:
    """'one head of 64, 13.7 tokens per parameter': the shape and training length of a level's config."""
    heads = {1: "one head", 2: "two heads", 4: "four heads", 8: "eight heads"}.get(cfg.model.n_head, f"{cfg.model.n_head} heads")
    return f"{heads} of {cfg.model.n_embd // cfg.model.n_head}, {cfg.num_tokens / scaling_params(cfg.model):.1f} tokens per parameter"


# The x4 check, registered after the x4 level's records and before its own runs
# (results/scale-check/preregistration.md). At x4 the baseline at its selected matrix LR spread over twice
# XSA's range between seeds (some seeds learn markedly slower), and each arm's selection rested on two seeds.
CHECKS = (RateCheck("scale-check", LENGTH_LEVELS["x4"], "cpu-w64-d4-s1536", "check",
                   preregistered=("ca596fb", "2026-12-04 03:21"), final=True),)


# The test at d12 on a GPU server, re-registered with the factorial study (results/d12-test/
# preregistration.md; the first registration, in the scale study's, ran one rate and could not fail
# the prediction): d12 as the seed paper trained it (12 heads of 64, the 324e69c recipe, T = 2048),
# both arms at the recipe's matrix LR and at twice it (the ratio of the CPU studies' two common rates),
# each seed's effect the mean over the two; 4 seeds, then 4 more at a time while that mean's 95%
# interval, from the test's own pairs, is wider than +/-0.1%, at most 16. Its decision rule against the
# CPU statement is xsa/studies/factorial/d12.py's.
D12_TEST = PrecisionRule(first=4, block=4, most=16, half_width=0.001, start=0)
D12_RATE_FACTORS = (1.0, 2.0)
# its primary is no one pair but each seed's mean over both (xsa/studies/factorial/d12.py: `d12_book`)
D12_ENDPOINT = "d12 test, mean over both rates"


def d12_pairs() -> list[Paired]:
    """Baseline against XSA at d12, at each of the test's rates."""
    pair = xsa_pair("d12", recipe="nanochat-324e69c")
    lr = pair.a.get("matrix_lr")
    return [_at(pair, f"d12 test at {f * lr:g}", f * lr) for f in D12_RATE_FACTORS]


def d12_test_study(results: Path) -> Study:
    pairs = d12_pairs()
    seeds = D12_TEST.seeds_over(results, [p.arms() for p in pairs])
    return Study(
        name="d12-test", scale="GPU scale (nanochat d12 on ClimbMix, the CPU statement tested)",
        runs=unique_runs(r for s in seeds for p in pairs for r in (p.a.run(s), p.b.run(s))), main=tuple(pairs),
        primary=D12_ENDPOINT, half_width_target=D12_TEST.half_width, core_arms=(),
        throughput=dict(presets=["d12"], steps=50), preregistered=("4d0fdd6", "2026-12-06 00:00"),
    )
