"""
One run's records, checked whole: what the paper stage asks of every declared run of every registered
study (xsa/checks/integrity.py iterates them).

- the folder is there, with config.json, summary.json and metrics.jsonl, and was trained with the
  config the study asks for (config.json read by value: its seed, learning rate and arm among the
  fields), with a summary of that config (its hash) and of that seed;
- summary.json says complete, trained to the horizon (steps == num_iterations), with a finite val bpb;
- metrics.jsonl is whole (no torn last line), its steps strictly increase (no duplicates, no two runs
  mixed in one file), every number in it is finite, and its last line is the evaluation at the
  horizon, the val bpb the summary reports;
- metrics.jsonl holds the evaluation of every scheduled step (0, every eval_every, the horizon): a
  log with evaluations removed would average a curve over fewer seeds under the old n;
- provenance.json is there and of this config;
- config.json, every line of metrics.jsonl, summary.json, provenance.json, eval.json and
  diagnostics.json each match the schema of their kind (xsa/checks/schemas.py: a negative or 300-digit
  val bpb, a negative learning rate, a negative loss, an accuracy above 1, a cosine outside [-1, 1]),
  each problem naming its field (and for metrics.jsonl its line);
- a run the study scores has a complete CORE record (eval.json: all tasks, a finite CORE);
- diagnostics.json, where the study runs that stage, has its per-layer values;
- eval.json and diagnostics.json are bound to the run: the run id they record (where they do), the
  config hash of the run and the trained weights' sha256 (records written before it was recorded
  carry none), and every number in them is finite (a record copied from another folder fails).

Every problem names the file, so the run: results/runs/<run id>/<file>: <what is wrong>.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from xsa.stack.config import RECORD_EXTRAS, ConfigError, TrainConfig, dict_hash
from xsa.runs.diverged import FILENAME as DIVERGED
from xsa.base.records import read_json
from xsa.checks import schemas


def is_finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def non_finite(value, where: str = "") -> str | None:
    """The first key (dotted path) holding a NaN or infinite number, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "value"
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return None
    for k, v in items:
        if (bad := non_finite(v, f"{where}.{k}" if where else str(k))) is not None:
            return bad
    return None


def read_object(path: Path, problems: list, kind=dict):
    if not path.exists():
        problems.append(f"{path}: missing")
        return None
    try:
        value = read_json(path)
    except ValueError as e:  # read_json names the file
        problems.append(str(e))
        return None
    if not isinstance(value, kind) or not value:
        problems.append(f"{path}: empty or not a JSON {kind.__name__}")
        return None
    return value


def metrics_problems(path: Path) -> tuple[list[dict], list[str]]:
    """(records, problems) of a metrics.jsonl read strictly: a torn or corrupt line, a step that
    does not increase, a non-finite number, a value its schema refuses (a negative loss, a string
    bpb) are each a problem naming the line; an empty file is one problem."""
    problems, records, last = [], [], None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return [], [f"{path}: not UTF-8 text"]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        problems.append(f"{path}:{len(lines)}: torn last line (no newline: a killed writer)")
    if not lines:
        problems.append(f"{path}: empty (no line: not even the evaluation at step 0)")
    for i, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            problems.append(f"{path}:{i}: corrupt JSON line")
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
            problems.append(f"{path}:{i}: not a record with an integer step")
            continue
        if last is not None and rec["step"] <= last:
            what = "repeats" if rec["step"] == last else "goes back to"
            problems.append(f"{path}:{i}: step {rec['step']} {what} step {last} (steps must strictly increase: "
                            "two runs in one folder, or a doubled file)")
        if (bad := non_finite(rec)) is not None:
            problems.append(f"{path}:{i}: {bad} is not finite")
        problems += schemas.problems("metrics", rec, f"{path}:{i}")
        last = rec["step"] if last is None else max(last, rec["step"])
        records.append(rec)
    return records, problems


def _schedule_problems(path: Path, records: list[dict], cfg) -> list[str]:
    """The scheduled evaluations (step 0, every eval_every, the horizon) the log lacks."""
    every = getattr(cfg, "eval_every", 0) or cfg.num_iterations
    due = {0, cfg.num_iterations, *range(0, cfg.num_iterations + 1, every)}
    logged = {r["step"] for r in records if is_finite(r.get("val_bpb"))}
    missing = sorted(due - logged)
    if not missing:
        return []
    shown = ", ".join(map(str, missing[:6])) + (", ..." if len(missing) > 6 else "")
    return [f"{path}: no evaluation at step{'s' if len(missing) > 1 else ''} {shown} (val bpb is logged at "
            f"step 0, every {every} steps and at {cfg.num_iterations}: lines removed)"]


