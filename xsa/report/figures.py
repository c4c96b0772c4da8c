"""
The report's figures: matplotlib + seaborn, drawn outside pyplot (xsa/runs/plot.py: `new_figure`) and
saved by one byte-stable saver (`save_figure`).
"""

from __future__ import annotations

from xsa.runs.plot import DPI, FULL, HALF, new_figure, save_figure  # noqa: F401 (DPI: the paper's print size)
from xsa.base.stats import Interval


def _frame(runs, key):
    import pandas as pd  # lazy: start-up time (seconds; the tables do without)
    rows = [dict(preset=r["preset"], arm=r["variant"], seed=r["spec"].seed, step=m["step"], value=m[key])
            for r in runs for m in r["metrics"] if m.get(key) is not None]
    return pd.DataFrame(rows)


def fig_curves(runs, key: str, ylabel: str, out_dir, name: str):
    """A metric over optimizer steps; line = mean over seeds, band = min..max over seeds."""
    df = _frame(runs, key)
    if df.empty:
        return None
    import seaborn as sns  # lazy: start-up time (seconds; the tables do without)
    presets = list(dict.fromkeys(df["preset"]))
    fig, axes = new_figure(ncols=len(presets), figsize=(4.5 * len(presets), 3.2))
    for ax, p in zip(axes[0], presets):
        sns.lineplot(data=df[df.preset == p], x="step", y="value", hue="arm", errorbar=("pi", 100), ax=ax)
        ax.set(title=p, xlabel="optimizer step", ylabel=ylabel)
    return save_figure(fig, out_dir, name)


def _error_bar(value: float, ci) -> list:
    """Matplotlib's [[below], [above]] from an Interval (none drawn where it is undefined)."""
    lo, hi = (ci.lo, ci.hi) if ci.defined else (value, value)
    return [[max(value - lo, 0.0)], [max(hi - value, 0.0)]]


def fig_intervals(rows: list[dict], key: str, label: str, out_dir, name: str):
    """Per-arm means with their 95% t-intervals (the table's numbers, drawn)."""
    rows = [r for r in rows if r.get(key) is not None]
    if not rows:
        return None
    fig, axes = new_figure(figsize=(6, 0.35 * len(rows) + 1.2))
    ax = axes[0][0]
    for i, r in enumerate(rows):
        ax.errorbar(r[key], i, xerr=_error_bar(r[key], r[f"{key}_ci95"]), fmt="o", color="C0", capsize=3)
    ax.set_yticks(range(len(rows)), [f"{r['arm']} (n={r['n']})" for r in rows])
    ax.invert_yaxis()
    ax.set(xlabel=f"{label} (mean, 95% CI over seeds)")
    return save_figure(fig, out_dir, name)


def fig_core_tasks(rows: list[dict], out_dir, name: str):
    import pandas as pd  # lazy: start-up time (seconds; the tables do without)
    if not rows:
        return None
    import seaborn as sns  # lazy: start-up time (seconds; the tables do without)
    df = pd.DataFrame([dict(task=r["task"], arm=a, centered=v) for r in rows for a, v in r.items()
                       if a != "task" and v is not None])
    if df.empty:
        return None
    fig, axes = new_figure(figsize=(6, 0.3 * len(rows) + 1.5))
    ax = axes[0][0]
    sns.barplot(data=df, y="task", x="centered", hue="arm", errorbar=None, ax=ax)
    ax.set(xlabel="centered accuracy (mean over seeds)", ylabel="")
    return save_figure(fig, out_dir, name)


def fig_diagnostics(rows: list[dict], keys, out_dir, name: str):
    import pandas as pd  # lazy: start-up time (seconds; the tables do without)
    df = pd.DataFrame(rows)
    if df.empty:
        return None
    import seaborn as sns  # lazy: start-up time (seconds; the tables do without)
    fig, axes = new_figure(ncols=len(keys), figsize=(3.4 * len(keys), 3))
    for ax, k in zip(axes[0], keys):
        sns.lineplot(data=df, x="layer", y=k, hue="arm", marker="o", errorbar=None, ax=ax)
        ax.set(title=k, ylabel="")
    return save_figure(fig, out_dir, name)


