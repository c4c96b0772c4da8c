"""
XSA's effect in the field's currency: the multiple of training steps the baseline needs to reach
XSA's final val bpb (registered with the factorial study).

Per shape and rate, the baseline's length ladder is its mean final val bpb at each measured length;
between two lengths it is linear in log2 steps, beyond the last two it is extended along their line
(the multiple is then marked extrapolated). The multiple at a condition is the steps at which that
curve reaches XSA's mean there, over the condition's steps; its 95% interval is a percentile bootstrap
over seeds (seeds resampled within each arm and length, BOOT resamples, a fixed generator seed).
"""

from __future__ import annotations

import math

import numpy as np

from xsa.studies.factorial.analysis import bpb
from xsa.studies.factorial.design import CELLS, FAST
from xsa.studies.kinds import xsa_pair

BOOT = 2000
BOOT_SEED = 0


def steps_to_reach(ladder: dict[int, float], target: float) -> tuple[float | None, bool]:
    """(steps at which the baseline's ladder {steps: mean bpb} reaches `target`, extrapolated?);
    None where the ladder never comes down to it (a flat or rising end)."""
    pts = sorted(ladder.items())
    if len(pts) < 2:
        return None, False
    line = lambda s0, v0, s1, v1: 2 ** (math.log2(s0) + (target - v0) / (v1 - v0) * (math.log2(s1) - math.log2(s0)))
    for (s0, v0), (s1, v1) in zip(pts, pts[1:]):
        if v0 != v1 and min(v0, v1) <= target <= max(v0, v1):
            return line(s0, v0, s1, v1), False
    # outside the ladder's values: along the end segment on the target's side, if it heads there
    (s0, v0), (s1, v1) = pts[-2:] if target < min(v for _, v in pts) else pts[:2]
    if v1 == v0:
        return None, True
    reach = line(s0, v0, s1, v1)
    inside = pts[0][0] <= reach <= pts[-1][0]  # a segment heading away from the target points back inside
    return (None if inside else reach), True


def multiple(base: dict[int, dict[int, float]], xsa: dict[int, float], steps: int) -> dict:
    """The steps multiple at a condition of `steps` steps: `base` is {steps: {seed: bpb}} (the ladder),
    `xsa` {seed: bpb} at the condition. {value, lo, hi, extrapolated}."""
    if any(len(v) < 2 for v in base.values()) or len(xsa) < 2 or len(base) < 2:
        return dict(value=None, lo=None, hi=None, extrapolated=None)
    mean = lambda d: float(np.mean(list(d.values())))
    reach, extrapolated = steps_to_reach({s: mean(v) for s, v in base.items()}, mean(xsa))
    rng = np.random.default_rng(BOOT_SEED)
    draws = []
    for _ in range(BOOT):
        ladder = {s: float(np.mean(rng.choice(list(v.values()), len(v)))) for s, v in base.items()}
        r, _ = steps_to_reach(ladder, float(np.mean(rng.choice(list(xsa.values()), len(xsa)))))
        draws.append(np.inf if r is None else r / steps)
    lo, hi = (float(q) for q in np.percentile(draws, [2.5, 97.5]))
    return dict(value=None if reach is None else reach / steps, lo=lo, hi=hi, extrapolated=extrapolated)


# each shape's length ladder: its presets and the seeds whose records make each length's mean
LADDERS = {"w64": {"cpu-w64-d4-s128": range(210, 218), "cpu-w64-d4": range(100, 110),
                   "cpu-w64-d4-s1097": range(300, 310), "cpu-w64-d4-s1536": range(210, 218)},
           "w128": {"cpu-w128-d4": range(100, 110), "cpu-w128-d4-s1097": range(300, 310)}}


def condition_multiples(results, cells=CELLS) -> dict[str, dict]:
    """{"<cell>@<rate>": multiple} for every factorial cell and rate, each on its ladder (Cell.ladder) at
    that rate (lengths with fewer than two baseline records left out)."""
    out = {}
    for c in cells:
        if c.ladder not in LADDERS:
            raise ValueError(f"factorial: cell {c.name!r} reads the length ladder {c.ladder!r}, which is not one of "
                             f"{', '.join(LADDERS)} (xsa/studies/factorial/steps.py: LADDERS)")
        for lr, pair in c.pairs().items():
            ladder = {}
            for preset, seeds in LADDERS[c.ladder].items():
                arm = xsa_pair(preset, **FAST).a.with_(matrix_lr=lr)
                values = bpb(results, arm, seeds)
                if len(values) >= 2:
                    ladder[arm.config().num_iterations] = values
            out[f"{c.name}@{lr:g}"] = multiple(ladder, bpb(results, pair.b, c.seeds), c.config().num_iterations)
    return out
