"""
XSA across scales, on one axis of training FLOPs (registered with the factorial study): this
project's CPU conditions, each with its 95% interval over paired seeds, beside the published results,
each as its source reports it, with its runs per arm and what differs from ours. A published result
whose FLOPs its source does not state, and that no recipe here fixes, is a row of the table and no
point of the figure; one that contrasts something other than XSA against none (partial against full
XSA, or steps saved at another length) is a row only. Nothing here has an interval where its source
gives none.

    rows = cross_scale_rows(book, scale)      # book: the scale study's estimates; scale: its Study
    fig_cross_scale(rows, figures_dir)        # results/figures/cross_scale.{png,svg}
"""

from __future__ import annotations

from matplotlib.ticker import NullFormatter

from xsa.gpu.cost import run_flops
from xsa.stack.presets import make_config
from xsa.report.figures import FULL, new_figure, save_figure
from xsa.report.writing import pct
from xsa.books.published import PUBLISHED
from xsa.studies.registry import seed_paper_effect
from xsa.studies.scale import HEADS_LEVELS, LENGTH_LEVELS
from xsa.books.estimates import slug

# this project's conditions as the scale study's book names them (each at its level's own config)
OURS = {**{slug(n): n for n in LENGTH_LEVELS.values() if n != LENGTH_LEVELS["x4"]},
        "check_common_xsa_rate": LENGTH_LEVELS["x4"], **{slug(n): n for n in HEADS_LEVELS.values()}}
OURS_LABEL = {"check_common_xsa_rate": "length x4, both arms at one rate"}


def _ours(book: dict, scale) -> list[dict]:
    rows = []
    for key, level in OURS.items():
        e = book[key]
        if e.value is None:
            continue
        cfg = scale.comparison(level).b.config()
        rows.append(dict(source="this paper", what=OURS_LABEL.get(key, level), flops=run_flops(cfg),
                         flops_how="computed", effect=e.value, lo=e.lo, hi=e.hi, runs_per_arm=e.n,
                         metric="val bpb", differs="CPU scale, fp32; each arm at its own tuned rate"
                         if key != "check_common_xsa_rate" else "CPU scale, fp32; both arms at XSA's rate"))
    return rows


