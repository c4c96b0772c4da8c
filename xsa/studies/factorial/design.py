"""
The factorial study as data. Two shapes (4 layers x 64 wide with one head of 64; 4 layers x 128 wide
with two heads of 64) at two lengths (384 and 1,097 steps of 4,096 tokens), every run at both matrix
learning rates 0.04 and 0.08, both arms on the same seeds. The four cells put two of the three axes
of the scale study's length effect against each other at a common rate:

    cell        steps   tokens per parameter   scaling parameters
    w64 short     384        3.43                 0.46 M
    w64 long     1097        9.79                 0.46 M
    w128 short    384        1.20                 1.31 M
    w128 long    1097        3.43                 1.31 M

w128 long and w64 short have the same tokens per parameter (and differ in steps); w128 long and w64
long have the same steps (and differ in model size). The short cells reuse the robust study's records
at 0.08, which are identical by value (seeds 100-109, w128's 108-109 new), and add 0.04 on the same
seeds; the long cells are new, on seeds 300-309 that no study has used. Pre-registered with its
analysis code (xsa/studies/factorial/analysis.py, models.py) before its first record.
"""

from __future__ import annotations

from dataclasses import dataclass

from xsa.studies.kinds import Paired, Study, seed_by_seed, unique_runs, xsa_pair

FAST = dict(cpu_compile=True)  # the compiled CPU path, as the robust and scale studies
RATES = (0.04, 0.08)  # every cell, both arms: the two rates the scale study's brackets selected between
SHORT_SEEDS = range(100, 110)  # the robust study's seeds: its 0.08 records are reused
LONG_SEEDS = range(300, 310)  # new
SCALE = "CPU scale (2-core CPU, fp32, compiled; 64- and 128-wide models, 4 layers; not d12/d24)"


@dataclass(frozen=True)
class Cell:
    """One shape at one length: its preset, its estimation seeds, and the length ladder its steps
    multiple reads (a key of xsa/studies/factorial/steps.py: LADDERS; by default its name's first word, the
    shape: "w64 short" reads "w64")."""
    name: str
    preset: str
    seeds: range
    ladder: str = ""

    def __post_init__(self):
        if not self.ladder:
            object.__setattr__(self, "ladder", self.name.split()[0])

    def pair(self, lr: float) -> Paired:
        """Baseline against XSA (alpha 1 on every layer), both at matrix LR `lr`."""
        p = xsa_pair(self.preset, **FAST)
        return Paired(f"{self.name} at {lr:g}", p.a.with_(matrix_lr=lr), p.b.with_(matrix_lr=lr))

    def pairs(self) -> dict[float, Paired]:
        return {lr: self.pair(lr) for lr in RATES}

    def config(self):
        return self.pair(RATES[0]).b.config()


CELLS = (Cell("w64 short", "cpu-w64-d4", SHORT_SEEDS), Cell("w64 long", "cpu-w64-d4-s1097", LONG_SEEDS),
         Cell("w128 short", "cpu-w128-d4", SHORT_SEEDS), Cell("w128 long", "cpu-w128-d4-s1097", LONG_SEEDS))


@dataclass(frozen=True)
class CellContrast:
    """(second cell's primary) minus (first cell's primary), with the question it answers."""
    key: str
    name: str
    first: str
    second: str
    question: str


CONTRASTS = (
    CellContrast("equal_tokens_per_param", "equal tokens per parameter", "w64 short", "w128 long",
                 "at 3.43 tokens per parameter, does 1,097 steps give a larger gain than 384? (a tokens-per-parameter "
                 "account: no difference; a steps account: more negative)"),
    CellContrast("equal_steps", "equal steps", "w64 long", "w128 long",
                 "at 1,097 steps, does the larger model (fewer tokens per parameter) give a smaller gain? (a "
                 "tokens-per-parameter account: less negative; a steps account: no difference)"),
    CellContrast("length_w64", "length at width 64", "w64 short", "w64 long",
                 "does the gain grow from 384 to 1,097 steps at width 64?"),
    CellContrast("length_w128", "length at width 128", "w128 short", "w128 long",
                 "does the gain grow from 384 to 1,097 steps at width 128?"),
)


def cell(name: str) -> Cell:
    found = [c for c in CELLS if c.name == name]
    if not found:
        raise KeyError(f"factorial: no cell {name!r} (cells: {', '.join(c.name for c in CELLS)})")
    return found[0]


def ordered_runs(cells=CELLS) -> list:
    """Every run, in the order they train: seed by seed across the cells (the k-th seed of every cell
    before the (k+1)-th of any), so that a study stopped part-way has balanced cells; a cell with fewer
    seeds than another ends earlier."""
    return seed_by_seed(cells)


def factorial_study() -> Study:
    pairs = tuple(p for c in CELLS for p in c.pairs().values())
    return Study(
        name="factorial", scale=SCALE, runs=unique_runs(ordered_runs()), main=pairs, primary=pairs[0].name,
        core_arms=(), estimate_from=100, diagnostics=None,  # its stability reads the training log
        rules=(("seeds", f"{len(SHORT_SEEDS)} pairs a rate in every cell, fixed in advance: seeds "
                         f"{SHORT_SEEDS.start}..{SHORT_SEEDS.stop - 1} in the short cells, {LONG_SEEDS.start}.."
                         f"{LONG_SEEDS.stop - 1} in the long ones; no stopping rule"),
               ("learning rates", "every run at matrix LR 0.04 and at 0.08, both arms; no selection")),
        secondary=tuple(c.name for c in CONTRASTS),
        correction="Holm at a family-wise 5% over the four contrasts (Welch's t on the per-seed two-rate means)",
        priorities="seed by seed across the four cells, both rates and both arms of a seed together",
        preregistered=("b785ec2", "2026-12-05 22:55"), final=True,
    )
