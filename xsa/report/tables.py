"""
Tables: lists of dicts built from run records, and the one writer of tables (CSV and Markdown).

Rows hold numbers (floats, ints, `Interval`s); `fmt` turns them into text only when a table is
written or shown, with fixed formats, so the same records give the same bytes.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from xsa.records import atomic_write_text
from xsa.report.records import by_arm, finished, metric, per_seed
from xsa.report.stats import Interval, contrast, differences, mean_ci, paired, relative

# The seed paper's numbers (GPU scale, one run per arm), shown beside ours as theirs.
SEED_PAPER = {
    "d12": {"base": dict(val_bpb=0.8484, core=0.1602), "xsa1": dict(val_bpb=0.8457, core=0.1508)},
    "d24": {"base": dict(val_bpb=0.7193, core=0.2593, chatcore=0.3638),
            "xsa1": dict(val_bpb=0.7171, core=0.2606, chatcore=0.3682)},
}
RUN_METRICS = ("val_bpb", "core", "chatcore")


# -----------------------------------------------------------------------------
# Text

def fmt(x, digits: int = 4) -> str:
    """A cell as text: floats at `digits` places, intervals at 4, missing values as n/a."""
    if isinstance(x, Interval):
        return x.text()
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def to_markdown(rows: list[dict]) -> str:
    if not rows:
        return "_no records_\n"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_table(rows: list[dict], out_dir, name: str) -> tuple[Path, Path]:
    """rows -> OUT_DIR/NAME.csv (6 digits) and NAME.md (4 digits), atomically."""
    out_dir = Path(out_dir)
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows({k: fmt(v, 6) for k, v in r.items()} for r in rows)
    csv_path, md_path = out_dir / f"{name}.csv", out_dir / f"{name}.md"
    atomic_write_text(csv_path, buf.getvalue())
    atomic_write_text(md_path, to_markdown(rows))
    return csv_path, md_path


# -----------------------------------------------------------------------------
# Builders

def runs_table(runs) -> list[dict]:
    rows = []
    for r in runs:
        s, prov, c = r["summary"] or {}, r["provenance"] or {}, r["config"]
        rows.append(dict(run=r["id"], preset=r["preset"], optimizer=c["optimizer"],
                         alpha=c["model"]["xsa_alpha"], layers=c["model"]["xsa_layers"],
                         value=c["model"]["xsa_value"], seed=r["spec"].seed, steps=s.get("steps"),
                         val_bpb=metric(r, "val_bpb"), core=metric(r, "core"), chatcore=metric(r, "chatcore"),
                         tok_per_s=s.get("tok_per_s"), config_hash=prov.get("config_hash"),
                         git_commit=(prov.get("git_commit") or "n/a")[:10]))
    return rows


def arms_table(runs, arms=None, baseline=None) -> list[dict]:
    """One row per arm (names; default every arm): n, mean and 95% CI of val bpb, CORE, ChatCORE;
    the paired change of val bpb against `baseline` (an arm name) where given."""
    groups = by_arm(runs)
    rows = []
    for arm in arms or list(groups):
        rs = groups.get(arm, [])
        row = dict(arm=arm, n=finished(rs))
        for name in RUN_METRICS:
            s = mean_ci(metric(r, name) for r in rs)
            row[name], row[f"{name}_ci95"] = s["mean"], s["ci"]
        if baseline:
            d = paired(per_seed(runs, baseline, "val_bpb"), per_seed(runs, arm, "val_bpb"))
            row["d_val_bpb_vs_base"], row["d_ci95"] = d["mean"], d["ci"]
        rows.append(row)
    return rows


def main_table(runs, pairs) -> list[dict]:
    """Depth x {baseline, XSA}: ours (n seeds, 95% CI) and the seed paper's (theirs, GPU scale)."""
    groups, rows = by_arm(runs), []
    for pair in pairs:
        base = {k: mean_ci(metric(r, k) for r in groups.get(pair.a.name, [])) for k in RUN_METRICS}
        for arm, label in ((pair.a, "baseline"), (pair.b, "XSA a=1")):
            rs = groups.get(arm.name, [])
            row = dict(source="ours", scale=pair.name, arm=label, n=finished(rs))
            for k in RUN_METRICS:
                s = mean_ci(metric(r, k) for r in rs)
                row[k], row[f"{k}_ci95"] = s["mean"], s["ci"]
                row[f"{k}_rel"] = relative(base[k]["mean"], s["mean"]) if arm is pair.b else None
            rows.append(row)
    for depth, arms in SEED_PAPER.items():
        for variant, nums in arms.items():
            row = dict(source="theirs (Zhai 2026)", scale=f"{depth} (GPU)",
                       arm="baseline" if variant == "base" else "XSA a=1", n=1)
            for k in RUN_METRICS:
                row[k], row[f"{k}_ci95"] = nums.get(k), Interval(None, None)
                row[f"{k}_rel"] = relative(arms["base"].get(k), nums.get(k)) if variant == "xsa1" else None
            rows.append(row)
    return rows


