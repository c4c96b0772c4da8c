"""
The rules of an adaptive study, as code that reads run records: at which matrix learning rate each
arm trains (the best of a grid, the grid extended while the best value sits at its end), and how
many paired seeds a comparison gets (a precision rule with a maximum).

A study (xsa/studies/registry.py) declares the runs these rules have decided so far: while a grid is being
trained only the grid is declared, once it is complete the selected arms follow, and the precision
rule adds seeds in blocks as the records of the earlier blocks land. Rerunning the pipeline after
runs finish therefore continues the study. The rules print themselves (describe) into the study's
pre-registration (python -m xsa.prereg), which is committed before the runs they govern.

Records are read from <results>/runs/<run id>/summary.json: a run counts once it trained to its
horizon with a finite val bpb. SweepRule (the optimizer study's) also counts a diverged run
(diverged.json, xsa/runs/diverged.py), at the val bpb of its initial model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from xsa.runs.diverged import read_diverged
from xsa.base.records import read_json
from xsa.stack.config import TrainConfig
from xsa.base.stats import normal_cdf, power, t_critical
from xsa.stack.spec import Arm, Run


def final_bpb(results: Path, run: Run) -> float | None:
    """The final val bpb of a finished run, or None (not trained yet, unfinished, not finite)."""
    path = Path(results) / "runs" / run.run_id / "summary.json"
    if not path.exists():
        return None
    s = read_json(path)
    v = s.get("val_bpb")
    return float(v) if s.get("complete") and isinstance(v, (int, float)) and math.isfinite(v) else None


def initial_bpb(results: Path, run: Run) -> float | None:
    """The val bpb of the run's initial model: the step-0 evaluation of its metrics.jsonl, or None."""
    path = Path(results) / "runs" / run.run_id / "metrics.jsonl"
    if not path.exists():
        return None
    with open(path, encoding="utf-8") as f:
        for line in f:  # the step-0 line comes first: no need to read the whole log
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                return None
            if record.get("step", 0) > 0:
                return None
            v = record.get("val_bpb")
            if isinstance(v, (int, float)) and math.isfinite(v):
                return float(v)
    return None


def diverged(results: Path, run: Run) -> bool:
    """Whether the run stopped on a non-finite loss or weights (its diverged.json, for this config), or
    finished with a val bpb that is not finite."""
    folder = Path(results) / "runs" / run.run_id
    record = read_diverged(folder)
    if record is not None:  # by value, as the pipeline compares it (a hash changes with new config fields)
        return not isinstance(record.get("config"), dict) or TrainConfig.from_dict(record["config"]) == run.config()
    if not (folder / "summary.json").exists():
        return False
    s = read_json(folder / "summary.json")
    return bool(s.get("complete")) and final_bpb(results, run) is None


def capped_bpb(results: Path, run: Run) -> float | None:
    """Wortsman et al.'s min(final loss, initial loss) in val bpb: a diverged run counts at its initial
    val bpb (infinite where its log lacks one: worse than any finished run); None while pending."""
    start = initial_bpb(results, run)
    if diverged(results, run):
        return math.inf if start is None else start
    final = final_bpb(results, run)
    if final is None:
        return None
    return final if start is None else min(final, start)


@dataclass(frozen=True)
class LRRule:
    """Select an arm's matrix LR: train `grid` on `seeds`; the LR with the lowest mean final val bpb
    over those seeds is selected, unless it is the grid's smallest or largest value, in which case
    the grid is extended by `factor` on that side (at most `max_extensions` times a side) and the
    rule applied again. The selection seeds are never used to estimate an effect. `field` is the
    config field swept (the matrix LR under Muon; SweepRule sweeps others)."""
    grid: tuple[float, ...]
    seeds: tuple[int, ...]
    factor: float = 2.0
    max_extensions: int = 2
    field: str = "matrix_lr"

    def _values(self, lo: int, hi: int) -> list[float]:
        """The grid extended lo times down and hi times up."""
        base = sorted(self.grid)
        down = [base[0] / self.factor ** k for k in range(lo, 0, -1)]
        up = [base[-1] * self.factor ** k for k in range(1, hi + 1)]
        return [float(f"{v:.6g}") for v in (*down, *base, *up)]

    def at(self, arm: Arm, lr: float) -> Arm:
        """The arm at `lr` of the swept field."""
        return arm.with_(**{self.field: lr})

    def value(self, results: Path, run: Run) -> float | None:
        """A run's value to the rule (its final val bpb), None while it is pending."""
        return final_bpb(results, run)

    def means(self, results: Path, arm: Arm, grid) -> dict[float, float | None]:
        """{lr: the mean value over the seeds, None while any is pending}."""
        means = {}
        for lr in grid:
            vals = [self.value(results, self.at(arm, lr).run(s)) for s in self.seeds]
            means[lr] = None if None in vals else sum(vals) / len(vals)
        return means

    def extend(self, grid: list[float], means: dict, lo: int, hi: int) -> tuple[int, int] | None:
        """The extensions (down, up) the means call for, or None where the rule has decided."""
        best = min(grid, key=lambda lr: means[lr])
        if best == grid[0] and lo < self.max_extensions:
            return lo + 1, hi
        if best == grid[-1] and hi < self.max_extensions:
            return lo, hi + 1
        return None

    def state(self, results: Path, arm: Arm) -> tuple[list[float], float | None]:
        """(the grid as far as the records have extended it, the selected LR or None while pending)."""
        lo = hi = 0
        while True:
            grid = self._values(lo, hi)
            means = self.means(results, arm, grid)
            if None in means.values():
                return grid, None
            more = self.extend(grid, means, lo, hi)
            if more is None:
                return grid, min(grid, key=lambda lr: means[lr])
            lo, hi = more

    def runs(self, results: Path, arm: Arm) -> list[Run]:
        grid, _ = self.state(results, arm)
        return [self.at(arm, lr).run(s) for lr in grid for s in self.seeds]

    def describe(self) -> str:
        g = ", ".join(f"{v:g}" for v in sorted(self.grid))
        return (f"matrix LR grid {{{g}}} on seeds {list(self.seeds)}; the LR with the lowest mean final val bpb "
                f"over these seeds is selected; if it is an end of the grid, the grid is extended by x{self.factor:g} "
                f"(or /{self.factor:g}) on that side and the rule applied again, at most {self.max_extensions} times a "
                "side (a best value at the last extension is selected and reported as at the edge). Selection seeds "
                "are not reused for estimation.")


