"""
Tables and figures of the paper, built from run records only (no model, no training).

Reads results/runs/<run_id>/{config,summary,eval,diagnostics,provenance}.json + metrics.jsonl and
results/throughput/<preset>.json. Writes results/tables/<name>.{csv,md} and
results/figures/<name>.{png,svg}. Everything is deterministic: the same records give the same
bytes (fixed number formats, SVG ids from a fixed salt, no dates or software stamps in files).
A record that is missing (evaluation not run yet, say) gives `n/a` cells, never an error.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from xsa.records import atomic_write_bytes, atomic_write_text, read_json, read_jsonl
from xsa.studies import Run

RECORDS = ("config", "summary", "eval", "diagnostics", "provenance")

# The seed paper's numbers (Zhai, 2026; GPU scale, one run per arm), shown beside ours as theirs.
SEED_PAPER = {
    "d12": {"base": dict(val_bpb=0.8484, core=0.1602), "xsa1": dict(val_bpb=0.8457, core=0.1508)},
    "d24": {"base": dict(val_bpb=0.7193, core=0.2593, chatcore=0.3638),
            "xsa1": dict(val_bpb=0.7171, core=0.2606, chatcore=0.3682)},
}


# -----------------------------------------------------------------------------
# Loading records

def _maybe_json(path: Path):
    return read_json(path) if path.exists() else None


def load_run(run_dir) -> dict:
    run_dir = Path(run_dir)
    rec = {name: _maybe_json(run_dir / f"{name}.json") for name in RECORDS}
    metrics = run_dir / "metrics.jsonl"
    rec["metrics"] = read_jsonl(metrics) if metrics.exists() else []
    c = rec["config"]
    spec = Run(c["preset"], c["model"]["xsa_alpha"], c["model"]["xsa_layers"], c["model"]["xsa_value"],
               c["optimizer"], c["seed"])
    rec.update(id=run_dir.name, dir=run_dir, spec=spec, arm=spec.arm, preset=spec.preset,
               variant=spec.arm[len(spec.preset) + 1:])  # the arm without its preset: base, xsa1, ...
    return rec


def load_runs(results_dir, run_ids=None) -> list[dict]:
    """Run records under results_dir/runs (those in run_ids, if given) that have a config.json."""
    root = Path(results_dir) / "runs"
    dirs = [root / r for r in run_ids] if run_ids is not None else sorted(root.glob("*"))
    return [load_run(d) for d in sorted(dirs) if (d / "config.json").exists()]


def load_throughput(results_dir) -> dict:
    return {p.stem: read_json(p) for p in sorted((Path(results_dir) / "throughput").glob("*.json"))}


def metric(run: dict, name: str):
    """One number of a run, or None: val_bpb, core, chatcore, or task:<label> (centered accuracy)."""
    if name == "val_bpb":
        return (run["summary"] or {}).get("val_bpb")
    ev = run["eval"] or {}
    if name.startswith("task:"):
        return (ev.get("tasks", {}).get(name[5:]) or {}).get("centered")
    value = ev.get(name)
    return value.get(name) if isinstance(value, dict) else value  # {"chatcore": {"chatcore": x, ...}} too


# -----------------------------------------------------------------------------
# Statistics: t-intervals over seeds

def _t_two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer df, in closed form (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2 == 1:
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        s = math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0
        return 2 / math.pi * (theta + s)
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


def t_critical(df: int, level: float = 0.95) -> float:
    """The two-sided critical value of Student's t (bisection on the exact CDF)."""
    lo, hi = 0.0, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_two_sided(mid, df) < level else (lo, mid)
    return (lo + hi) / 2


