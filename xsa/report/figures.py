"""
Figures: matplotlib + seaborn, drawn outside pyplot, saved by one byte-stable saver.

`new_figure` makes a figure with no backend and no global state; `save_figure` writes it as PNG and
SVG without dates or software stamps (and SVG ids from a fixed salt), so the same records give the
same bytes. Every figure of the package (report, diagnostics, throughput) goes through these two.
"""

from __future__ import annotations

import io
from pathlib import Path

from xsa.records import atomic_write_bytes


def new_figure(*, nrows=1, ncols=1, figsize, **subplot_kw):
    """(fig, axes[nrows][ncols]): a figure outside pyplot (nothing left open, thread-safe)."""
    import matplotlib
    import seaborn as sns
    from matplotlib.figure import Figure
    sns.set_theme(style="whitegrid", context="paper")
    matplotlib.rcParams["svg.hashsalt"] = "xsa"  # fixed SVG ids: identical figures give identical bytes
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, squeeze=False, **subplot_kw)


def _render(fig, ext: str, meta: dict, dpi: int) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=ext, dpi=dpi, bbox_inches="tight", metadata=meta)
    return buf.getvalue()


def save_figure(fig, out_dir, name: str, dpi: int = 120):
    """Write OUT_DIR/NAME.png and NAME.svg and return the PNG path; with out_dir None, return the
    PNG as an image a notebook displays."""
    png = _render(fig, "png", {"Software": None}, dpi)
    if out_dir is None:
        from IPython.display import Image
        return Image(data=png)
    out_dir = Path(out_dir)
    atomic_write_bytes(out_dir / f"{name}.png", png)
    atomic_write_bytes(out_dir / f"{name}.svg", _render(fig, "svg", {"Date": None, "Creator": None}, dpi))
    return out_dir / f"{name}.png"


def _frame(runs, key):
    import pandas as pd
    rows = [dict(preset=r["preset"], arm=r["variant"], seed=r["spec"].seed, step=m["step"], value=m[key])
            for r in runs for m in r["metrics"] if m.get(key) is not None]
    return pd.DataFrame(rows)


def fig_curves(runs, key: str, ylabel: str, out_dir, name: str):
    """A metric over optimizer steps; line = mean over seeds, band = min..max over seeds."""
    df = _frame(runs, key)
    if df.empty:
        return None
    import seaborn as sns
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
    import pandas as pd
    if not rows:
        return None
    import seaborn as sns
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
    import pandas as pd
    df = pd.DataFrame(rows)
    if df.empty:
        return None
    import seaborn as sns
    fig, axes = new_figure(ncols=len(keys), figsize=(3.4 * len(keys), 3))
    for ax, k in zip(axes[0], keys):
        sns.lineplot(data=df, x="layer", y=k, hue="arm", marker="o", errorbar=None, ax=ax)
        ax.set(title=k, ylabel="")
    return save_figure(fig, out_dir, name)


def fig_throughput(rows: list[dict], out_dir, name: str):
    import pandas as pd
    df = pd.DataFrame([dict(preset=r["preset"], arm=a, tok_per_s=r[f"{a}_tok_per_s"])
                       for r in rows for a in ("baseline", "xsa") if r.get(f"{a}_tok_per_s") is not None])
    if df.empty:
        return None
    import seaborn as sns
    fig, axes = new_figure(figsize=(5, 3))
    ax = axes[0][0]
    sns.barplot(data=df, x="preset", y="tok_per_s", hue="arm", errorbar=None, ax=ax)
    ax.set(ylabel="training tokens/s")
    return save_figure(fig, out_dir, name)