def fig_throughput(rows: list[dict], out_dir, name: str):
    import pandas as pd  # lazy: start-up time (seconds; the tables do without)
    df = pd.DataFrame([dict(preset=r["preset"], arm=a, tok_per_s=r[f"{a}_tok_per_s"])
                       for r in rows for a in ("baseline", "xsa") if r.get(f"{a}_tok_per_s") is not None])
    if df.empty:
        return None
    import seaborn as sns  # lazy: start-up time (seconds; the tables do without)
    fig, axes = new_figure(figsize=(5, 3))
    ax = axes[0][0]
    sns.barplot(data=df, x="preset", y="tok_per_s", hue="arm", errorbar=None, ax=ax)
    ax.set(ylabel="training tokens/s")
    return save_figure(fig, out_dir, name)


def _point(ax, x, y, ci, n, color, horizontal=False, ms=4.5, label=None):
    """One estimate: a filled marker with its 95% interval, or, for a single seed (n = 1, no
    interval), a hollow marker and no bar, so it never reads as an estimate with an interval."""
    single = n is not None and n < 2 or not getattr(ci, "defined", False)
    err = None if single else _error_bar(x if horizontal else y, ci)
    kw = dict(fmt="o", color=color, ms=ms, capsize=2.5, lw=1.1, label=label,
              mfc="white" if single else color, mew=1.1)
    if horizontal:
        ax.errorbar(x, y, xerr=err, **kw)
    else:
        ax.errorbar(x, y, yerr=err, **kw)
    return single


def _single_note(ax, loc="lower right"):
    from matplotlib.lines import Line2D  # lazy: start-up time (as xsa/runs/plot.py)
    return Line2D([], [], marker="o", ls="", color="0.3", mfc="white", ms=4.5, label="one seed (n = 1): no interval")


def fig_sweep(rows: list[dict], values: list, xlabel: str, out_dir, name: str, ylabel: str = "val bpb change"):
    """Val bpb change against the reference arm (paired by seed, 95% CI) over a swept field; the
    y label names what is subtracted from what (the reference arm is not always the baseline)."""
    pts = [(a, r["d_val_bpb_vs_base"], r["d_ci95"], r["n"]) for a, r in zip(values, rows)
           if r.get("d_val_bpb_vs_base") is not None]
    if not pts:
        return None
    fig, axes = new_figure(figsize=(HALF, 2.4))
    ax = axes[0][0]
    single = [_point(ax, a, d, ci, n, "C0") for a, d, ci, n in pts]
    ax.axhline(0, color="gray", lw=0.8)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    if any(single):
        ax.legend(handles=[_single_note(ax)], loc="best")
    return save_figure(fig, out_dir, name)