def mean_ci(values, level: float = 0.95) -> dict:
    """Mean and t-interval over seeds; the interval needs at least two values."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return dict(n=0, mean=None, lo=None, hi=None)
    mean = sum(xs) / n
    if n < 2:
        return dict(n=1, mean=mean, lo=None, hi=None)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_critical(n - 1, level) * sd / math.sqrt(n)
    return dict(n=n, mean=mean, lo=mean - half, hi=mean + half)


def finished(runs) -> int:
    """How many runs finished training (a run still in progress has a config but no summary)."""
    return sum(1 for r in runs if r["summary"])


def by_arm(runs) -> dict:
    out = {}
    for r in runs:
        out.setdefault(r["arm"], []).append(r)
    return out


def seed_differences(runs, arm_a: str, arm_b: str, name: str) -> dict:
    """{seed: B minus A} over the seeds both arms have (the two arms of a seed see the same data)."""
    a = {r["spec"].seed: metric(r, name) for r in runs if r["arm"] == arm_a}
    b = {r["spec"].seed: metric(r, name) for r in runs if r["arm"] == arm_b}
    return {s: b[s] - a[s] for s in sorted(a.keys() & b.keys()) if a[s] is not None and b[s] is not None}


def paired(runs, arm_a: str, arm_b: str, name: str) -> dict:
    """B minus A per seed, as a mean with a t-interval."""
    return mean_ci(seed_differences(runs, arm_a, arm_b, name).values())


def interaction(runs, pair_1: tuple, pair_2: tuple, name: str) -> dict:
    """How much the effect of pair_2 (base arm, treated arm) differs from that of pair_1, per seed:
    (treated_2 - base_2) - (treated_1 - base_1). Seeds fix the data order, so all four runs of a seed
    see the same batches and the seed is the unit of the interval."""
    d1, d2 = seed_differences(runs, *pair_1, name), seed_differences(runs, *pair_2, name)
    return mean_ci([d2[s] - d1[s] for s in sorted(d1.keys() & d2.keys())])


# -----------------------------------------------------------------------------
# Tables: lists of dicts, written as CSV and Markdown with fixed number formats

def fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def fmt_ci(ci: dict, digits: int = 4) -> str:
    return "n/a" if ci["lo"] is None else f"[{ci['lo']:.{digits}f}, {ci['hi']:.{digits}f}]"


def parse_ci(text: str) -> tuple[float, float] | None:
    """The inverse of fmt_ci: "[lo, hi]" -> (lo, hi); "n/a" -> None."""
    if text == "n/a":
        return None
    lo, hi = (float(v) for v in text.strip("[]").split(", "))
    return lo, hi


def rel(a, b):
    return None if a is None or b is None or a == 0 else (b - a) / a


def to_markdown(rows: list[dict]) -> str:
    if not rows:
        return "_no records_\n"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_table(rows: list[dict], out_dir, name: str) -> None:
    out_dir = Path(out_dir)
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows({k: fmt(v, 6) for k, v in r.items()} for r in rows)
    atomic_write_text(out_dir / f"{name}.csv", buf.getvalue())
    atomic_write_text(out_dir / f"{name}.md", to_markdown(rows))


def runs_table(runs) -> list[dict]:
    rows = []
    for r in runs:
        s, prov = r["summary"] or {}, r["provenance"] or {}
        rows.append(dict(run=r["id"], preset=r["preset"], optimizer=r["spec"].optimizer,
                         alpha=r["spec"].alpha, layers=r["spec"].xsa_layers, value=r["spec"].xsa_value,
                         seed=r["spec"].seed, steps=s.get("steps"), val_bpb=metric(r, "val_bpb"),
                         core=metric(r, "core"), chatcore=metric(r, "chatcore"),
                         tok_per_s=s.get("tok_per_s"), config_hash=prov.get("config_hash"),
                         git_commit=(prov.get("git_commit") or "n/a")[:10]))
    return rows


def arms_table(runs, arms=None, baseline=None) -> list[dict]:
    """One row per arm: n, mean and 95% CI of val bpb, CORE, ChatCORE; paired change vs `baseline`."""
    groups = by_arm(runs)
    rows = []
    for arm in arms or list(groups):
        rs = groups.get(arm, [])
        row = dict(arm=arm, n=finished(rs))
        for name in ("val_bpb", "core", "chatcore"):
            ci = mean_ci(metric(r, name) for r in rs)
            row[name], row[f"{name}_ci95"] = ci["mean"], fmt_ci(ci)
        if baseline:
            d = paired(runs, baseline, arm, "val_bpb")
            row["d_val_bpb_vs_base"], row["d_ci95"] = d["mean"], fmt_ci(d)
        rows.append(row)
    return rows


def main_table(runs, presets) -> list[dict]:
    """Depth x {baseline, XSA}: ours (n seeds, 95% CI) and the seed paper's (theirs, GPU scale)."""
    groups, rows = by_arm(runs), []
    for p in presets:
        base = {k: mean_ci(metric(r, k) for r in groups.get(f"{p}_base", [])) for k in ("val_bpb", "core", "chatcore")}
        for variant in ("base", "xsa1"):
            rs = groups.get(f"{p}_{variant}", [])
            row = dict(source="ours", scale=p, arm="baseline" if variant == "base" else "XSA a=1",
                       n=finished(rs))
            for k in ("val_bpb", "core", "chatcore"):
                ci = mean_ci(metric(r, k) for r in rs)
                row[k], row[f"{k}_ci95"] = ci["mean"], fmt_ci(ci)
                row[f"{k}_rel"] = rel(base[k]["mean"], ci["mean"]) if variant == "xsa1" else None
            rows.append(row)
    for depth, arms in SEED_PAPER.items():
        for variant, nums in arms.items():
            row = dict(source="theirs (Zhai 2026)", scale=f"{depth} (GPU)",
                       arm="baseline" if variant == "base" else "XSA a=1", n=1)
            for k in ("val_bpb", "core", "chatcore"):
                row[k], row[f"{k}_ci95"] = nums.get(k), "n/a"
                row[f"{k}_rel"] = rel(arms["base"].get(k), nums.get(k)) if variant == "xsa1" else None
            rows.append(row)
    return rows


