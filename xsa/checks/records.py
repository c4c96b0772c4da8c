"""
Reading run records back: one dict per run folder, the numbers a table asks of a run, and the
per-seed values of an arm that every paired statistic starts from.

A run folder holds config.json, summary.json, eval.json, diagnostics.json, provenance.json and
metrics.jsonl (see xsa/train.py). A record that is missing (evaluation not run yet, say) reads as
None, and the numbers it would give read as None too: tables show `n/a`, never an error.
"""

from __future__ import annotations

from pathlib import Path

from xsa.stack.config import TrainConfig
from xsa.checks.metrics import METRICS, read_plain
from xsa.base.records import check_steps, read_json, read_jsonl
from xsa.stack.spec import Arm, Run

RECORDS = ("config", "summary", "eval", "diagnostics", "provenance")


def _maybe_json(path: Path):
    return read_json(path) if path.exists() else None


def load_run(run_dir) -> dict:
    run_dir = Path(run_dir)
    rec = {name: _maybe_json(run_dir / f"{name}.json") for name in RECORDS}
    metrics = run_dir / "metrics.jsonl"
    rec["metrics"] = check_steps(read_jsonl(metrics), metrics) if metrics.exists() else []
    spec = Run.from_config(TrainConfig.from_dict(rec["config"]))
    rec.update(id=run_dir.name, dir=run_dir, spec=spec, arm=spec.arm.name, preset=spec.preset,
               variant=spec.arm.name[len(spec.preset) + 1:])  # the arm without its preset: base, xsa1, ...
    return rec


def load_runs(results_dir, run_ids=None) -> list[dict]:
    """Run records under results_dir/runs (those in run_ids, if given) that have a config.json."""
    root = Path(results_dir) / "runs"
    dirs = [root / r for r in run_ids] if run_ids is not None else sorted(root.glob("*"))
    return [load_run(d) for d in sorted(dirs) if (d / "config.json").exists()]


def load_throughput(results_dir, presets=None) -> dict:
    """The throughput records by name; with `presets`, those presets' own, eager (<preset>.json) and compiled
    (<preset>_compiled.json), and never another arm's measurement (attn_gate_<preset>_compiled.json)."""
    paths = sorted((Path(results_dir) / "throughput").glob("*.json"))
    return {p.stem: read_json(p) for p in paths if presets is None or p.stem.removesuffix("_compiled") in presets}


def _scalar(x):
    """A per-layer value may be stored per head: average it."""
    if isinstance(x, (list, tuple)):
        xs = [_scalar(v) for v in x]
        xs = [v for v in xs if v is not None]
        return sum(xs) / len(xs) if xs else None
    return x


def metric(run: dict, name: str):
    """One number of a run, or None:
    - val_bpb: final validation bits per byte (of a run that trained to its horizon);
    - core, chatcore: CORE / ChatCORE (CORE only where every task was scored);
    - core_bpb, core_margin_bpb: the CORE likelihood measures (xsa.evaluate.core.likelihoods);
    - task:<label>: centered accuracy of one CORE task; task_bpb:<label>: its bits per byte of the
      correct continuation;
    - diag_mass (and any diagnostics metric as diag:<metric>, or diag:<metric>:<layer>): mean over
      layers (or one layer) of the head-averaged final diagnostics;
    - log:<metric> (e.g. log:diag_mass): the same mean over layers, from the training log's last
      evaluation that recorded diagnostics (every run has it, with or without its weights at hand)."""
    if name == "val_bpb":
        summary = run["summary"] or {}
        return summary.get("val_bpb") if summary.get("complete", True) else None
    if name.startswith("log:"):
        logged = next((m["diag"] for m in reversed(run["metrics"] or []) if m.get("diag")), None)
        vals = [v for v in (logged or {}).get(name[4:], []) if v is not None]
        return sum(vals) / len(vals) if vals else None
    if name == "diag_mass" or name.startswith("diag:"):
        parts = ["diag", "diag_mass"] if name == "diag_mass" else name.split(":")
        layers = (run["diagnostics"] or {}).get("layers")
        if not layers:
            return None
        if len(parts) == 3:
            layers = layers[int(parts[2]):int(parts[2]) + 1]
        vals = [_scalar(layer.get(parts[1])) for layer in layers]
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None
    ev = run["eval"] or {}
    if name.startswith("task:"):
        return (ev.get("tasks", {}).get(name[5:]) or {}).get("centered")
    if name.startswith("task_bpb:"):  # the likelihood of one task's correct continuations
        return (ev.get("tasks", {}).get(name[9:]) or {}).get("correct_bpb")
    if name in ("core", "core_bpb", "core_margin_bpb") and ev.get("core_complete") is False:
        return None  # a mean over fewer tasks is not CORE: never mix it in
    if name in METRICS and METRICS[name].file in ("summary.json", "eval.json"):
        return read_plain(run, name)  # any metric the metric table places in a summary or eval record
    value = ev.get(name)
    return value.get(name) if isinstance(value, dict) else value  # {"chatcore": {"chatcore": x, ...}} too


def curve(run: dict, key: str = "val_bpb") -> dict:
    """{tokens seen: value} of a metric logged during training (metrics.jsonl)."""
    batch = (run["config"] or {}).get("total_batch_size", 1)
    return {m["step"] * batch: m[key] for m in run["metrics"] if m.get(key) is not None}


def complete(run: dict) -> bool:
    """Whether a run trained to its horizon (one in progress has a config but no summary; one
    stopped early with --max-steps says complete: false)."""
    return bool(run["summary"]) and run["summary"].get("complete", True)


def finished(runs) -> int:
    """How many runs trained to their horizon."""
    return sum(1 for r in runs if complete(r))


def by_arm(runs) -> dict:
    out = {}
    for r in runs:
        out.setdefault(r["arm"], []).append(r)
    return out


def per_seed(runs, arm: Arm | str, name: str, seeds=None) -> dict:
    """{seed: metric} of the finished runs of one arm (by Arm or by arm name), optionally only `seeds`."""
    label = arm if isinstance(arm, str) else arm.name
    return {r["spec"].seed: metric(r, name) for r in runs
            if r["arm"] == label and complete(r) and (seeds is None or r["spec"].seed in seeds)}
