"""
The optimizer study's registered estimates and its figure, read from run records (results/runs/<run id>/;
the study's design is xsa/studies/optimizer.py):

- XSA's effect on final val bpb, relative to the seed's baseline, paired by seed, 95% t-interval: under
  AdamW at tuned rates (20 pairs), under Muon at tuned rates (the robust primary, reported beside it), and
  at the baseline's selected rate under each optimizer (10 pairs);
- the interaction: per seed, XSA's effect under Muon minus under AdamW (tuned, seeds 100-119), t-interval;
- LR sensitivity (Wortsman et al. 2023) per optimizer, width and arm over the registered 7-point grid: the
  mean over the grid of (the mean capped val bpb at the rate minus the best such mean), where each run
  counts at min(final, initial val bpb) (a diverged run at its initial); a seed-bootstrap interval, and
  XSA's change of it (XSA minus baseline) with its interval and two-sided bootstrap p;
- Holm at a family-wise 5% over FAMILY;
- per grid point, descriptive: diverged runs (a diverged.json, a non-finite val bpb, or a final val bpb
  above the initial), spiky runs (the factorial's registered spike rule on the train loss), and the
  largest pre-softmax attention logit and output-logit RMS at the run's end and at the logged evaluation
  at or after its largest spike (None where the log predates these diagnostics).

Nothing here raises on missing or interim records: every estimate says how many runs or pairs it has.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from statistics import median

from xsa.studies.factorial.analysis import SPIKE_NATS, SPIKE_WINDOW, log_lines, relative_effects, spikes, summary
from xsa.runs.plot import FULL, new_figure, save_figure
from xsa.base.records import read_json
from xsa.base.stats import holm
from xsa.studies.optimizer import (COMMON_SEEDS, ESTIMATE_PRESET, FIELDS, OPTIMIZERS, SELECTION_SEEDS, TUNED_SEEDS,
                                   estimation_pairs, label, optimizer_study, pair, rule, selections)
from xsa.studies.rules import capped_bpb, diverged, final_bpb, initial_bpb

ALPHA = 0.05
BOOT = 2000  # seed-bootstrap resamples of a sensitivity
BOOT_SEED = 2309  # the bootstrap's fixed RNG seed (arXiv:2309.14322)
# the registered family (Holm over all of them)
FAMILY = ("adamw_tuned", "interaction", "muon_common", "adamw_common",
          *(f"sensitivity_change/{opt}/{preset}" for opt in OPTIMIZERS for preset in SELECTION_SEEDS))
FIGURE = "optimizer_lr"
COLORS = {"base": "C0", "xsa": "C1"}


# -----------------------------------------------------------------------------
# One run: its value, divergence, spikes and instability diagnostics

def largest_spike(lines: list[dict]) -> int | None:
    """The logged step whose train loss is farthest above the median of the SPIKE_WINDOW logged losses
    before it, where that is a spike by the registered rule (more than SPIKE_NATS); None without one."""
    losses = [(line["step"], line["train_loss"]) for line in lines
              if isinstance(line.get("train_loss"), (int, float)) and math.isfinite(line["train_loss"])]
    best = None
    for i in range(SPIKE_WINDOW, len(losses)):
        excess = losses[i][1] - median(v for _, v in losses[i - SPIKE_WINDOW:i])
        if excess > SPIKE_NATS and (best is None or excess > best[0]):
            best = (excess, losses[i][0])
    return None if best is None else best[1]


def diag_at(lines: list[dict], step: int | None) -> dict | None:
    """The diagnostics of the last logged evaluation (step None), or of the first at or after `step`."""
    diags = [line for line in lines if isinstance(line.get("diag"), dict)]
    if step is None:
        return diags[-1]["diag"] if diags else None
    return next((line["diag"] for line in diags if line["step"] >= step), None)


def instability(diag: dict | None) -> dict:
    """{attn_logit_max: per layer, logit_rms}: None where not logged (a record from before they were)."""
    diag = diag or {}
    top, rms = diag.get("attn_logit_max"), diag.get("logit_rms")
    return dict(attn_logit_max=top if isinstance(top, list) else None,
                logit_rms=float(rms) if isinstance(rms, (int, float)) else None)


def _finite(v):
    return v if v is not None and math.isfinite(v) else None


def run_record(results: Path, run) -> dict | None:
    """Everything the study reads from one run, or None while it is pending."""
    value = capped_bpb(results, run)
    if value is None:
        return None
    lines = log_lines(results, run)
    final, start = final_bpb(results, run), initial_bpb(results, run)
    spike = largest_spike(lines)
    return dict(run=run.run_id, seed=run.seed, final=final, initial=start, value=_finite(value),
                diverged=diverged(results, run) or (final is not None and start is not None and final > start),
                spikes=spikes(lines), spike_step=spike, end=instability(diag_at(lines, None)),
                at_spike=instability(diag_at(lines, spike)) if spike is not None else None)


# -----------------------------------------------------------------------------
# A grid: per rate, the runs and their counts

def _largest(records: list[dict], where: str, key: str) -> float | None:
    """The largest `key` over the runs (and layers) at `where` ("end" or "at_spike"), None if none logged."""
    values = []
    for r in records:
        v = (r.get(where) or {}).get(key)
        values += v if isinstance(v, list) else [] if v is None else [v]
    return max(values) if values else None


def grid_rows(results: Path, opt: str, preset: str, arm, grid) -> list[dict]:
    """Per rate of `grid`: the runs on the selection seeds and their counts (descriptive)."""
    r, rows = rule(opt, preset), []
    for lr in grid:
        records = [run_record(results, r.at(arm, lr).run(s)) for s in r.seeds]
        done = [x for x in records if x is not None]
        values = [x["value"] for x in done if x["value"] is not None]
        rows.append(dict(lr=lr, n=len(done), pending=len(records) - len(done),
                         mean=sum(values) / len(values) if values and len(values) == len(done) else None,
                         diverged=sum(x["diverged"] for x in done), spiky=sum(x["spikes"] > 0 for x in done),
                         not_logged=sum(x["end"]["attn_logit_max"] is None for x in done),
                         **{f"{k}_{w}": _largest(done, w, k) for k in ("attn_logit_max", "logit_rms")
                            for w in ("end", "at_spike")},
                         runs=done))
    return rows


# -----------------------------------------------------------------------------
# LR sensitivity (Wortsman et al. 2023) and its seed bootstrap

def grid_values(results: Path, opt: str, preset: str, arm) -> dict[float, dict[int, float]] | None:
    """{lr: {seed: capped val bpb}} over the registered grid, or None until every run of it has a value."""
    r = rule(opt, preset)
    out = {lr: {s: capped_bpb(results, r.at(arm, lr).run(s)) for s in r.seeds} for lr in r.grid}
    return None if any(v is None for per in out.values() for v in per.values()) else out


def sensitivity(values: dict[float, dict[int, float]], seeds) -> float:
    """The mean over the grid of (the mean over `seeds` at the rate minus the lowest such mean): each run
    already at min(final, initial), so the mean is at most the initial loss, as Wortsman's min(L, L0)."""
    means = [sum(per[s] for s in seeds) / len(seeds) for per in values.values()]
    best = min(means)
    return sum(m - best for m in means) / len(means)