def fig_lr(points: dict, out_dir, name: str):
    """The learning-rate check: per preset, val bpb of the baseline and of XSA at each matrix LR,
    relative to the baseline at the recipe's LR (%). points: {preset: {arm label: [(lr, rel, ci, n)]}}."""
    points = {p: arms for p, arms in points.items() if any(arms.values())}
    if not points:
        return None
    fig, axes = new_figure(ncols=len(points), figsize=(FULL if len(points) > 1 else HALF, 2.5), sharey=True)
    any_single = False
    for ax, (preset, arms) in zip(axes[0], points.items()):
        for j, (label, pts) in enumerate(arms.items()):
            pts = sorted(pts)
            ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], color=f"C{j}", lw=0.8, alpha=0.6)
            for k, (lr, rel, ci, n) in enumerate(pts):
                any_single |= _point(ax, lr, 100 * rel, _scaled(ci, 100), n, f"C{j}", label=label if k == 0 else None)
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        lrs = sorted({p[0] for pts in arms.values() for p in pts})
        ax.set_xticks(lrs, [f"{v:g}" for v in lrs])
        ax.minorticks_off()
        ax.set(title=preset, xlabel="matrix (Muon) learning rate")
    axes[0][0].set_ylabel("val bpb vs baseline at recipe LR (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if any_single:
        handles.append(_single_note(axes[0][0]))
    axes[0][-1].legend(handles=handles, loc="best")
    return save_figure(fig, out_dir, name)


def _scaled(ci, k):
    return Interval(ci.lo * k, ci.hi * k) if getattr(ci, "defined", False) else ci


def fig_task_effects(rows: list[dict], out_dir, name: str):
    """Per CORE task, XSA minus baseline in the bits per byte of the correct continuation (relative,
    paired by seed, 95% CI), one panel per comparison. rows: comparison, task, n, rel, rel_ci95."""
    rows = [r for r in rows if r.get("rel") is not None]
    if not rows:
        return None
    comparisons = list(dict.fromkeys(r["comparison"] for r in rows))
    tasks = sorted({r["task"] for r in rows})
    fig, axes = new_figure(ncols=len(comparisons), figsize=(FULL, 0.16 * len(tasks) + 0.9), sharey=True)
    for ax, c in zip(axes[0], comparisons):
        by_task = {r["task"]: r for r in rows if r["comparison"] == c}
        n = max(r["n"] for r in by_task.values())
        for i, t in enumerate(tasks):
            if t in by_task:
                r = by_task[t]
                _point(ax, 100 * r["rel"], i, _scaled(r["rel_ci95"], 100), r["n"], "C0", horizontal=True, ms=3.5)
        ax.axvline(0, color="gray", lw=0.8)
        ax.set(title=f"{c} (n = {n})", xlabel="XSA - baseline (%)")
    axes[0][0].set_yticks(range(len(tasks)), [t.replace("_", " ") for t in tasks])
    axes[0][0].invert_yaxis()
    return save_figure(fig, out_dir, name)


def fig_gap(curves: dict, out_dir, name: str, relative: bool = True):
    """The key figure: XSA minus baseline in val bpb against training tokens, paired by seed, mean
    and 95% t-band; one panel per comparison. curves: {panel: {tokens: Estimate}} (effects.gap_curves)."""
    panels = {k: v for k, v in curves.items() if v}
    if not panels:
        return None
    fig, axes = new_figure(ncols=len(panels), figsize=(FULL if len(panels) > 1 else HALF, 2.5), sharey=True)
    scale = 100 if relative else 1
    for ax, (title, by_tokens) in zip(axes[0], panels.items()):
        xs = sorted(by_tokens)
        stats = [by_tokens[t] for t in xs]
        mean = [scale * e.value for e in stats]
        lo = [scale * (e.lo if e.ci.defined else e.value) for e in stats]
        hi = [scale * (e.hi if e.ci.defined else e.value) for e in stats]
        n = max((e.n for e in stats), default=0)
        ax.fill_between([x / 1e6 for x in xs], lo, hi, color="C0", alpha=0.25, lw=0, label="95% CI over seeds")
        ax.plot([x / 1e6 for x in xs], mean, marker="o", ms=3, color="C0", label=f"mean of {n} paired seeds")
        ax.axhline(0, color="gray", lw=0.8)
        ax.set(title=title, xlabel="training tokens (millions)")
        ax.legend(loc="upper right")
    axes[0][0].set_ylabel("val bpb: XSA - baseline" + (" (%)" if relative else ""))
    return save_figure(fig, out_dir, name)


def fig_forest(rows: list[dict], out_dir, name: str, title: str, lines: dict | None = None):
    """Every comparison's effect with its 95% CI (rows: label, mean, ci, n, primary), zero marked, and
    each of `lines` ({legend label: x}) as a dashed reference; a single seed is drawn hollow, with no
    interval."""
    rows = [r for r in rows if r.get("mean") is not None]
    if not rows:
        return None
    fig, axes = new_figure(figsize=(FULL - 0.9, 0.22 * len(rows) + 0.8))
    ax = axes[0][0]
    single = [_point(ax, r["mean"], i, r["ci"], r.get("n"), "C3" if r.get("primary") else "C0", horizontal=True)
              for i, r in enumerate(rows)]
    ax.axvline(0, color="gray", lw=0.8)
    handles = [ax.axvline(x, color="C2", lw=0.9, ls="--", label=label) for label, x in (lines or {}).items()
               if x is not None]
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows])
    ax.invert_yaxis()
    ax.set(xlabel=title)
    handles += [_single_note(ax)] if any(single) else []
    if handles:  # below the axes: a legend inside would cover the last rows
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    return save_figure(fig, out_dir, name)


# panel titles in matplotlib's mathtext: subscripts and relations typeset, never ASCII (y_i, !=)
DIAG_TITLES = {"cos_y_v": r"$\cos(y_i, v_i)$ before XSA", "cos_z_v": r"$\cos(z_i, v_i)$ after XSA",
               "diag_mass": r"diagonal mass $a_{ii}$", "first_mass": r"first-token mass $a_{i0}$",
               "entropy": "entropy (nats)", "cos_v_v": r"$\cos(v_i, v_j)$, $i \neq j$"}