def _published() -> list[dict]:
    """The published results, their effects relative to the arm without XSA (in the metric each
    reports), and their training FLOPs: stated by the source, or computed from the recipe our
    presets hold for that shape (the seed paper's d12 and d24, nanochat's d14), or not stated."""
    rows = []
    for depth in ("d12", "d24"):
        rows.append(dict(source="the seed paper", what=depth, flops=run_flops(make_config(depth)),
                         flops_how="from nanochat's recipe at that shape", effect=seed_paper_effect(depth),
                         runs_per_arm=1, metric="val bpb", differs="GPU, bf16; ClimbMix; one rate"))
    p = PUBLISHED["nanochat_702"]
    d14 = make_config("d12-nanochat", n_layer=p["depth"], n_embd=64 * p["depth"], n_head=p["depth"] // 2,
                      n_kv_head=p["depth"] // 2)
    rows.append(dict(source="nanochat #702", what=f"d{p['depth']}", flops=run_flops(d14),
                     flops_how="from nanochat's recipe at that shape", effect=p["bpb_xsa"] / p["bpb_base"] - 1,
                     runs_per_arm=p["runs_per_arm"], metric="val bpb", differs="GPU (one A100); one rate"))
    m = PUBLISHED["marin_5854"]
    for scale in ("d512", "d768"):
        base, none = m[f"loss_xsa_{scale}"], m[f"loss_xsa_{scale}"] + m[f"loss_up_{scale}"]
        rows.append(dict(source="marin #5854", what=scale, flops=m[f"flops_{scale}"], flops_how="stated",
                         effect=base / none - 1, runs_per_arm=m["runs_per_arm"], metric="Paloma macro loss",
                         differs="mixture of experts; the arm without XSA has a context norm"))
    g = PUBLISHED["modded_264"]
    rows.append(dict(source="modded-nanogpt #264", what=f"{g['params_m']} M", flops=None, flops_how="not stated",
                     effect=None, runs_per_arm=g["runs_per_arm"], metric="val loss",
                     differs=f"gated XSA on {g['layers']} layers; {g['steps_base'] - g['steps_xsa']} fewer steps "
                     "at equal loss, not a loss at equal steps"))
    for key in ("golf_609", "golf_1125"):
        q = PUBLISHED[key]
        rows.append(dict(source=f"parameter-golf #{key.split('_')[1]}", what="all layers against the last 4",
                         flops=None, flops_how="not stated", effect=None, absolute=q["bpb"],
                         runs_per_arm=q.get("runs_per_arm"), metric="val bpb",
                         differs="partial against full XSA, not XSA against none"))
    return rows


def cross_scale_rows(book: dict, scale) -> list[dict]:
    """Every row, this paper's first, each with: source, what, flops (None where not stated), how the
    FLOPs are known, effect (relative; None where the contrast is not XSA against none at equal steps),
    lo/hi (ours only), runs per arm, metric, what differs."""
    return _ours(book, scale) + _published()


def cross_scale_table(rows: list[dict]) -> list[dict]:
    """The rows as the table prints them."""
    out = []
    for r in rows:
        effect = pct(r["effect"])  # "n/a" where a source states none
        if r.get("lo") is not None:
            effect += f" [{pct(r['lo'])}, {pct(r['hi'])}]"
        if r.get("absolute") is not None:
            effect = f"{r['absolute']:+.4f} (absolute)"
        out.append(dict(source=r["source"], what=r["what"], flops="not stated" if r["flops"] is None
                        else f"{r['flops']:.2g}", flops_how=r["flops_how"], effect=effect,
                        runs_per_arm="not stated" if r["runs_per_arm"] is None else r["runs_per_arm"],
                        metric=r["metric"], differs=r["differs"]))
    return out


def fig_cross_scale(rows: list[dict], out_dir, name: str = "cross_scale"):
    """XSA's relative effect against training FLOPs, in two panels with axes of their own: ours with 95%
    intervals (left), the published results as hollow markers with no interval (right: one run each, or
    runs whose spread their source does not give). Apart, because the scales, losses and corpora differ:
    the figure places each result by its compute and sets no size of ours against theirs."""
    fig, axes = new_figure(ncols=2, figsize=(FULL, 2.6))  # low enough to share an appendix page with its paragraph
    left, right = axes[0]
    ours = [r for r in rows if r["source"] == "this paper"]
    left.errorbar([r["flops"] for r in ours], [100 * r["effect"] for r in ours],
                  yerr=[[100 * (r["effect"] - r["lo"]) for r in ours], [100 * (r["hi"] - r["effect"]) for r in ours]],
                  fmt="o", color="C0", ms=4, capsize=2, lw=1, label="this paper (CPU, 95% CI over paired seeds)")
    markers = iter("sDv^P")
    for source in dict.fromkeys(r["source"] for r in rows if r["source"] != "this paper"):
        pts = [r for r in rows if r["source"] == source and r["flops"] is not None and r["effect"] is not None]
        if pts:
            right.plot([r["flops"] for r in pts], [100 * r["effect"] for r in pts], next(markers), mfc="white",
                       color="C1", ms=5, ls="none", label=f"{source} (one run per arm)")
            for r in pts:
                right.annotate(r["what"], (r["flops"], 100 * r["effect"]), textcoords="offset points", fontsize=6,
                               xytext=(4, -9) if source.startswith("marin") else (4, 3))  # apart from d12-d14's
    for ax, title in ((left, "this paper: CPU scale, val bpb"), (right, "published: GPU scale, each its own loss")):
        ax.axhline(0, color="0.5", lw=0.6)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: a narrow span's minor labels collide
        ax.set(xlabel="training FLOPs", title=title)
    right.margins(x=0.12, y=0.18)  # room for each marker's label inside the frame
    left.set_ylabel("XSA's change in final loss (%)")
    fig.legend(loc="outside lower center", ncols=2, frameon=False)
    return save_figure(fig, out_dir, name)