def bound_problems(path: Path, run_id: str, rec: dict, recorded_run, prov, weights, hashes, trained) -> list[str]:
    """Whether a record another stage wrote (eval.json, diagnostics.json) is of this run: the run id
    it records (if any), its config hash (one of `hashes`: the summary's or today's config's), the
    weights' sha256 (if recorded) against the summary's; and every number in it finite."""
    out = []
    if recorded_run is not None and recorded_run != run_id:
        out.append(f"{path}: the record of run {recorded_run!r}, not of {run_id} (copied from another folder)")
    got = (prov or {}).get("config_hash") if isinstance(prov, dict) else None
    if got not in hashes:
        out.append(f"{path}: config hash {got!r}, the run's is {sorted(h for h in hashes if h)[0]!r} "
                   "(the record of another run)")
    if weights is not None and trained is not None and weights != trained:
        out.append(f"{path}: scored weights with sha256 {str(weights)[:16]}..., the run trained "
                   f"{str(trained)[:16]}... (summary.json)")
    if (bad := non_finite(rec)) is not None:
        out.append(f"{path}: {bad} is not finite")
    return out


def _bindings(run, run_dir: Path, summary, config, problems: list, scored: bool, diagnostics: bool) -> None:
    """The checks of eval.json, diagnostics.json and provenance.json against the run."""
    hashes = {run.config().config_hash(), (summary or {}).get("config_hash")}
    if config is not None:
        hashes.add(dict_hash({k: v for k, v in config.items() if k not in RECORD_EXTRAS}))
    hashes.discard(None)
    trained = (summary or {}).get("final_weights_sha256")
    prov = read_object(run_dir / "provenance.json", problems)
    if prov is not None:
        problems += schemas.problems("provenance", prov, run_dir / "provenance.json")
        if prov.get("config_hash") not in hashes:
            problems.append(f"{run_dir / 'provenance.json'}: config hash {prov.get('config_hash')!r} is not the run's")
    e = run_dir / "eval.json"
    if scored or e.exists():
        ev = read_object(e, problems)
        if ev is not None:
            for key in ("core_detail", "chat_detail"):
                detail = ev.get(key)
                if key in ev and not isinstance(detail, dict):
                    problems.append(f"{e}: {key} is not an object")
                elif detail is not None:
                    problems += bound_problems(e, run.run_id, {}, detail.get("run"), detail.get("provenance"),
                                               detail.get("weights_sha256"), hashes, trained)
            if (bad := non_finite(ev)) is not None:
                problems.append(f"{e}: {bad} is not finite")
            problems += schemas.problems("eval", ev, e)
            if scored:
                problems += _core_problems(e, ev)
    d = run_dir / "diagnostics.json"
    if not diagnostics and not d.exists():
        return
    diag = read_object(d, problems)  # the diagnostics stage runs for every run
    if diag is not None:
        problems += schemas.problems("diagnostics", diag, d)  # its per-layer values among them
        problems += bound_problems(d, run.run_id, diag, diag.get("run"), diag.get("provenance"),
                                   diag.get("weights_sha256"), hashes, trained)


def _core_problems(e: Path, ev: dict) -> list[str]:
    problems = []
    if ev.get("core_complete") is not True or ev.get("missing"):
        problems.append(f"{e}: CORE is not complete (core_complete {ev.get('core_complete')!r}, "
                        f"missing {ev.get('missing')!r})")
    if not is_finite(ev.get("core")) or not isinstance(ev.get("tasks"), dict) or not ev.get("tasks"):
        problems.append(f"{e}: no finite CORE score over its tasks (core {ev.get('core')!r})")
    if not isinstance(ev.get("core_detail"), dict) or not isinstance(ev["core_detail"].get("provenance"), dict):
        problems.append(f"{e}: no core_detail.provenance (which run and config it scored)")
    elif (ev["core_detail"].get("trained") or {}).get("complete") is False:
        problems.append(f"{e}: CORE scored a model that had not reached its horizon")
    return problems


