"""
The factorial study's registered estimates, read from run records (results/runs/<run id>/):

- per cell and rate: XSA minus baseline in final val bpb, relative to the seed's baseline, paired by
  seed, 95% t-interval;
- per cell, the primary: each seed's mean over the two rates of that relative effect (seeds with both
  rates' pairs), 95% t-interval;
- the four contrasts of xsa/studies/factorial/design.py: second cell's primary minus first's, Welch's t
  (the cells share no seeds), Holm over the four; the two length contrasts also per doubling of
  steps; and the account the two axis contrasts support (`axis_verdict`).

Stability, for every cell, rate and arm (and for any other pair of arms, e.g. the scale study's x4):
the SD of final val bpb between seeds and the baseline-to-XSA variance ratio with its F interval;
each run's final attention entropy per layer; the baseline's mode (its layer-1 head sharp or diffuse
by the registered entropy threshold) and the effect split by mode; training-loss spikes per run.
"""

from __future__ import annotations

import math
from pathlib import Path

from scipy import stats as sps

from xsa.studies.rules import final_bpb
from xsa.studies.factorial.design import CELLS, CONTRASTS, RATES, Cell, cell
from xsa.base.records import read_jsonl
from xsa.base.stats import holm, mean_ci, t_pvalue

# the registered thresholds (results/factorial/preregistration.md)
MODE_LAYER = 1  # the second layer: where the scale study's x4 baselines split into two modes
MODE_ENTROPY = 3.0  # nats: a final attention entropy at MODE_LAYER at or above it is "diffuse"
SPIKE_NATS = 1.0  # a spike: a logged train loss this far above the median of the window before it
SPIKE_WINDOW = 50  # logged steps
ALPHA = 0.05


# the val bpb a record may hold for the arithmetic below: 8 bits a byte is a uniform guess, and a
# hundredth of a bit is far below any model of text. The paper stage refuses a record outside the
# summary schema's (0, 20) before this reads it (xsa/checks/integrity.py); this keeps a forged value
# that reaches it anyway (1e300, 1e-300) from ending in an overflow inside the statistics.
BPB_RANGE = (0.01, 20.0)


class OutOfRange(ValueError):
    """A finished run's val bpb that no model of text has: the record, not the analysis, is wrong."""


def bpb(results: Path, arm, seeds) -> dict[int, float]:
    """{seed: final val bpb} of the arm's finished runs among `seeds`; OutOfRange names a run whose
    value is outside BPB_RANGE."""
    out = {}
    for s in seeds:
        run = arm.run(s)
        if (v := final_bpb(results, run)) is None:
            continue
        if not BPB_RANGE[0] < v < BPB_RANGE[1]:
            raise OutOfRange(f"{Path(results) / 'runs' / run.run_id / 'summary.json'}: val_bpb {v!r} is outside "
                             f"({BPB_RANGE[0]:g}, {BPB_RANGE[1]:g}) bits per byte: a damaged record, which no "
                             "estimate reads (repair or retrain the run)")
        out[s] = v
    return out


def relative_effects(results: Path, a, b, seeds) -> dict[int, float]:
    """{seed: (b - a) / a} over the seeds where both arms have a finished run."""
    va, vb = bpb(results, a, seeds), bpb(results, b, seeds)
    return {s: (vb[s] - va[s]) / va[s] for s in sorted(va.keys() & vb.keys())}


def at_rate(results: Path, c: Cell, lr: float) -> dict[int, float]:
    pair = c.pair(lr)
    return relative_effects(results, pair.a, pair.b, c.seeds)


def two_rate(results: Path, c: Cell) -> dict[int, float]:
    """{seed: the mean over RATES of the seed's relative effect}, seeds with a pair at every rate."""
    per = [at_rate(results, c, lr) for lr in RATES]
    seeds = set.intersection(*(set(p) for p in per))
    return {s: sum(p[s] for p in per) / len(per) for s in sorted(seeds)}


