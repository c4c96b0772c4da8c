"""
Every column a table of the paper can show, defined once: the header a reader reads, and how its
values are written (a fraction as a signed percentage, a spread or width as an unsigned one, or a
number with fewer digits). DISPLAY says which columns each table shows in the paper; the CSV and
Markdown files under results/tables keep every column under its name.

A new column is one entry of COLUMNS (a metric's own column is its entry in xsa/checks/metrics.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from xsa.checks.metrics import METRICS, main_metrics, relative
from xsa.report.tables import fmt
from xsa.report.writing import pct, pct_interval
from xsa.base.records import DIAGNOSTIC_METRICS
from xsa.base.stats import Interval


@dataclass(frozen=True)
class Column:
    header: str  # what a reader reads above it
    kind: str = ""  # "percent": a fraction shown as a signed percentage; "size": a spread or width (no sign)
    digits: int | None = None  # decimals of a float (integers get thousands separators from 10,000)
    whole: bool = False  # a short label that never breaks across lines (its row stays one line high)


COLUMNS = {
    "preset": Column("preset"),
    "layers": Column("layers"),
    "width": Column("width"),
    "heads": Column("heads"),
    "seq_len": Column("context"),
    "vocab": Column("vocab"),
    "steps": Column("steps"),
    "tokens": Column("tokens"),
    "non_embedding_params": Column("params (non-emb.)"),
    "tokens_per_param": Column("tokens/param", digits=2),
    "tokens_per_scaling_param": Column("tokens/param (nanochat)", digits=1),
    "matrix_lr": Column("matrix LR", digits=3, whole=True),
    "runs": Column("runs"),
    "source": Column("source"),
    "scale": Column("scale"),
    "arm": Column("arm"),
    "n": Column("n"),
    "comparison": Column("comparison"),
    "pilot_n": Column("pilot n"),
    "pilot_rel_sd": Column("pilot SD", "size"),
    "seed_paper_effect_rel": Column("seed paper's effect", "percent"),
    "seeds_for_80pct_power": Column("n for 80% power"),
    "rel_sd": Column("SD, all seeds", "size"),
    "rel_ci_half_width_first8": Column("half-width at n = 8", "size"),
    "rel_ci_half_width": Column("half-width, all seeds", "size"),
    "seeds_for_target": Column("n for target"),
    "claim": Column("claim"),
    "theirs": Column("theirs"),
    "estimate": Column("ours: estimate [95% CI]"),
    "verdict": Column("at CPU scale"),
    "metric": Column("metric"),
    "basis": Column("measured"),
    "their_scale": Column("at their d12/d24"),
    "d": Column("difference"),
    "d_ci95": Column("95% CI"),
    "rel": Column("relative", "percent"),
    "rel_ci95": Column("95% CI", "percent"),
    "layer": Column("layer"),
    "baseline": Column("baseline"),
    "xsa": Column("XSA"),
    "direction": Column("interval"),
    "cos_y_v": Column("cos(y,v)"),
    "cos_z_v": Column("cos(z,v)"),
    "first_mass": Column("a_i0"),
    "entropy": Column("entropy"),
    "cos_v_v": Column("cos(v_i,v_j)"),
    "baseline_tok_per_s": Column("baseline tok/s", digits=0),
    "xsa_tok_per_s": Column("XSA tok/s", digits=0),
    "overhead": Column("overhead", "percent"),
    "overhead_ci95": Column("95% CI", "percent"),
    "clock": Column("clock"),
    "threads": Column("threads"),
    "task": Column("task"),
    "run": Column("run"),
    "wall_min": Column("wall min", digits=1),
    "cpu_min": Column("CPU min", digits=1),
    "config_hash": Column("config"),
    "git_commit": Column("commit"),
    "stage": Column("stage"),
    "cpu_min_per_run": Column("CPU min/run", digits=1),
    "wall_min_per_run": Column("wall min/run", digits=1),
    "cpu_hours": Column("CPU h", digits=1),
    "wall_hours": Column("wall h", digits=1),
    "recipe": Column("recipe"),
    "d_val_bpb_vs_base": Column("difference"),
    "rel_vs_base": Column("relative", "percent"),
    "seed": Column("seed"),
    "condition": Column("condition"),
    "excludes_zero": Column("excl. 0"),
    "excludes_seed_paper": Column("excl. seed paper"),
    "p_holm": Column("Holm p", digits=3),
    "level": Column("level"),
    "declared": Column("declared"),
    "first_record": Column("first record (UTC)"),
    "head": Column("head"),
    "value": Column("learned strength", digits=3),
    "ci": Column("95% CI"),
    "status": Column("records"),
    "grid": Column("grid"),
    "selected": Column("selected"),
    "key": Column("estimate key"),
    "study": Column("study"),
    "cpu_s": Column("train CPU s"),
    "eval_cpu_s": Column("CORE + diag. CPU s"),
    "wall_s": Column("wall s"),
    "contexts": Column("context T"),
    "params": Column("params"),
    "matrix_lrs": Column("matrix LRs run"),
    "xsa_layers": Column("XSA layers"),
    "studies": Column("studies"),
    "core": Column(METRICS["core"].header, digits=4),
    "cell": Column("cell", whole=True),
    "steps_multiple": Column("steps multiple", digits=2),
    "steps_multiple_ci95": Column("95% CI", digits=2),
    "variance_ratio": Column("variance ratio", digits=2),
    "variance_ratio_ci95": Column("95% CI", digits=2),
    "spiky_base": Column("spiky baseline runs"),
    "spiky_xsa": Column("spiky XSA runs"),
    "sd_base": Column("SD baseline", digits=4),
    "sd_xsa": Column("SD XSA", digits=4),
    "extrapolation": Column("model"),
    "at": Column("at", whole=True),
    "fitted_on": Column("fitted on"),
    "optimizer": Column("optimizer"),
    "rate": Column("matrix LR", whole=True),
    "val_bpb_base": Column("val bpb base", digits=4),
    "val_bpb_xsa": Column("val bpb XSA", digits=4),
    "diverged": Column("diverged b / X"),
    "spiky": Column("spiky b / X"),
    "attn_logit_max_end_base": Column("max attn logit base", digits=1),
    "attn_logit_max_end_xsa": Column("max attn logit XSA", digits=1),
    "logit_rms_end_base": Column("logit RMS base", digits=2),
    "logit_rms_end_xsa": Column("logit RMS XSA", digits=2),
}
# the columns each table shows in the paper (the main table's: display)
DISPLAY = {
    "setup": ["preset", "layers", "width", "heads", "contexts", "steps", "tokens", "params", "tokens_per_scaling_param",
              "matrix_lrs", "xsa_layers", "runs", "studies"],
    "power": ["comparison", "pilot_n", "pilot_rel_sd", "seed_paper_effect_rel", "seeds_for_80pct_power", "n", "rel_sd",
              "rel_ci_half_width_first8", "rel_ci_half_width", "seeds_for_target"],
    "claims": ["claim", "theirs", "estimate", "n", "basis", "verdict", "their_scale"],
    "effects": ["comparison", "metric", "n", "d", "d_ci95", "rel", "rel_ci95"],
    "diagnostics_effects": ["comparison", "metric", "layer", "n", "baseline", "xsa", "d", "d_ci95", "direction"],
    "diagnostics": ["arm", "layer", "n", *DIAGNOSTIC_METRICS],
    "throughput": ["preset", "baseline_tok_per_s", "xsa_tok_per_s", "overhead", "overhead_ci95", "clock", "threads"],
    "task_effects": ["comparison", "task", "n", "rel", "rel_ci95"],
    "runs": ["study", "run", "steps", "val_bpb", "cpu_s", "eval_cpu_s", "wall_s"],
    "compute": ["preset", "stage", "runs", "cpu_min_per_run", "wall_min_per_run", "cpu_hours", "wall_hours"],
    "study_compute": ["study", "runs", "cpu_hours", "wall_hours"],
    "gpu": ["scale", "arm", "recipe", "n", "val_bpb", "core"],
    "robustness": ["condition", "preset", "matrix_lr", "tokens_per_param", "n", "rel", "rel_ci95", "excludes_seed_paper",
                   "p_holm", "status"],
    "lr_selection": ["grid", "preset", "matrix_lr", "n", "val_bpb", "selected"],
    "scale": ["level", "n", "declared", "rel", "rel_ci95", "p_holm", "status", "first_record"],
    "scale_gates": ["level", "layer", "head", "n", "value", "ci"],
    "extrapolations": ["extrapolation", "at", "fitted_on", "rel", "rel_ci95"],
    "optimizer_grid": ["preset", "optimizer", "rate", "n", "val_bpb_base", "val_bpb_xsa", "selected", "diverged", "spiky",
                       "attn_logit_max_end_base", "attn_logit_max_end_xsa", "logit_rms_end_base", "logit_rms_end_xsa"],
    "factorial": ["cell", "matrix_lr", "steps", "tokens_per_param", "n", "rel", "rel_ci95", "steps_multiple",
                  "steps_multiple_ci95", "sd_base", "sd_xsa", "variance_ratio", "spiky_base", "spiky_xsa"],
}
# a sweep's or an ablation's table (arms_table): the arms and their paired change in val bpb
DISPLAY_ARMS = ["arm", "n", "val_bpb", "val_bpb_ci95", "d_val_bpb_vs_base", "d_ci95", "rel_vs_base", "rel_ci95"]


def display(name: str) -> list | None:
    """The columns table `name` shows in the paper (None: not listed); the main table's from the metric
    table, read when asked so that a metric added there is a column at once."""
    if name == "main":
        return ["scale", "arm", "n", *(c for k in main_metrics() for c in (k, f"{k}_ci95", *([f"{k}_rel"] if relative(k)
                                                                                              else [])))]
    return DISPLAY.get(name)


def column(name: str) -> Column:
    """Column `name`: its entry in COLUMNS; or a metric's own (headed as the metric table says, with
    the format COLUMNS gives it), its interval (`<metric>_ci95`) and, for a relative metric, its paired
    change against the baseline (`<metric>_rel`); or, for a name nobody defined, the name itself."""
    base, _, suffix = name.rpartition("_")
    if name in METRICS:
        return Column(METRICS[name].header, *((COLUMNS[name].kind, COLUMNS[name].digits) if name in COLUMNS else ()))
    if name in COLUMNS:
        return COLUMNS[name]
    if base in METRICS and suffix == "ci95":
        return Column("95% CI")
    if base in METRICS and suffix == "rel" and relative(base):
        return Column("vs baseline", "percent")
    return Column(name)


def headers(names) -> dict:
    return {name: column(name).header for name in names}


def _percent(value, signed: bool = True):
    if isinstance(value, Interval):
        return "n/a" if not value.defined else pct_interval(value.lo, value.hi)
    return value if not isinstance(value, float) else pct(value, signed)


def cell(col: str, value):
    """A value of column `col` as the paper writes it."""
    c = column(col)
    if value is None:
        return "n/a"
    if c.kind:
        return _percent(value, c.kind == "percent")
    if isinstance(value, bool):
        return ("yes" if value else "no") if col.startswith("excludes") or col == "selected" else str(value)
    if isinstance(value, int) and abs(value) >= 10000:
        return f"{value:,}"
    if isinstance(value, float) and c.digits is not None:
        return f"{value:,.{c.digits}f}"
    if isinstance(value, Interval) and c.digits is not None:
        return "n/a" if not value.defined else f"[{value.lo:,.{c.digits}f}, {value.hi:,.{c.digits}f}]"
    if isinstance(value, str) and col in ("comparison", "metric", "task", "direction"):
        value = value.replace("_", " ")
    if isinstance(value, str) and c.whole:
        return value.replace(" ", "\u00a0")
    if isinstance(value, str) and " " not in value and "-" in value:
        return value.replace("-", "\u2011")  # an identifier (cpu-w64-d4) never breaks at its hyphens
    return fmt(value) if isinstance(value, Interval) else value