def _interval(draws: list[float]) -> tuple[float, float]:
    """The 2.5% and 97.5% percentiles of the bootstrap draws."""
    d = sorted(draws)
    at = lambda q: d[min(len(d) - 1, max(0, round(q * (len(d) - 1))))]
    return at(ALPHA / 2), at(1 - ALPHA / 2)


def sensitivity_estimate(base: dict | None, xsa: dict | None, seeds) -> dict:
    """Each arm's sensitivity with its seed-bootstrap interval, and XSA's change with interval and p (the
    same resampled seeds for both arms: a seed's two runs share their data order)."""
    seeds, out = list(seeds), {}
    rng = random.Random(BOOT_SEED)
    picks = [[rng.choice(seeds) for _ in seeds] for _ in range(BOOT)]
    draws = {}
    for name, values in (("base", base), ("xsa", xsa)):
        if values is None:
            out[name] = dict(value=None, lo=None, hi=None, n=0)
            continue
        draws[name] = [sensitivity(values, p) for p in picks]
        lo, hi = _interval(draws[name])
        out[name] = dict(value=sensitivity(values, seeds), lo=lo, hi=hi, n=len(seeds))
    if len(draws) < 2:
        out["change"] = dict(value=None, lo=None, hi=None, n=0, p=None)
        return out
    change = [x - b for b, x in zip(draws["base"], draws["xsa"])]
    lo, hi = _interval(change)
    below, above = sum(c <= 0 for c in change) / BOOT, sum(c >= 0 for c in change) / BOOT
    out["change"] = dict(value=out["xsa"]["value"] - out["base"]["value"], lo=lo, hi=hi, n=len(seeds),
                         p=min(1.0, 2 * min(below, above)))
    return out