def summary(values) -> dict:
    """{value, lo, hi, n, sd, p}: the mean with its 95% t-interval and two-sided p."""
    st = mean_ci(list(values))
    return dict(value=st["mean"], lo=st["ci"].lo, hi=st["ci"].hi, n=st["n"], sd=st["sd"],
                p=t_pvalue(st["mean"], st["sd"], st["n"]))


def welch(first, second) -> dict:
    """mean(second) - mean(first) with Welch's 95% interval and two-sided p (unpaired samples); with
    fewer than two values a side, or no spread in either, the interval and p are None (Holm counts a
    None p as 1), never NaN."""
    x, y = list(first), list(second)
    if len(x) < 2 or len(y) < 2:
        return dict(value=None, lo=None, hi=None, n=min(len(x), len(y)), df=None, p=None)
    value = sum(y) / len(y) - sum(x) / len(x)
    if max(x) == min(x) and max(y) == min(y):  # no spread in either sample: no t, no interval (not NaN)
        return dict(value=value, lo=None, hi=None, n=min(len(x), len(y)), df=None, p=None)
    test = sps.ttest_ind(y, x, equal_var=False)
    ci = test.confidence_interval(1 - ALPHA)
    return dict(value=value, lo=float(ci.low), hi=float(ci.high), n=min(len(x), len(y)), df=float(test.df),
                p=float(test.pvalue))


def doublings(first: Cell, second: Cell) -> float:
    """log2 of the ratio of the two cells' steps."""
    return math.log2(second.config().num_iterations / first.config().num_iterations)


def cell_estimates(results: Path) -> dict[str, dict]:
    """{key: estimate dict}: every cell at each rate (`<cell>@<rate>`) and its two-rate primary (`<cell>`)."""
    out = {}
    for c in CELLS:
        for lr in RATES:
            out[f"{c.name}@{lr:g}"] = summary(at_rate(results, c, lr).values())
        out[c.name] = summary(two_rate(results, c).values())
    return out


def contrast_estimates(results: Path) -> dict[str, dict]:
    """The four registered contrasts, Holm-adjusted over the four; the length ones also per doubling."""
    out = {k.key: welch(two_rate(results, cell(k.first)).values(), two_rate(results, cell(k.second)).values())
           for k in CONTRASTS}
    for k, adjusted in zip(CONTRASTS, holm([out[k.key]["p"] for k in CONTRASTS])):
        out[k.key]["p_holm"] = adjusted
        if k.key.startswith("length"):
            per = doublings(cell(k.first), cell(k.second))
            out[f"{k.key}_per_doubling"] = {f: (v / per if f in ("value", "lo", "hi") and v is not None else v)
                                            for f, v in out[k.key].items()}
    return out


def _sign(e: dict) -> int:
    """+1 or -1 where the Holm-adjusted test rejects zero in that direction, else 0."""
    if e.get("p_holm") is None or e["p_holm"] >= ALPHA or e["value"] is None:
        return 0
    return 1 if e["value"] > 0 else -1


def axis_verdict(contrasts: dict) -> str:
    """The account the two axis contrasts support (the registered decision table):
    steps: equal-tokens-per-parameter below zero and equal-steps not decided;
    tokens per parameter: equal-steps above zero and equal-tokens-per-parameter not decided;
    both: both decided in those directions; neither decided: undecided; any decided the other way:
    neither account."""
    tpp, steps = _sign(contrasts["equal_tokens_per_param"]), _sign(contrasts["equal_steps"])
    if tpp > 0 or steps < 0:
        return "neither account"
    return {(-1, 0): "steps", (0, 1): "tokens per parameter", (-1, 1): "both", (0, 0): "undecided"}[(tpp, steps)]


# -----------------------------------------------------------------------------
# Stability