def fig_diag_effects(rows: list[dict], keys, out_dir, name: str):
    """Per layer, XSA minus baseline in each diagnostics metric (paired by seed, 95% CI), one
    panel per metric in one row, one series per comparison, the legend beneath."""
    rows = [r for r in rows if r.get("d") is not None]
    if not rows:
        return None
    comparisons = list(dict.fromkeys(r["comparison"] for r in rows))
    fig, axes = new_figure(ncols=len(keys), figsize=(FULL, 2.0))
    flat = axes[0]
    layers = sorted({r["layer"] for r in rows})
    for ax, k in zip(flat, keys):
        for j, c in enumerate(comparisons):
            pts = [r for r in rows if r["metric"] == k and r["comparison"] == c]
            for r in pts:
                _point(ax, r["layer"] + 0.15 * j, r["d"], r["d_ci95"], r["n"], f"C{j}", ms=3,
                       label=f"{c} (n = {r['n']})" if r is pts[0] else None)
        ax.axhline(0, color="gray", lw=0.8)
        ax.set(title=DIAG_TITLES.get(k, k), xlabel="layer")
        ax.set_xticks(layers)
    flat[0].set_ylabel("XSA - baseline")
    handles, labels = flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels))
    return save_figure(fig, out_dir, name)


def fig_paired(effects: dict[int, float], estimate, out_dir, name: str):
    """The primary endpoint seed by seed: each seed's paired effect (%) as a bar, sorted, with the mean and
    its 95% interval across them (the estimate, as the estimates file holds it). effects: {seed: relative
    effect}. No other scale's number is drawn beside it: its size is this scale's only."""
    if not effects or estimate is None or estimate.value is None:
        return None
    order = sorted(effects, key=lambda s: (effects[s], s))
    fig, axes = new_figure(figsize=(HALF, 2.6))
    ax = axes[0][0]
    xs = range(1, len(order) + 1)
    ax.bar(xs, [100 * effects[s] for s in order], width=0.7, color="C0", alpha=0.75, label="one seed's pair")
    if estimate.ci.defined:
        ax.axhspan(100 * estimate.lo, 100 * estimate.hi, color="C3", alpha=0.15, lw=0, label="95% CI of the mean")
    ax.axhline(100 * estimate.value, color="C3", lw=1.1, label=f"mean of {estimate.n} pairs")
    ax.axhline(0, color="gray", lw=0.8)
    ax.set_xticks(list(xs), [str(s) for s in order], rotation=90)
    ax.tick_params(axis="x", labelsize=7)
    ax.set(xlabel="seed (sorted by its effect)", ylabel="val bpb: XSA - baseline (%)")
    fig.legend(loc="outside lower center", ncols=3, frameon=False)
    return save_figure(fig, out_dir, name)


def fig_learning(panels: dict, out_dir, name: str):
    """Learning curves of both arms and their paired gap: per panel (a condition), val bpb of each arm against
    the optimizer step (mean over seeds, 95% band), and beneath, XSA minus baseline relative to each seed's
    baseline (mean, 95% band). panels: {title: {"arms": {label: [(step, mean, lo, hi)]}, "gap": [...]}}."""
    panels = {k: v for k, v in panels.items() if v["gap"]}
    if not panels:
        return None
    fig, axes = new_figure(nrows=2, ncols=len(panels), figsize=(FULL, 2.7), sharex="col", height_ratios=(3, 2))
    for j, (title, p) in enumerate(panels.items()):
        top, bottom = axes[0][j], axes[1][j]
        for k, (label, pts) in enumerate(p["arms"].items()):
            steps = [x[0] for x in pts]
            top.fill_between(steps, [x[2] for x in pts], [x[3] for x in pts], color=f"C{k}", alpha=0.2, lw=0)
            top.plot(steps, [x[1] for x in pts], color=f"C{k}", lw=1.0, label=label)
        late = [x for pts in p["arms"].values() for x in pts if x[0] >= pts[-1][0] * p.get("from", 0.25)]
        top.set_ylim(min(x[2] for x in late) - 0.01, max(x[3] for x in late) + 0.01)
        top.set(title=title, ylabel="val bpb" if j == 0 else None)
        steps = [x[0] for x in p["gap"]]
        bottom.fill_between(steps, [100 * x[2] for x in p["gap"]], [100 * x[3] for x in p["gap"]], color="C3",
                            alpha=0.2, lw=0)
        bottom.plot(steps, [100 * x[1] for x in p["gap"]], color="C3", lw=1.0)
        bottom.axhline(0, color="gray", lw=0.8)
        bottom.set(xlabel="optimizer step", ylabel="XSA - baseline (%)" if j == 0 else None)
    axes[0][0].legend(loc="upper right")
    return save_figure(fig, out_dir, name)


