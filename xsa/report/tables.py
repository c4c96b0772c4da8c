"""
Tables: lists of dicts built from run records and the estimates, and the one writer of tables (CSV
and Markdown). An effect in a table is an estimate (xsa/books/effects.py computes them); a table
itself computes none, only arms' means and counts.

Rows hold numbers (floats, ints, `Interval`s); `fmt` turns them into text only when a table is
written or shown, with fixed formats, so the same records give the same bytes.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from xsa.stack.config import scaling_params
from xsa.stack.presets import PRESETS, make_config
from xsa.base.records import atomic_write_text
from xsa.checks.metrics import effect_metrics, main_metrics, relative
from xsa.books.declared import overhead
from xsa.books.effects import DIAG_KEYS, contrast_name, key
from xsa.checks.records import _scalar, by_arm, complete, metric, per_seed
from xsa.books.verdicts import seed_paper_change, side
from xsa.studies.registry import SEED_PAPER
from xsa.base.stats import Interval, mean_ci, seeds_for_half_width, seeds_needed

# the metric table's metrics (xsa/checks/metrics.py) each table shows as columns: an arm's mean and
# 95% CI, and in the main table, for a relative metric, the paired change against the baseline
RUN_METRICS = ("val_bpb", "core", "chatcore")
SWEEP_LABELS = {"xsa_alpha": "XSA alpha (all layers)", "matrix_lr": "matrix (Muon) learning rate"}


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


def cell(x, digits: int = 4) -> str:
    """A Markdown table cell: `fmt`, with the characters that would end or break a cell escaped."""
    return fmt(x, digits).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(rows: list[dict], headers: dict | None = None, align: dict | None = None) -> str:
    """rows as a Markdown table; `headers` maps a column to the text of its header, `align` a
    column to 'l' or 'r' (default: numbers right, text left)."""
    if not rows:
        return "_no records_\n"
    cols = list(rows[0])
    headers, align = headers or {}, align or {}

    def side(c):
        if c in align:
            return align[c]
        numeric = all(isinstance(r[c], (int, float)) or r[c] is None for r in rows)
        return "r" if numeric else "l"
    rule = {"l": "---", "r": "--:"}
    lines = ["| " + " | ".join(cell(headers.get(c, c)) for c in cols) + " |",
             "|" + "|".join(rule[side(c)] for c in cols) + "|"]
    lines += ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows]
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

def every_run_table(groups) -> list[dict]:
    """Every run of every study with its cost: groups is [(study, [run dicts])] (run dicts of
    records.load_run, or the archive's {"id", "summary"} dicts). CPU seconds of training, and of CORE and
    diagnostics together, from the records; a record that predates CPU time says so."""
    def cpu(rec):
        return (rec or {}).get("cpu_time_s")

    rows = []
    for study, runs in groups:
        for r in runs:
            s = r.get("summary") or {}
            scored = [cpu(((r.get("eval") or {}).get("core_detail") or {}).get("provenance")),
                      cpu((r.get("diagnostics") or {}).get("provenance"))]
            train = cpu(s)
            rows.append(dict(study=study, run=r["id"], steps=s.get("steps"), val_bpb=s.get("val_bpb"),
                             cpu_s=round(train) if train is not None else "not recorded",
                             eval_cpu_s=round(sum(x for x in scored if x is not None)) if any(
                                 x is not None for x in scored) else None,
                             wall_s=round(s["wall_time_s"]) if s.get("wall_time_s") else None))
    return rows


def compute_table(runs) -> list[dict]:
    """What the study has cost so far, per preset, from the records: training (trained runs), CORE
    and diagnostics (the runs scored), each as minutes per run and CPU hours in all. CPU time is
    the process's; wall time is what the run took with whatever else shared the machine."""
    def minutes(values):
        values = [v / 60 for v in values if v is not None]
        return (sum(values) / len(values), min(values), max(values), sum(values)) if values else (None,) * 4

    rows = []
    for preset in dict.fromkeys(r["preset"] for r in runs):
        rs = [r for r in runs if r["preset"] == preset and complete(r)]
        core = [((r["eval"] or {}).get("core_detail") or {}).get("provenance") or {} for r in rs]
        diag = [(r["diagnostics"] or {}).get("provenance") or {} for r in rs]
        for stage, recs in (("train", [r["summary"] for r in rs]), ("CORE", core), ("diagnostics", diag)):
            cpu = minutes(x.get("cpu_time_s") for x in recs)
            wall = minutes(x.get("wall_time_s") for x in recs)
            n = sum(1 for x in recs if x.get("wall_time_s") is not None)
            if n:
                rows.append(dict(preset=preset, stage=stage, runs=n, cpu_min_per_run=cpu[0],
                                 cpu_min_fastest=cpu[1], cpu_min_slowest=cpu[2], wall_min_per_run=wall[0],
                                 cpu_hours=cpu[3] / 60 if cpu[3] is not None else None,
                                 wall_hours=wall[3] / 60))
    return rows


def arms_table(runs, arms=None, seeds=None, effects=None) -> list[dict]:
    """One row per arm (names; default every arm): n, mean and 95% CI of val bpb, CORE, ChatCORE; with
    `effects` ({arm: (absolute, relative) estimates of its paired change in val bpb against the
    comparison's base}) that change beside them. With `seeds`, only those seeds count (a sweep is
    reported on the seeds all its arms have)."""
    groups = by_arm(runs)
    rows = []
    for arm in arms or list(groups):
        rs = [r for r in groups.get(arm, []) if complete(r) and (seeds is None or r["spec"].seed in seeds)]
        row = dict(arm=arm, n=len(rs))
        for name in RUN_METRICS:
            st = mean_ci(metric(r, name) for r in rs)
            row[name], row[f"{name}_ci95"] = st["mean"], st["ci"]
        if effects is not None:
            d, rel = effects[arm]
            row.update(d_val_bpb_vs_base=d.value, d_ci95=d.ci, rel_vs_base=rel.value, rel_ci95=rel.ci)
        rows.append(row)
    return rows


def _effect_row(label: str, a: str, b: str, name: str, est: dict) -> dict:
    """A row of the effects table from the estimates of comparison `label`'s effect on metric `name`."""
    relative_ok = relative(name)
    d = est[key(label, name, absolute=relative_ok)]
    rel = est[key(label, name)] if relative_ok else None
    return dict(comparison=label, metric=name, a=a, b=b, n=d.n, d=d.value, d_ci95=d.ci,
                rel=rel.value if rel else None, rel_ci95=rel.ci if rel else Interval(None, None))


def main_table(runs, pairs, est) -> list[dict]:
    """Depth x {baseline, XSA}: ours (n seeds, mean and 95% CI; the XSA row's relative change is
    the mean of the per-seed paired changes, from the estimates) and the seed paper's (theirs, GPU
    scale, one run)."""
    groups, rows = by_arm(runs), []
    for pair in pairs:
        for arm, label in ((pair.a, "baseline"), (pair.b, "XSA a=1")):
            rs = [r for r in groups.get(arm.name, []) if complete(r)]
            row = dict(source="ours", scale=pair.name, arm=label, n=len(rs))
            for k in main_metrics():  # the metric table says which, in which order
                st = mean_ci(metric(r, k) for r in rs)
                row[k], row[f"{k}_ci95"] = st["mean"], st["ci"]
                if relative(k):  # not CORE: near chance its relative change means nothing (see effects)
                    e = est.get(key(pair.name, k))
                    row[f"{k}_rel"] = e.value if arm is pair.b and e is not None else None
            rows.append(row)
    for depth, arms in SEED_PAPER.items():
        for variant, nums in arms.items():
            row = dict(source="theirs (seed paper)", scale=f"{depth} (GPU, theirs)",
                       arm="baseline" if variant == "base" else "XSA a=1", n=1)
            for k in main_metrics():  # the metric table says which, in which order
                row[k], row[f"{k}_ci95"] = nums.get(k), Interval(None, None)
                if relative(k):
                    row[f"{k}_rel"] = seed_paper_change(depth, k) if variant == "xsa1" else None
            rows.append(row)
    return rows


def effects_table(est, pairs, contrasted=None, metrics=None, scored=None) -> list[dict]:
    """One row per (comparison, metric): b minus a, paired by seed, absolute and relative; with
    `contrasted` (Contrasts) their second effect minus their first, per seed; from the estimates.
    `scored(arm)` says whether the study runs CORE on an arm: a comparison with an unscored arm gets
    no CORE rows (an empty row would read as "no paired seeds yet" where none are planned)."""
    metrics = metrics or effect_metrics()

    def measured(arms):
        return [m for m in metrics if not m.startswith("core") or scored is None or all(map(scored, arms))]
    rows = [_effect_row(p.name, p.a.name, p.b.name, name, est)
            for p in pairs for name in measured(p.arms())]
    for c in contrasted or ():
        rows += [_effect_row(contrast_name(c), c.first.name, c.second.name, name, est)
                 for name in measured([*c.first.arms(), *c.second.arms()])]
    return rows


def power_table(est, pairs, pilot_seeds, claims=(), half_width_target=None) -> list[dict]:
    """The sizing of the study: per main comparison, the paired SD of the final val bpb over the
    pilot seeds, the seeds that give 80% power to exclude zero at the seed paper's effect, what
    the finished study achieved (n, CI half-width), and the seeds its spread over all seeds says a
    relative half-width of `half_width_target` would take; from the estimates."""
    effects = {c.comparison: c.seed_effect for c in claims if c.metric == "val_bpb" and c.seed_effect is not None}
    half = lambda e: (e.hi - e.lo) / 2 if e.ci.defined else None
    rows = []
    for p in pairs:
        pilot, pilot_abs = est[key(p.name, on="pilot")], est[key(p.name, absolute=True, on="pilot")]
        first8 = est[key(p.name, on="first8")]  # where the precision rule looks
        full, full_abs = est[key(p.name)], est[key(p.name, absolute=True)]
        seed_rel = effects.get(p.name)
        needed = (seeds_needed(pilot.sd, seed_rel) if seed_rel is not None and pilot.sd else None)
        rows.append(dict(comparison=p.name, pilot_n=pilot_abs.n, pilot_sd=pilot_abs.sd, pilot_rel_sd=pilot.sd,
                         seed_paper_effect_rel=seed_rel, seeds_for_80pct_power=needed, n=full_abs.n,
                         sd=full_abs.sd, rel_sd=full.sd, rel_ci_half_width=half(full),
                         rel_ci_half_width_first8=half(first8) if first8.n == 8 else None,
                         ci_half_width=half(full_abs),
                         seeds_for_target=seeds_for_half_width(full.sd, half_width_target)
                         if half_width_target and full.sd else None))
    return rows


def diagnostics_effects_table(runs, pairs, keys, est) -> list[dict]:
    """Per comparison, layer and diagnostics metric: baseline mean, XSA mean, XSA minus baseline
    paired by seed with its 95% CI (from the estimates)."""
    rows = []
    for p in pairs:
        layers = max((len((r["diagnostics"] or {}).get("layers") or []) for r in runs if r["arm"] == p.a.name), default=0)
        for k in keys:
            for i in range(layers):
                name = f"diag:{k}:{i}"
                d = est[key(p.name, name)]
                rows.append(dict(comparison=p.name, metric=k, layer=i, n=d.n,
                                 baseline=mean_ci(per_seed(runs, p.a, name).values())["mean"],
                                 xsa=mean_ci(per_seed(runs, p.b, name).values())["mean"], d=d.value, d_ci95=d.ci,
                                 direction=side(d)))
    return rows


def core_tasks_table(runs, arms) -> list[dict]:
    groups = by_arm([r for r in runs if complete(r)])
    labels = sorted({t for r in runs if r["arm"] in arms for t in ((r["eval"] or {}).get("tasks") or {})})
    return [dict(task=t, **{a: mean_ci(metric(r, f"task:{t}") for r in groups.get(a, []))["mean"] for a in arms})
            for t in labels]


def task_effects_table(runs, pairs, est) -> list[dict]:
    """Per main comparison and CORE task: XSA minus baseline in the bits per byte of the task's
    correct continuations, paired by seed, absolute and relative (from the estimates)."""
    rows = []
    for p in pairs:
        tasks = sorted({t for r in runs if r["arm"] in (p.a.name, p.b.name) for t in ((r["eval"] or {}).get("tasks") or {})})
        for t in tasks:
            rel, d = est[key(p.name, f"task_bpb:{t}")], est[key(p.name, f"task_bpb:{t}", absolute=True)]
            if d.n:
                rows.append(dict(comparison=p.name, task=t, n=d.n, d=d.value, d_ci95=d.ci, rel=rel.value,
                                 rel_ci95=rel.ci))
    return rows


def diagnostics_table(runs, arms) -> list[dict]:
    rows = []
    for arm, rs in by_arm([r for r in runs if r["arm"] in arms and complete(r)]).items():
        layers = [(r["diagnostics"] or {}).get("layers") or [] for r in rs]
        for i in range(max((len(ls) for ls in layers), default=0)):
            row = dict(arm=arm, layer=i, n=sum(1 for ls in layers if i < len(ls)))
            for k in DIAG_KEYS:
                row[k] = mean_ci(_scalar(ls[i].get(k)) for ls in layers if i < len(ls))["mean"]
            rows.append(row)
    return rows


def throughput_table(tp: dict) -> list[dict]:
    rows = []
    for preset, t in tp.items():
        ratio, ci, clock = overhead(t)  # median(t_xsa) / median(t_base) - 1
        rows.append(dict(preset=preset, baseline_tok_per_s=t.get("baseline_tok_per_s"),
                         xsa_tok_per_s=t.get("xsa_tok_per_s"), overhead=ratio, overhead_ci95=ci, clock=clock,
                         threads=t.get("threads"), device=t.get("device")))
    return rows


def lr_range(lrs) -> str:
    """The matrix LRs run on a preset: '0.02' or '0.01-0.16 (5)' (lowest-highest, how many)."""
    lrs = sorted(set(lrs))
    return f"{lrs[0]:g}" if len(lrs) == 1 else f"{lrs[0]:g}-{lrs[-1]:g} ({len(lrs)})"


def setup_table(*studies) -> list[dict]:
    """What each preset of the studies trains (from the presets and the studies' runs, not from prose):
    its shape, its horizon, and every condition run on it (context lengths, matrix LRs, where XSA is)."""
    runs = [r for s in studies for r in s.runs]
    rows = []
    for p in sorted({r.preset for r in runs}, key=list(PRESETS).index):
        c = make_config(p)
        m = c.model
        blocks = scaling_params(m) - m.n_embd * m.vocab_size  # the block matrices (non-embedding)
        mine = [r for r in runs if r.preset == p]
        cfgs = [r.config() for r in mine]
        span = lambda xs: ", ".join(f"{x:g}" for x in sorted(set(xs)))
        rows.append(dict(preset=p, recipe=c.recipe, layers=m.n_layer, width=m.n_embd, heads=m.n_head,
                         seq_len=m.sequence_len, contexts=span(x.model.sequence_len for x in cfgs), vocab=m.vocab_size,
                         data=PRESETS[p]["data"], batch_tokens=c.total_batch_size, steps=c.num_iterations,
                         tokens=c.num_tokens, non_embedding_params=blocks, params=scaling_params(m),
                         tokens_per_param=c.num_tokens / blocks,
                         # nanochat's unit: per block-matrix-and-lm-head parameter (its 10-12 at d12)
                         tokens_per_scaling_param=c.num_tokens / scaling_params(m), matrix_lr=c.matrix_lr,
                         matrix_lrs=lr_range(x.matrix_lr for x in cfgs),
                         xsa_layers=", ".join(sorted({x.model.xsa_layers for x in cfgs if x.model.xsa_alpha} or {"none"}))
                         .replace("last:2", "last 2"),
                         runs=len(mine), studies=", ".join(s.name for s in studies if any(r.preset == p for r in s.runs)),
                         core_items_per_task=studies[0].evaluate.get("max_per_task") or "all"))
    return rows


def gpu_table(runs, study, est) -> list[dict]:
    """Our GPU-scale runs (the gpu study), when their records exist, with the recipe each used; else
    no rows. `est`: the gpu study's shown effects (xsa/books/effects.py)."""
    recipes = {p.name: p.a.config().recipe for p in study.main}
    return [{**r, "recipe": recipes[r["scale"]]} for r in main_table(runs, study.main, est)
            if r["source"] == "ours" and r["n"] > 0]


def optimizer_grid_table(ours: dict) -> list[dict]:
    """The optimizer study's grids as its analysis reads them (xsa/studies/optimizer_analysis.py: estimates),
    one row per width, optimizer and rate, both arms side by side: the mean over the selection seeds of each
    run's min(final, initial) val bpb, which arm selected the rate, the diverged and spiky runs (baseline /
    XSA), and the largest pre-softmax attention logit and output-logit RMS over the runs and layers, at the
    runs' ends and at their largest spikes (descriptive; the registration's endpoint 5)."""
    rows = {}
    for name, grid in ours["grids"].items():
        preset, opt, arm = name.split("/")
        chosen = ours["selections"][name]["selected"]
        for g in grid:
            row = rows.setdefault((preset, opt, g["lr"]), dict(preset=preset, optimizer=opt, lr=g["lr"], rate=f"{g['lr']:g}",
                                                               n=g["n"]))
            row["n"] = min(row["n"], g["n"])
            row[f"val_bpb_{arm}"] = g["mean"]
            row["selected"] = " and ".join(filter(None, (row.get("selected"), arm.replace("xsa", "XSA")
                                                         if chosen == g["lr"] else "")))
            for k in ("diverged", "spiky", "not_logged", "attn_logit_max_end", "attn_logit_max_at_spike",
                      "logit_rms_end", "logit_rms_at_spike"):
                row[f"{k}_{arm}"] = g[k]
    for row in rows.values():
        for k in ("diverged", "spiky"):
            row[k] = f"{row.get(f'{k}_base', '-')} / {row.get(f'{k}_xsa', '-')}"
    order = list(dict.fromkeys(k[:2] for k in rows))  # the analysis's order of widths and optimizers
    return [rows[k] for k in sorted(rows, key=lambda k: (order.index(k[:2]), k[2]))]