def sensitivities(results: Path) -> dict[str, dict]:
    """{"<optimizer>/<preset>": sensitivity_estimate} for every optimizer and width."""
    return {f"{opt}/{preset}": sensitivity_estimate(*(grid_values(results, opt, preset, arm)
                                                      for arm in pair(opt, preset).arms()), SELECTION_SEEDS[preset])
            for opt in OPTIMIZERS for preset in SELECTION_SEEDS}


# -----------------------------------------------------------------------------
# The effects at cpu-w64-d4 and the family

def effects(results: Path, state: dict) -> dict[str, dict]:
    """The tuned, common-rate and interaction estimates (empty summaries while a selection is pending)."""
    tuned, common = {}, {}
    for opt in OPTIMIZERS:
        chosen = {lab: state[(ESTIMATE_PRESET, opt, lab)][1] for lab in ("base", "xsa")}
        if None in chosen.values():
            tuned[opt], common[opt] = {}, {}
            continue
        t, c = estimation_pairs(opt, chosen)
        tuned[opt] = relative_effects(results, t.a, t.b, TUNED_SEEDS)
        common[opt] = relative_effects(results, c.a, c.b, COMMON_SEEDS)
    both = sorted(tuned["muon"].keys() & tuned["adamw"].keys())
    out = {f"{opt}_tuned": summary(tuned[opt].values()) for opt in ("adamw", "muon")}
    out.update({f"{opt}_common": summary(common[opt].values()) for opt in ("muon", "adamw")})
    out["interaction"] = summary(tuned["muon"][s] - tuned["adamw"][s] for s in both)
    return out


def family(endpoints: dict, sens: dict) -> dict[str, dict]:
    """The registered family's estimates with their Holm-adjusted p (a test not yet run stays in it)."""
    rows = {k: endpoints[k] for k in FAMILY if k in endpoints}
    rows.update({k: sens[k.split("/", 1)[1]]["change"] for k in FAMILY if k.startswith("sensitivity_change/")})
    rows = {k: dict(rows[k]) for k in FAMILY}
    for k, adjusted in zip(FAMILY, holm([rows[k]["p"] for k in FAMILY])):
        rows[k]["p_holm"] = adjusted
        rows[k]["decided"] = adjusted is not None and adjusted < ALPHA
    return rows


def _selection_rows(state: dict) -> dict[str, dict]:
    out = {}
    for (preset, opt, lab), (grid, chosen) in state.items():
        edge = chosen is not None and chosen in (grid[0], grid[-1])
        out[f"{preset}/{opt}/{lab}"] = dict(field=FIELDS[opt], grid=grid, registered=list(rule(opt, preset).grid),
                                            selected=chosen, at_edge=edge)
    return out


def _grids(results: Path, state: dict) -> dict[str, list[dict]]:
    return {f"{preset}/{opt}/{label(arm)}": grid_rows(results, opt, preset, arm, state[(preset, opt, label(arm))][0])
            for preset in SELECTION_SEEDS for opt in OPTIMIZERS for arm in pair(opt, preset).arms()}


def _counts(results: Path) -> dict:
    """How many declared runs have a record, diverged or are pending, and the CPU hours of the finished."""
    study = optimizer_study(results)
    done = [r for r in study.runs if capped_bpb(results, r) is not None]
    summaries = [Path(results) / "runs" / r.run_id / "summary.json" for r in done]
    cpu = sum(read_json(p).get("cpu_time_s") or 0 for p in summaries if p.exists())
    return dict(declared=len(study.runs), finished=len(done), pending=len(study.runs) - len(done),
                diverged=sum(diverged(results, r) for r in done), cpu_hours=cpu / 3600,
                pending_comparisons=list(study.pending))