def fig_sweep(rows: list[dict], values: list, xlabel: str, out_dir, name: str):
    """Val bpb change against the reference arm (paired by seed, 95% CI) over a swept field."""
    pts = [(a, r["d_val_bpb_vs_base"], r["d_ci95"]) for a, r in zip(values, rows)
           if r.get("d_val_bpb_vs_base") is not None]
    if not pts:
        return None
    fig, axes = new_figure(figsize=(4.5, 3))
    ax = axes[0][0]
    for a, d, ci in pts:
        ax.errorbar([a], [d], yerr=_error_bar(d, ci), fmt="o", color="C0", capsize=3)
    ax.axhline(0, color="gray", lw=0.8)
    ax.set(xlabel=xlabel, ylabel="val bpb: XSA - baseline")
    return save_figure(fig, out_dir, name)


def fig_gap(curves: dict, out_dir, name: str, relative: bool = True):
    """The key figure: XSA minus baseline in val bpb against training tokens, paired by seed, mean
    and 95% t-band; one panel per comparison. curves: {panel: {tokens: [per-seed differences]}}."""
    from xsa.report.stats import mean_ci
    panels = {k: v for k, v in curves.items() if v}
    if not panels:
        return None
    fig, axes = new_figure(ncols=len(panels), figsize=(4.6 * len(panels), 3.3))
    scale = 100 if relative else 1
    for ax, (title, by_tokens) in zip(axes[0], panels.items()):
        xs = sorted(t for t in by_tokens if t > 0)  # step 0: both arms are the same initial model
        stats = [mean_ci(by_tokens[t]) for t in xs]
        mean = [scale * st["mean"] for st in stats]
        lo = [scale * (st["ci"].lo if st["ci"].defined else st["mean"]) for st in stats]
        hi = [scale * (st["ci"].hi if st["ci"].defined else st["mean"]) for st in stats]
        n = max((st["n"] for st in stats), default=0)
        ax.fill_between(xs, lo, hi, color="C0", alpha=0.25, lw=0, label="95% CI over seeds")
        ax.plot(xs, mean, marker="o", ms=3, color="C0", label=f"mean of {n} paired seeds")
        ax.axhline(0, color="gray", lw=0.8)
        ax.set(title=title, xlabel="training tokens", ylabel="val bpb: XSA - baseline" + (" (%)" if relative else ""))
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, name)


def fig_forest(rows: list[dict], out_dir, name: str, title: str):
    """Every comparison's effect with its 95% CI (rows: label, mean, ci, unit), zero marked."""
    rows = [r for r in rows if r.get("mean") is not None]
    if not rows:
        return None
    fig, axes = new_figure(figsize=(7.5, 0.32 * len(rows) + 1.3))
    ax = axes[0][0]
    for i, r in enumerate(rows):
        ax.errorbar(r["mean"], i, xerr=_error_bar(r["mean"], r["ci"]), fmt="o", color="C3" if r.get("primary") else "C0",
                    capsize=3, ms=4)
    ax.axvline(0, color="gray", lw=0.8)
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel=title)
    return save_figure(fig, out_dir, name)


def fig_diag_effects(rows: list[dict], keys, out_dir, name: str):
    """Per layer, XSA minus baseline in each diagnostics metric (paired by seed, 95% CI), one
    panel per metric, one series per comparison."""
    rows = [r for r in rows if r.get("d") is not None]
    if not rows:
        return None
    comparisons = list(dict.fromkeys(r["comparison"] for r in rows))
    fig, axes = new_figure(ncols=len(keys), figsize=(3.3 * len(keys), 3.0))
    for ax, k in zip(axes[0], keys):
        for j, c in enumerate(comparisons):
            pts = [r for r in rows if r["metric"] == k and r["comparison"] == c]
            for r in pts:
                ax.errorbar(r["layer"] + 0.12 * j, r["d"], yerr=_error_bar(r["d"], r["d_ci95"]), fmt="o", ms=3,
                            color=f"C{j}", capsize=2, label=c if r is pts[0] else None)
        ax.axhline(0, color="gray", lw=0.8)
        ax.set(title=k, xlabel="layer", ylabel="XSA - baseline")
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, out_dir, name)