def spread(results: Path, a, b, seeds) -> dict:
    """Each arm's SD of final val bpb between seeds, and the variance ratio a/b with its 95% F interval."""
    va, vb = list(bpb(results, a, seeds).values()), list(bpb(results, b, seeds).values())
    sa, sb = mean_ci(va)["sd"], mean_ci(vb)["sd"]
    out = dict(sd_a=sa, sd_b=sb, n_a=len(va), n_b=len(vb), ratio=None, lo=None, hi=None)
    if sa is not None and sb:
        r = sa ** 2 / sb ** 2
        d1, d2 = len(va) - 1, len(vb) - 1
        out.update(ratio=r, lo=r / sps.f.ppf(1 - ALPHA / 2, d1, d2), hi=r / sps.f.ppf(ALPHA / 2, d1, d2))
    return out


def log_lines(results: Path, run) -> list[dict]:
    path = Path(results) / "runs" / run.run_id / "metrics.jsonl"
    return read_jsonl(path) if path.exists() else []


def final_entropy(lines: list[dict]) -> list[float] | None:
    """The attention entropy per layer (nats, averaged over heads) at the last logged evaluation."""
    diags = [line["diag"]["entropy"] for line in lines if "entropy" in line.get("diag", {})]
    return diags[-1] if diags else None


def mode(entropy: list[float] | None) -> str | None:
    """'sharp' or 'diffuse': the registered rule on the layer-MODE_LAYER head's final entropy."""
    if entropy is None or len(entropy) <= MODE_LAYER:
        return None
    return "diffuse" if entropy[MODE_LAYER] >= MODE_ENTROPY else "sharp"


def spikes(lines: list[dict]) -> int:
    """Loss spikes: excursions where a logged train loss exceeds the median of the SPIKE_WINDOW logged
    losses before it by more than SPIKE_NATS (consecutive such steps are one spike)."""
    losses = [line["train_loss"] for line in lines if isinstance(line.get("train_loss"), (int, float))]
    count, inside = 0, False
    for i in range(SPIKE_WINDOW, len(losses)):
        window = sorted(losses[i - SPIKE_WINDOW:i])
        median = (window[SPIKE_WINDOW // 2] + window[(SPIKE_WINDOW - 1) // 2]) / 2
        high = losses[i] - median > SPIKE_NATS
        count += high and not inside
        inside = high
    return count


def run_stability(results: Path, run) -> dict:
    """{run, entropy per layer, mode, spikes} of one run (its metrics log)."""
    lines = log_lines(results, run)
    entropy = final_entropy(lines)
    return dict(run=run.run_id, entropy=entropy, mode=mode(entropy), spikes=spikes(lines))


def by_mode(results: Path, a, b, seeds) -> dict[str, dict]:
    """The relative effect b - a split by the baseline's mode on each seed: {mode: summary}."""
    effects = relative_effects(results, a, b, seeds)
    modes = {s: run_stability(results, a.run(s))["mode"] for s in effects}
    return {m: dict(summary(v for s, v in effects.items() if modes[s] == m), seeds=sorted(s for s in effects
                                                                                         if modes[s] == m))
            for m in ("sharp", "diffuse")}


def pair_stability(results: Path, a, b, seeds) -> dict:
    """Everything stability reports for one pair of arms on `seeds`."""
    per_arm = {arm.name: [run_stability(results, arm.run(s)) for s in seeds
                          if final_bpb(results, arm.run(s)) is not None] for arm in (a, b)}
    return dict(spread=spread(results, a, b, seeds), by_mode=by_mode(results, a, b, seeds), runs=per_arm,
                spikes={name: sum(r["spikes"] for r in rs) for name, rs in per_arm.items()})


def stability(results: Path) -> dict[str, dict]:
    """pair_stability for every cell and rate of the factorial."""
    return {f"{c.name}@{lr:g}": pair_stability(results, p.a, p.b, c.seeds)
            for c in CELLS for lr, p in c.pairs().items()}