def effects_table(runs, pairs, contrast: bool = False) -> list[dict]:
    """XSA minus baseline, paired by seed, for (label, baseline arm, XSA arm) pairs: val bpb and CORE.
    contrast: add a row for the second pair's effect minus the first's (per seed, see `interaction`)."""
    rows = []
    for label, base, xsa in pairs:
        row = dict(comparison=label, baseline=base, xsa=xsa)
        for name in ("val_bpb", "core"):
            d = paired(runs, base, xsa, name)
            row[f"n_{name}"], row[f"d_{name}"], row[f"d_{name}_ci95"] = d["n"], d["mean"], fmt_ci(d)
        rows.append(row)
    if contrast and len(pairs) == 2:
        (l1, *p1), (l2, *p2) = pairs
        row = dict(comparison=f"({l2}) minus ({l1})", baseline="", xsa="")
        for name in ("val_bpb", "core"):
            d = interaction(runs, tuple(p1), tuple(p2), name)
            row[f"n_{name}"], row[f"d_{name}"], row[f"d_{name}_ci95"] = d["n"], d["mean"], fmt_ci(d)
        rows.append(row)
    return rows


def core_tasks_table(runs, arms) -> list[dict]:
    groups = by_arm(runs)
    labels = sorted({t for r in runs if r["arm"] in arms for t in ((r["eval"] or {}).get("tasks") or {})})
    return [dict(task=t, **{a: mean_ci(metric(r, f"task:{t}") for r in groups.get(a, []))["mean"] for a in arms})
            for t in labels]


DIAG_KEYS = ("cos_y_v", "cos_z_v", "diag_mass", "entropy", "cos_v_v")


def _scalar(x):
    """A per-layer value may be stored per head: average it."""
    if isinstance(x, (list, tuple)):
        xs = [_scalar(v) for v in x]
        xs = [v for v in xs if v is not None]
        return sum(xs) / len(xs) if xs else None
    return x


def diagnostics_table(runs, arms) -> list[dict]:
    rows = []
    for arm, rs in by_arm([r for r in runs if r["arm"] in arms]).items():
        layers = [(r["diagnostics"] or {}).get("layers") or [] for r in rs]
        for i in range(max((len(ls) for ls in layers), default=0)):
            row = dict(arm=arm, layer=i, n=sum(1 for ls in layers if i < len(ls)))
            for k in DIAG_KEYS:
                row[k] = mean_ci(_scalar(ls[i].get(k)) for ls in layers if i < len(ls))["mean"]
            rows.append(row)
    return rows


def overhead(t: dict) -> tuple:
    """XSA's step-time overhead of a throughput record: (ratio, 95% CI, clock). On CPU by process CPU
    time, which the other programs sharing the cores do not bend; on GPU by wall time."""
    if t.get("cpu_time_overhead_ratio") is not None:
        return t["cpu_time_overhead_ratio"], t.get("cpu_time_overhead_ci95") or [None, None], "CPU time"
    return t.get("overhead_ratio"), t.get("overhead_ci95") or [None, None], "wall time"