@dataclass(frozen=True)
class SweepRule(LRRule):
    """LRRule over a wide grid of `field` (Wortsman et al. 2023's sweep), each run at min(final, initial
    val bpb) so a diverged run counts at its initial loss (capped_bpb); the grid is also extended upward
    while its largest value's mean is less than `margin` above the best (the sweep must reach a rate that
    loses), at most `max_extensions` times upward for either reason. Its runs are listed seed by seed."""
    margin: float = 0.10

    def value(self, results: Path, run: Run) -> float | None:
        return capped_bpb(results, run)

    def extend(self, grid: list[float], means: dict, lo: int, hi: int) -> tuple[int, int] | None:
        best = min(grid, key=lambda lr: means[lr])
        down = best == grid[0] and lo < self.max_extensions
        up = means[grid[-1]] < (1 + self.margin) * means[best] and hi < self.max_extensions
        return (lo + down, hi + up) if down or up else None

    def runs(self, results: Path, arm: Arm) -> list[Run]:
        grid, _ = self.state(results, arm)
        return [self.at(arm, lr).run(s) for s in self.seeds for lr in grid]

    def describe(self) -> str:
        g = ", ".join(f"{v:g}" for v in sorted(self.grid))
        return (f"{self.field} grid {{{g}}} on seeds {list(self.seeds)}; each run's value is its final val bpb, or its "
                "initial val bpb (the step-0 evaluation) where that is lower or the run diverged (Wortsman et al. "
                "2023's min(loss, initial loss)); the value with the lowest mean over these seeds is selected. The "
                f"grid is extended by x{self.factor:g} (or /{self.factor:g}) on a side while the best is at that end, "
                f"and upward while the largest value's mean is less than {100 * self.margin:g}% above the best mean, "
                f"at most {self.max_extensions} extensions a side (upward for either reason); a best value at the "
                "last extension is selected and reported as at the edge. Selection seeds are not reused for "
                "estimation.")


@dataclass(frozen=True)
class PrecisionRule:
    """Paired seeds for a comparison: `first` seeds from `start`, then blocks of `block` while the
    95% t-interval of the relative difference (b - a) / a is wider than +/-half_width, up to `most`."""
    first: int
    block: int
    most: int
    half_width: float
    start: int = 100

    def seeds(self, results: Path, a: Arm, b: Arm) -> range:
        return self.seeds_over(results, [(a, b)])

    def seeds_over(self, results: Path, pairs) -> range:
        """The rule on each seed's mean over several (a, b) pairs (the same seed at several rates, say)."""
        n = self.first
        while n < self.most:
            diffs = []
            for s in range(self.start, self.start + n):
                values = [(final_bpb(results, a.run(s)), final_bpb(results, b.run(s))) for a, b in pairs]
                if any(x is None or y is None for x, y in values):
                    return range(self.start, self.start + n)  # this block is still training
                diffs.append(sum((y - x) / x for x, y in values) / len(values))
            mean = sum(diffs) / n
            sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
            if t_critical(n - 1) * sd / math.sqrt(n) <= self.half_width:
                break
            n = min(n + self.block, self.most)
        return range(self.start, self.start + n)

    def describe(self) -> str:
        return (f"paired seeds {self.start}..{self.start + self.first - 1} first; while the 95% t-interval of the "
                f"relative difference is wider than +/-{100 * self.half_width:g}%, {self.block} more seeds, at most "
                f"{self.most} pairs (seeds {self.start}..{self.start + self.most - 1}). The estimate is reported at "
                f"the first {self.first} seeds and at the final count.")


# -----------------------------------------------------------------------------
# What a design can detect, at a per-pair SD (the pre-registrations print these)

def detectable(n: int, sd: float, target: float = 0.8) -> float:
    """The smallest true paired effect that n seeds detect (interval excludes zero) with probability target."""
    effect = sd / 100
    while power(n, sd, effect) < target:
        effect *= 1.01
    return effect


def slope_detectable(pairs: int, sd: float, lengths=(256, 512, 1024), target: float = 0.8) -> float:
    """The smallest slope of the effect per doubling of T that `pairs` seeds at each length detect with
    probability target (least squares over log2 T; normal approximation, t critical at n - 2 df)."""
    xs = [math.log2(t) for t in lengths]
    sxx = pairs * sum((x - sum(xs) / len(xs)) ** 2 for x in xs)
    se = sd / math.sqrt(sxx)
    t = t_critical(pairs * len(xs) - 2)
    z = next(z / 100 for z in range(1, 1000) if normal_cdf(z / 100) >= target)
    return (t + z) * se


def half_width(n: int, sd: float) -> float:
    """The 95% t-interval half-width of a mean of n pairs at a per-pair SD of sd."""
    return t_critical(n - 1) * sd / math.sqrt(n)