def fig_factorial(cells: list[str], rates: list, est: dict, out_dir, name: str, ylim=(-3.0, 1.5)):
    """The factorial in one figure: left, XSA's effect per cell at each common rate and as each seed's mean over
    both (the registered primary); right, the registered mode split, XSA's effect among seeds whose baseline
    ended sharp and among those that stayed diffuse, per cell and rate. est: the factorial's estimates by key.
    The axis is fixed at `ylim` (%): an interval of two seeds runs off it, its ends beyond the frame."""
    def get(key):
        e = est.get(key)
        return e if e is not None and e.value is not None else None
    fig, axes = new_figure(ncols=2, figsize=(FULL, 2.5), sharey=True)
    left, right = axes[0]
    series = [(f"LR {r:g}", lambda c, r=r: f"{c}_at_{r:g}".replace(".", "_")) for r in rates]
    for k, (label, key) in enumerate([*series, ("mean over both (primary)", lambda c: c)]):
        for i, c in enumerate(cells):
            e = get(key(c.replace(" ", "_")))
            if e is not None:
                _point(left, i + 0.18 * (k - 1), 100 * e.value, _scaled(e.ci, 100), e.n, "C3" if k == 2 else f"C{k}",
                       label=label if i == 0 else None)
    for k, (mode, color) in enumerate((("sharp", "C4"), ("diffuse", "C2"))):  # not the left panel's colours
        first = True
        for i, c in enumerate(cells):
            for m, (_, key) in enumerate(series):
                e = get(f"{key(c.replace(' ', '_'))}_effect_{mode}")
                if e is not None:
                    _point(right, i + 0.2 * (2 * m - 1) + 0.07 * (2 * k - 1), 100 * e.value, _scaled(e.ci, 100), e.n,
                           color, label=f"baseline {mode}" if first else None)
                    first = False
    for ax, title in ((left, "XSA's effect per cell"), (right, "within the baseline's mode (left: 0.04, right: 0.08)")):
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_xticks(range(len(cells)), [c.replace(" ", "\n") for c in cells])  # "w128 long" on two lines: apart
        ax.set(title=title)
    left.set_ylabel("val bpb: XSA - baseline (%)")
    left.set_ylim(*ylim)
    handles = [h for ax in (left, right) for h in ax.get_legend_handles_labels()[0]] + [_single_note(left)]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
    return save_figure(fig, out_dir, name)


def fig_heatmap(rows: list[dict], out_dir, name: str, label: str):
    """A value per layer and head as a heatmap, one panel per level, each cell annotated with the value and
    its 95% interval. rows: level, layer, head, value, ci (Interval)."""
    rows = [r for r in rows if r.get("value") is not None]
    if not rows:
        return None
    import numpy as np  # lazy: start-up time (as seaborn)
    import seaborn as sns  # lazy: start-up time (seconds; the tables do without)
    levels = list(dict.fromkeys(r["level"] for r in rows))
    heads = {lv: sorted({r["head"] for r in rows if r["level"] == lv}) for lv in levels}
    layers = sorted({r["layer"] for r in rows})
    fig, axes = new_figure(ncols=len(levels), figsize=(FULL, 1.9),
                           gridspec_kw=dict(width_ratios=[len(heads[lv]) for lv in levels]))
    for ax, lv in zip(axes[0], levels):
        cell = {(r["layer"], r["head"]): r for r in rows if r["level"] == lv}
        grid = np.array([[cell[(y, h)]["value"] if (y, h) in cell else np.nan for h in heads[lv]] for y in layers])
        text = [[(f"{cell[(y, h)]['value']:.2f}\n[{cell[(y, h)]['ci'].lo:.2f}, {cell[(y, h)]['ci'].hi:.2f}]"
                  if (y, h) in cell and cell[(y, h)]["ci"].defined else "") for h in heads[lv]] for y in layers]
        sns.heatmap(grid, vmin=0, vmax=1, cmap="viridis", annot=np.array(text), fmt="", cbar=False, ax=ax,
                    annot_kws=dict(size=6), xticklabels=heads[lv], yticklabels=layers)
        ax.set(title=lv, xlabel="head")
    axes[0][0].set_ylabel("layer")
    fig.colorbar(axes[0][-1].collections[0], ax=axes[0].tolist(), label=label, shrink=0.9)
    return save_figure(fig, out_dir, name)