def throughput_table(tp: dict) -> list[dict]:
    rows = []
    for preset, t in tp.items():
        ratio, ci, clock = overhead(t)  # median(t_xsa) / median(t_base) - 1
        rows.append(dict(preset=preset, baseline_tok_per_s=t.get("baseline_tok_per_s"),
                         xsa_tok_per_s=t.get("xsa_tok_per_s"), overhead=ratio,
                         overhead_ci95=fmt_ci(dict(lo=ci[0], hi=ci[1])), clock=clock,
                         threads=t.get("threads"), device=t.get("device")))
    return rows


def setup_table(study) -> list[dict]:
    """What each preset of the study trains (from the presets and the study, not from prose)."""
    from xsa.config import PRESETS, make_config
    rows = []
    for p in study.presets():
        c = make_config(p)
        m = c.model
        rows.append(dict(preset=p, layers=m.n_layer, width=m.n_embd, heads=m.n_head, seq_len=m.sequence_len,
                         vocab=m.vocab_size, data=PRESETS[p]["data"], batch_tokens=c.total_batch_size,
                         steps=c.num_iterations, tokens=c.num_tokens,
                         runs=sum(1 for r in study.runs if r.preset == p),
                         core_items_per_task=study.evaluate.get("max_per_task") or "all",
                         sft_steps=study.evaluate.get("sft_steps")))
    return rows


def gpu_table(results_dir) -> list[dict]:
    """Our GPU-scale runs (the gpu study: d12 and d24), when their records exist; else no rows."""
    from xsa.studies import get_study
    gpu = get_study("gpu")
    runs = load_runs(results_dir, [r.run_id for r in gpu.runs])
    return [r for r in main_table(runs, gpu.main_presets) if r["source"] == "ours" and r["n"] > 0]


# -----------------------------------------------------------------------------
# Claims: each of the seed paper's claims, judged from our records with n and a 95% CI

def verdict(ci: dict, expect: str, threshold: float = 0.0) -> str:
    """expect 'lower'/'higher' than threshold: supported if the whole CI agrees, contradicted if the whole CI disagrees."""
    if ci["lo"] is None:
        return "cannot decide (fewer than 2 paired seeds)" if ci["n"] < 2 else "cannot decide"
    below, above = ci["hi"] < threshold, ci["lo"] > threshold
    if (expect == "lower" and below) or (expect == "higher" and above):
        return "supported"
    if (expect == "lower" and above) or (expect == "higher" and below):
        return "contradicted"
    return "cannot decide (CI includes no effect)"


def claims(runs, presets, tp: dict | None = None) -> list[dict]:
    small, large = (list(presets) + [None, None])[:2]
    items = [
        ("XSA lowers val bpb at the smaller depth", "d12: 0.8484 -> 0.8457", small, "val_bpb", "lower"),
        ("XSA lowers val bpb at the larger depth", "d24: 0.7193 -> 0.7171", large, "val_bpb", "lower"),
        ("XSA lowers Base CORE at the smaller depth", "d12: 0.1602 -> 0.1508", small, "core", "lower"),
        ("XSA raises Base CORE at the larger depth", "d24: 0.2593 -> 0.2606", large, "core", "higher"),
        ("XSA raises ChatCORE at the larger depth", "d24: 0.3638 -> 0.3682", large, "chatcore", "higher"),
    ]
    rows = []
    for claim, theirs, preset, name, expect in items:
        d = paired(runs, f"{preset}_base", f"{preset}_xsa1", name) if preset else mean_ci([])
        where = f"{preset}: XSA - baseline in {name}" if preset else "no second depth in this study"
        rows.append(dict(claim=claim, theirs=theirs, ours=where,
                         estimate=d["mean"], n=d["n"], ci95=fmt_ci(d), verdict=verdict(d, expect)))
    # mechanism: less attention on the token itself under XSA (diagonal mass, mean over layers)
    for preset in filter(None, (small, large)):
        diag = {}
        for r in runs:
            layers = (r["diagnostics"] or {}).get("layers")
            if r["arm"] in (f"{preset}_base", f"{preset}_xsa1") and layers:
                vals = [_scalar(l.get("diag_mass")) for l in layers]
                diag.setdefault(r["arm"], {})[r["spec"].seed] = sum(vals) / len(vals)
        a, b = diag.get(f"{preset}_base", {}), diag.get(f"{preset}_xsa1", {})
        d = mean_ci([b[s] - a[s] for s in sorted(a.keys() & b.keys())])
        rows.append(dict(claim="XSA lowers the diagonal attention mass", theirs="mechanism (qualitative)",
                         ours=f"{preset}: XSA - baseline in mean a_ii", estimate=d["mean"], n=d["n"],
                         ci95=fmt_ci(d), verdict=verdict(d, "lower")))
    for preset, t in (tp or {}).items():
        ratio, ci, clock = overhead(t)
        d = dict(n=1, mean=ratio, lo=ci[0], hi=ci[1])
        n_pairs = len((t.get("arms") or {}).get("baseline", {}).get("step_times_s") or [])
        rows.append(dict(claim="XSA's runtime overhead is at most about 5%", theirs="first ~5%, then within noise",
                         ours=f"{preset}: step-time overhead by {clock} (A/B in one process)", estimate=d["mean"],
                         n=f"{n_pairs} step pairs" if n_pairs else "A/B",
                         ci95=fmt_ci(d), verdict=verdict(d, "lower", 0.05)))
    return rows