def run_problems(study, run, run_dir: Path, diagnostics: bool = True) -> list[str]:
    problems: list[str] = []
    if not run_dir.is_dir():
        return [f"{run_dir}: missing (the study declares run {run.run_id})"]
    cfg = run.config()
    config = read_object(run_dir / "config.json", problems)
    summary = read_object(run_dir / "summary.json", problems)
    metrics_path = run_dir / "metrics.jsonl"
    if not metrics_path.exists():
        problems.append(f"{metrics_path}: missing")
        records = []
    else:
        records, bad = metrics_problems(metrics_path)
        problems += bad
    if summary is not None:
        s = run_dir / "summary.json"
        problems += schemas.problems("summary", summary, s)
        if summary.get("complete") is not True:
            problems.append(f"{s}: complete is {summary.get('complete')!r}, not true (stopped before its horizon)")
        if summary.get("steps") != cfg.num_iterations or summary.get("num_iterations") != cfg.num_iterations:
            problems.append(f"{s}: steps {summary.get('steps')!r} of {summary.get('num_iterations')!r}, "
                            f"the horizon is {cfg.num_iterations}")
        if not is_finite(summary.get("val_bpb")):
            problems.append(f"{s}: val_bpb is {summary.get('val_bpb')!r}, not a finite number")
        if (bad := non_finite(summary)) is not None and bad != "val_bpb":
            problems.append(f"{s}: {bad} is not finite")
        for name, want in (("seed", run.seed), ("arm", run.arm.name), ("preset", run.preset)):  # where recorded
            if name in summary and summary[name] != want:
                problems.append(f"{s}: {name} {summary[name]!r}, the folder's run {run.run_id} has {want!r} "
                                "(the summary of another run)")
    if config is not None:
        c = run_dir / "config.json"
        problems += schemas.problems("config", config, c)
        try:  # by value: fields the record predates read at their defaults
            if TrainConfig.from_dict(config, str(c)) != cfg:
                problems.append(f"{c}: not the config of {run.run_id} (a different run in this folder)")
        except ConfigError as e:
            problems.append(str(e))
        written = dict_hash({k: v for k, v in config.items() if k not in RECORD_EXTRAS})
        if summary is not None and summary.get("config_hash") not in (None, written):
            problems.append(f"{run_dir / 'summary.json'}: config hash {summary.get('config_hash')}, config.json "
                            f"hashes to {written} (the summary of another run)")
    if records and not any("torn" in p for p in problems):
        last = records[-1]
        if last["step"] != cfg.num_iterations or not is_finite(last.get("val_bpb")):
            problems.append(f"{metrics_path}: the last line is step {last['step']}"
                            f"{'' if 'val_bpb' in last else ' without val_bpb'}; the run's record ends with "
                            f"the evaluation at step {cfg.num_iterations}")
        elif summary is not None and is_finite(summary.get("val_bpb")) and summary["val_bpb"] != last["val_bpb"]:
            problems.append(f"{metrics_path}: the val_bpb at step {last['step']} ({last['val_bpb']}) is not the "
                            f"one summary.json reports ({summary['val_bpb']})")
    if records and not any("torn" in p for p in problems):
        problems += _schedule_problems(metrics_path, records, cfg)
    _bindings(run, run_dir, summary, config, problems, study.evaluated(run), diagnostics)
    return problems


def diverged_problems(run, run_dir: Path) -> list[str]:
    """Each way a divergence record (xsa/runs/diverged.py: a run that stopped on a non-finite loss, a
    final record without a summary) is not this run's: its config read by value, its step one of the
    run's, its reason said."""
    path, problems, cfg = run_dir / DIVERGED, [], run.config()
    rec = read_object(path, problems)
    if rec is None:
        return problems
    step = rec.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= cfg.num_iterations:
        problems.append(f"{path}: step {step!r} is not a step of the run's {cfg.num_iterations}")
    if not isinstance(rec.get("reason"), str) or not rec["reason"]:
        problems.append(f"{path}: no reason (what was not finite)")
    try:
        if not isinstance(rec.get("config"), dict) or TrainConfig.from_dict(rec["config"], str(path)) != cfg:
            problems.append(f"{path}: not the config of {run.run_id} (the record of another run)")
    except ConfigError as e:
        problems.append(str(e))
    return problems