def effects_table(runs, pairs, contrasted=None, metrics=("val_bpb", "core")) -> list[dict]:
    """b minus a, paired by seed, for each Paired; with `contrasted` (a Contrast) a last row for its
    second effect minus its first, per seed."""
    rows = []
    for p in pairs:
        row = dict(comparison=p.name, baseline=p.a.name, xsa=p.b.name)
        for name in metrics:
            d = paired(per_seed(runs, p.a, name), per_seed(runs, p.b, name))
            row[f"n_{name}"], row[f"d_{name}"], row[f"d_{name}_ci95"] = d["n"], d["mean"], d["ci"]
        rows.append(row)
    if contrasted is not None:
        c = contrasted
        row = dict(comparison=f"({c.second.name}) minus ({c.first.name})", baseline="", xsa="")
        for name in metrics:
            d = contrast_stats(runs, c, name)
            row[f"n_{name}"], row[f"d_{name}"], row[f"d_{name}_ci95"] = d["n"], d["mean"], d["ci"]
        rows.append(row)
    return rows


def pair_differences(runs, pair, name: str) -> dict:
    """{seed: b - a} of a Paired comparison."""
    return differences(per_seed(runs, pair.a, name), per_seed(runs, pair.b, name))


def contrast_stats(runs, c, name: str) -> dict:
    return contrast(pair_differences(runs, c.first, name), pair_differences(runs, c.second, name))


def core_tasks_table(runs, arms) -> list[dict]:
    groups = by_arm(runs)
    labels = sorted({t for r in runs if r["arm"] in arms for t in ((r["eval"] or {}).get("tasks") or {})})
    return [dict(task=t, **{a: mean_ci(metric(r, f"task:{t}") for r in groups.get(a, []))["mean"] for a in arms})
            for t in labels]


DIAG_KEYS = ("cos_y_v", "cos_z_v", "diag_mass", "entropy", "cos_v_v")


def diagnostics_table(runs, arms) -> list[dict]:
    from xsa.report.records import _scalar
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
    """XSA's step-time overhead of a throughput record: (ratio, Interval, clock). On CPU by process
    CPU time, which the other programs sharing the cores do not bend; on GPU by wall time."""
    if t.get("cpu_time_overhead_ratio") is not None:
        lo, hi = t.get("cpu_time_overhead_ci95") or [None, None]
        return t["cpu_time_overhead_ratio"], Interval(lo, hi), "CPU time"
    lo, hi = t.get("overhead_ci95") or [None, None]
    return t.get("overhead_ratio"), Interval(lo, hi), "wall time"


def throughput_table(tp: dict) -> list[dict]:
    rows = []
    for preset, t in tp.items():
        ratio, ci, clock = overhead(t)  # median(t_xsa) / median(t_base) - 1
        rows.append(dict(preset=preset, baseline_tok_per_s=t.get("baseline_tok_per_s"),
                         xsa_tok_per_s=t.get("xsa_tok_per_s"), overhead=ratio, overhead_ci95=ci, clock=clock,
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
    from xsa.report.records import load_runs
    from xsa.studies import get_study
    gpu = get_study("gpu")
    runs = load_runs(results_dir, [r.run_id for r in gpu.runs])
    return [r for r in main_table(runs, gpu.main) if r["source"] == "ours" and r["n"] > 0]