# -----------------------------------------------------------------------------
# Figures: matplotlib + seaborn, deterministic files

def _figure(*, nrows=1, ncols=1, figsize):
    """A figure outside pyplot: no backend, no global state, nothing left open."""
    import matplotlib
    import seaborn as sns
    from matplotlib.figure import Figure
    sns.set_theme(style="whitegrid", context="paper")
    matplotlib.rcParams["svg.hashsalt"] = "xsa"  # fixed SVG ids: identical figures give identical bytes
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _finish(fig, out_dir, name: str):
    """Save as PNG and SVG without dates or software stamps and return the PNG path; or, with no
    out_dir, return the PNG as an image a notebook displays."""
    def render(ext, meta):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=120, bbox_inches="tight", metadata=meta)
        return buf.getvalue()
    png = render("png", {"Software": None})
    if out_dir is None:
        from IPython.display import Image
        return Image(data=png)
    out_dir = Path(out_dir)
    atomic_write_bytes(out_dir / f"{name}.png", png)
    atomic_write_bytes(out_dir / f"{name}.svg", render("svg", {"Date": None, "Creator": None}))
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
    fig, axes = _figure(ncols=len(presets), figsize=(4.5 * len(presets), 3.2))
    for ax, p in zip(axes[0], presets):
        sns.lineplot(data=df[df.preset == p], x="step", y="value", hue="arm", errorbar=("pi", 100), ax=ax)
        ax.set(title=p, xlabel="optimizer step", ylabel=ylabel)
    return _finish(fig, out_dir, name)


def _error_bar(value: float, ci: str) -> list:
    """Matplotlib's [[below], [above]] from a table's CI text; the text is rounded, so clip at 0."""
    lo, hi = parse_ci(ci) or (value, value)
    return [[max(value - lo, 0.0)], [max(hi - value, 0.0)]]


def fig_intervals(rows: list[dict], key: str, label: str, out_dir, name: str):
    """Per-arm means with their 95% t-intervals (the table's numbers, drawn)."""
    rows = [r for r in rows if r.get(key) is not None]
    if not rows:
        return None
    fig, axes = _figure(figsize=(6, 0.35 * len(rows) + 1.2))
    ax = axes[0][0]
    for i, r in enumerate(rows):
        ax.errorbar(r[key], i, xerr=_error_bar(r[key], r[f"{key}_ci95"]), fmt="o", color="C0", capsize=3)
    ax.set_yticks(range(len(rows)), [f"{r['arm']} (n={r['n']})" for r in rows])
    ax.invert_yaxis()
    ax.set(xlabel=f"{label} (mean, 95% CI over seeds)")
    return _finish(fig, out_dir, name)


def fig_core_tasks(rows: list[dict], out_dir, name: str):
    import pandas as pd
    if not rows:
        return None
    import seaborn as sns
    df = pd.DataFrame([dict(task=r["task"], arm=a, centered=v) for r in rows for a, v in r.items()
                       if a != "task" and v is not None])
    if df.empty:
        return None
    fig, axes = _figure(figsize=(6, 0.3 * len(rows) + 1.5))
    ax = axes[0][0]
    sns.barplot(data=df, y="task", x="centered", hue="arm", errorbar=None, ax=ax)
    ax.set(xlabel="centered accuracy (mean over seeds)", ylabel="")
    return _finish(fig, out_dir, name)