def estimates(results: Path) -> dict:
    """The study's registered estimates, JSON-able; interim where runs are pending (the counts say so)."""
    results = Path(results)
    state = selections(results)
    grids = _grids(results, state)
    ends = effects(results, state)
    sens = sensitivities(results)
    return dict(study="optimizer", counts=_counts(results), selections=_selection_rows(state),
                effects=ends, sensitivity=sens, family=family(ends, sens), grids=grids)


# -----------------------------------------------------------------------------
# The figure: final val bpb against the swept LR, one panel per optimizer and width

def _panel(ax, rows_by_arm: dict[str, list[dict]], chosen: dict[str, float | None], title: str, field: str):
    finals = [x["final"] for rows in rows_by_arm.values() for row in rows for x in row["runs"]
              if x["final"] is not None and not x["diverged"]]
    low = min(finals, default=1.0)
    top = min(max(finals, default=low * 1.1), low * 1.15)  # a diverged run is drawn here, not at its loss
    for lab, rows in rows_by_arm.items():
        c = COLORS[lab]
        for row in rows:
            for x in row["runs"]:
                clipped = x["diverged"] or x["final"] is None or x["final"] > top
                ax.scatter(row["lr"], top if clipped else x["final"], color=c, s=14 if clipped else 9,
                           marker="x" if x["diverged"] else "^" if clipped else "o", alpha=0.8, lw=1, zorder=3)
        means = [(row["lr"], row["mean"]) for row in rows if row["mean"] is not None and row["mean"] <= top]
        if means:
            ax.plot(*zip(*means), color=c, lw=1.2, label="baseline" if lab == "base" else "XSA")
        if chosen.get(lab) is not None:
            ax.axvline(chosen[lab], color=c, ls=":", lw=1)
    grid = sorted({row["lr"] for rows in rows_by_arm.values() for row in rows})
    ax.set_xscale("log")
    # every grid point ticked; on a panel a quarter of a page wide, a label on every other one (they overlap)
    ax.set_xticks(grid, [f"{v:g}" if i % 2 == 0 or len(grid) <= 5 else "" for i, v in enumerate(grid)], rotation=45)
    ax.minorticks_off()
    ax.set_xlim(grid[0] / 1.4, grid[-1] * 1.4)
    if not finals:
        ax.text(0.5, 0.5, "no record yet", transform=ax.transAxes, ha="center", va="center", color="0.4")
    ax.set_ylim(low - 0.02 * (top - low + 0.1), top + 0.04 * (top - low + 0.1))
    ax.set_title(title)
    ax.set_xlabel(field)
    ax.set_ylabel("final val bpb")


def figure(results: Path, out_dir=None, height: float = 5.2, row: bool = False):
    """Final val bpb against the swept matrix LR (log x) per arm: every seed a point, the arm's mean
    (diverged runs at their initial loss) a line, the selected rates dotted, diverged runs an x at the top
    (a run above the panel a triangle); PNG and SVG under out_dir (None: the PNG, for a notebook), `height`
    inches tall, its panels an optimizer per row or, with `row`, all in one row (the paper's page)."""
    results = Path(results)
    state = selections(results)
    cells = [(opt, preset) for opt in OPTIMIZERS for preset in SELECTION_SEEDS]
    ncols = len(cells) if row else len(SELECTION_SEEDS)
    fig, axes = new_figure(nrows=len(cells) // ncols, ncols=ncols, figsize=(FULL, height))
    for k, (opt, preset) in enumerate(cells):
        arms = {label(a): a for a in pair(opt, preset).arms()}
        rows = {lab: grid_rows(results, opt, preset, a, state[(preset, opt, lab)][0]) for lab, a in arms.items()}
        chosen = {lab: state[(preset, opt, lab)][1] for lab in arms}
        _panel(axes[k // ncols][k % ncols], rows, chosen, f"{'Muon' if opt == 'muon' else 'AdamW'}, {preset}",
               FIELDS[opt])
    if axes[0][0].get_legend_handles_labels()[0]:  # no line before the first grid point has its records
        axes[0][0].legend(loc="upper left")
    return save_figure(fig, out_dir, FIGURE)