def fig_diagnostics(rows: list[dict], out_dir, name: str):
    import pandas as pd
    df = pd.DataFrame(rows)
    if df.empty:
        return None
    import seaborn as sns
    fig, axes = _figure(ncols=len(DIAG_KEYS), figsize=(3.4 * len(DIAG_KEYS), 3))
    for ax, k in zip(axes[0], DIAG_KEYS):
        sns.lineplot(data=df, x="layer", y=k, hue="arm", marker="o", errorbar=None, ax=ax)
        ax.set(title=k, ylabel="")
    return _finish(fig, out_dir, name)


def fig_throughput(rows: list[dict], out_dir, name: str):
    import pandas as pd
    df = pd.DataFrame([dict(preset=r["preset"], arm=a, tok_per_s=r[f"{a}_tok_per_s"])
                       for r in rows for a in ("baseline", "xsa") if r.get(f"{a}_tok_per_s") is not None])
    if df.empty:
        return None
    import seaborn as sns
    fig, axes = _figure(figsize=(5, 3))
    ax = axes[0][0]
    sns.barplot(data=df, x="preset", y="tok_per_s", hue="arm", errorbar=None, ax=ax)
    ax.set(ylabel="training tokens/s")
    return _finish(fig, out_dir, name)


def fig_alpha(rows: list[dict], alphas: list[float], out_dir, name: str):
    """Val bpb change against the baseline (paired by seed, 95% CI) as a function of alpha."""
    pts = [(a, r["d_val_bpb_vs_base"], r["d_ci95"]) for a, r in zip(alphas, rows)
           if r.get("d_val_bpb_vs_base") is not None]
    if not pts:
        return None
    fig, axes = _figure(figsize=(4.5, 3))
    ax = axes[0][0]
    for a, d, ci in pts:
        ax.errorbar([a], [d], yerr=_error_bar(d, ci), fmt="o", color="C0", capsize=3)
    ax.axhline(0, color="gray", lw=0.8)
    ax.set(xlabel="XSA alpha (all layers)", ylabel="val bpb: XSA - baseline")
    return _finish(fig, out_dir, name)


# -----------------------------------------------------------------------------
# Everything for one study

def in_alpha_sweep(spec: Run, preset: str) -> bool:
    """The sweep's arms: at `preset` under Muon, the baseline and XSA on every layer against the
    mixed value, at any alpha."""
    if spec.preset != preset or spec.optimizer != "muon":
        return False
    return spec.alpha == 0 or (spec.xsa_layers == "all" and spec.xsa_value == "mixed")


def build(study, results_dir) -> dict:
    """Write every table and figure of a study's paper; return the tables (rows) and figure paths."""
    results_dir = Path(results_dir)
    runs = load_runs(results_dir, [r.run_id for r in study.runs])
    tp = {p: t for p, t in load_throughput(results_dir).items() if p in study.presets()}
    tables_dir, figures_dir = results_dir / "tables", results_dir / "figures"
    presets = list(study.main_presets)
    main_arms = [f"{p}_{v}" for p in presets for v in ("base", "xsa1")]
    small = presets[0]
    groups = by_arm(runs)
    sweep_arms = sorted((a for a, rs in groups.items() if in_alpha_sweep(rs[0]["spec"], small)),
                        key=lambda a: groups[a][0]["spec"].alpha)
    tables = {
        "setup": setup_table(study),
        "main": main_table(runs, presets),
        "claims": claims(runs, presets, tp),
        "arms": arms_table(runs, baseline=None),
        "alpha_sweep": arms_table(runs, sweep_arms, f"{small}_base"),
        "ablations": arms_table(runs, [a for a in groups if a.startswith(f"{small}_xsa1")], f"{small}_base"),
        "optimizer_control": effects_table(runs, [(f"{small} Muon", f"{small}_base", f"{small}_xsa1"),
                                                  (f"{small} AdamW only", f"{small}_adamw_base", f"{small}_adamw_xsa1")],
                                           contrast=True),
        "effects": effects_table(runs, [(p, f"{p}_base", f"{p}_xsa1") for p in presets]),
        "core_tasks": core_tasks_table(runs, main_arms),
        "diagnostics": diagnostics_table(runs, main_arms),
        "throughput": throughput_table(tp),
        "runs": runs_table(runs),
        "gpu": gpu_table(results_dir) if study.name != "gpu" else [],
    }
    for name, rows in tables.items():
        write_table(rows, tables_dir, name)
    main_runs = [r for r in runs if r["arm"] in main_arms]
    figures = {
        "train_loss": fig_curves(main_runs, "train_loss", "train loss (nats)", figures_dir, "train_loss"),
        "val_bpb_curves": fig_curves(main_runs, "val_bpb", "val bpb", figures_dir, "val_bpb_curves"),
        "val_bpb_arms": fig_intervals(tables["arms"], "val_bpb", "val bpb", figures_dir, "val_bpb_arms"),
        "core_tasks": fig_core_tasks(tables["core_tasks"], figures_dir, "core_tasks"),
        "diagnostics": fig_diagnostics(tables["diagnostics"], figures_dir, "diagnostics"),
        "throughput": fig_throughput(tables["throughput"], figures_dir, "throughput"),
        "alpha_sweep": fig_alpha(tables["alpha_sweep"], [groups[a][0]["spec"].alpha for a in sweep_arms],
                                 figures_dir, "alpha_sweep"),
    }
    return dict(runs=runs, tables=tables, figures=figures, throughput=tp)


def summary_text(study, built: dict) -> str:
    """The paper's statements of fact, each derived from the records (Markdown)."""
    runs, n_eval = built["runs"], sum(1 for r in built["runs"] if r["eval"])
    lines = [f"**Scale.** Every number of ours below is at {study.scale}. The seed paper's numbers are at "
             f"GPU scale (d12 and d24 on ClimbMix) and are labelled *theirs*; the two are not comparable "
             f"in absolute terms, only in the direction of the effect.",
             "",
             f"**Records.** {len(runs)} of the study's {len(study.runs)} runs have records "
             f"({sum(1 for r in runs if r['summary'])} finished training, {n_eval} evaluated, "
             f"{sum(1 for r in runs if r['diagnostics'])} with diagnostics). Intervals are 95% Student-t "
             f"intervals over seeds; differences are paired by seed (both arms of a seed see the same data).",
             "", "**The seed paper's claims, judged from our records:**", ""]
    for c in built["tables"]["claims"]:
        lines.append(f"- {c['claim']} (theirs: {c['theirs']}). Ours, {c['ours']}: {fmt(c['estimate'])} "
                     f"(n={c['n']}, 95% CI {c['ci95']}): **{c['verdict']}**.")
    control = built["tables"].get("optimizer_control") or []
    if len(control) == 3 and control[2]["n_val_bpb"]:
        (muon, adamw, diff) = control
        ci = parse_ci(diff["d_val_bpb_ci95"])
        differs = ci is not None and not ci[0] <= 0 <= ci[1]
        lines += ["", f"**Muon against AdamW.** XSA minus baseline in val bpb: {fmt(muon['d_val_bpb'])} "
                  f"(n={muon['n_val_bpb']}, 95% CI {muon['d_val_bpb_ci95']}) under Muon, {fmt(adamw['d_val_bpb'])} "
                  f"(n={adamw['n_val_bpb']}, 95% CI {adamw['d_val_bpb_ci95']}) with AdamW only; the difference of "
                  f"the two effects, paired by seed, is {fmt(diff['d_val_bpb'])} (n={diff['n_val_bpb']}, 95% CI "
                  f"{diff['d_val_bpb_ci95']}): " + ("**the effect differs between the optimizers**." if differs else
                                                     "**no difference between the optimizers is detectable**.")]
    return "\n".join(lines) + "\n"


def show_table(built: dict, name: str):
    """A table of `build` as Markdown, for display in a notebook."""
    from IPython.display import Markdown
    return Markdown(to_markdown(built["tables"][name]))


def show_figure(built: dict, name: str):
    """A figure of `build` as an embedded PNG (or a note that its records are missing)."""
    from IPython.display import Image, Markdown
    path = built["figures"].get(name)
    return Image(filename=str(path)) if path else Markdown(f"_{name}: no records yet, so no figure._")
