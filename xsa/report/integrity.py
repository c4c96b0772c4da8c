"""
The record set a paper is built from, checked before anything is written.

A paper built from whatever is there changes its numbers quietly when one record is damaged (a NaN
val bpb drops a seed, a torn metrics line moves the gap curve, a deleted folder shrinks n). So the
paper stage first checks every run the study declares:

- the folder is there, with config.json, summary.json and metrics.jsonl, and was trained with the
  config the study asks for (config.json read by value), with a summary of that config (its hash);
- summary.json says complete, trained to the horizon (steps == num_iterations), with a finite val bpb;
- metrics.jsonl is whole (no torn last line), its steps strictly increase (no duplicates, no two runs
  mixed in one file), every number in it is finite, and its last line is the evaluation at the
  horizon, the val bpb the summary reports;
- metrics.jsonl holds the evaluation of every scheduled step (0, every eval_every, the horizon): a
  log with evaluations removed would average a curve over fewer seeds under the old n;
- provenance.json is there and of this config;
- config.json, every line of metrics.jsonl, summary.json, provenance.json, eval.json, diagnostics.json,
  the throughput records, the estimates files, the archived runs' records and the archive manifest
  each match the schema of their kind (xsa/report/schemas.py: a negative learning rate, a negative
  loss, a negative CPU time, a p above 1, a reversed interval, an accuracy above 1, a cosine outside
  [-1, 1]), each problem naming its field (and for metrics.jsonl its line);
- every run the study scores has a complete CORE record (eval.json: all tasks, a finite CORE);
- diagnostics.json (the pipeline runs diagnostics for every run) has its per-layer values;
- eval.json and diagnostics.json are bound to the run: the run id they record (where they do), the
  config hash of the run and the trained weights' sha256 (records written before it was recorded
  carry none), and every number in them is finite (a record copied from another folder fails).

The study's throughput records (one per preset it measures) are there, complete and finite; the
GPU study's run folders, where there are any, are whole records of its declared runs (the GPU
table reads them beside any paper). A study with a robustness table is checked with its adaptive
study: every run that study declares is whole too (diagnostics aside: they need the weights, which
only the machine that trained a run holds); an interim paper (`interim=True`) checks only the runs
of that study that have a summary. An estimates file of another study the paper's text may read
(results/estimates/*.json, but those this build writes) must read as one.

Any failure raises RecordError listing every file and what is wrong with it. A run the user leaves
out on purpose (`leave_out`, of either study) is not checked, and the paper names it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from xsa.archive import ARCHIVE, MANIFEST, manifest
from xsa.stack.config import RECORD_EXTRAS, ConfigError, TrainConfig, dict_hash
from xsa.runs.records import read_json, sha256_file
from xsa.studies.registry import ADAPTIVE, get_study
from xsa.report import ledger, schemas
from xsa.report.estimates import read_estimates


class RecordError(ValueError):
    """The record set cannot make a paper; the message lists each file and what is wrong."""


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _non_finite(value, where: str = "") -> str | None:
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
        if (bad := _non_finite(v, f"{where}.{k}" if where else str(k))) is not None:
            return bad
    return None


def _json(path: Path, problems: list, kind=dict):
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
        if (bad := _non_finite(rec)) is not None:
            problems.append(f"{path}:{i}: {bad} is not finite")
        problems += schemas.problems("metrics", rec, f"{path}:{i}")
        last = rec["step"] if last is None else max(last, rec["step"])
        records.append(rec)
    return records, problems


def _schedule_problems(path: Path, records: list[dict], cfg) -> list[str]:
    """The scheduled evaluations (step 0, every eval_every, the horizon) the log lacks."""
    every = getattr(cfg, "eval_every", 0) or cfg.num_iterations
    due = {0, cfg.num_iterations, *range(0, cfg.num_iterations + 1, every)}
    logged = {r["step"] for r in records if _finite(r.get("val_bpb"))}
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
    if (bad := _non_finite(rec)) is not None:
        out.append(f"{path}: {bad} is not finite")
    return out


def _bindings(run, run_dir: Path, summary, config, problems: list, scored: bool, diagnostics: bool) -> None:
    """The checks of eval.json, diagnostics.json and provenance.json against the run."""
    hashes = {run.config().config_hash(), (summary or {}).get("config_hash")}
    if config is not None:
        hashes.add(dict_hash({k: v for k, v in config.items() if k not in RECORD_EXTRAS}))
    hashes.discard(None)
    trained = (summary or {}).get("final_weights_sha256")
    prov = _json(run_dir / "provenance.json", problems)
    if prov is not None:
        problems += schemas.problems("provenance", prov, run_dir / "provenance.json")
        if prov.get("config_hash") not in hashes:
            problems.append(f"{run_dir / 'provenance.json'}: config hash {prov.get('config_hash')!r} is not the run's")
    e = run_dir / "eval.json"
    if scored or e.exists():
        ev = _json(e, problems)
        if ev is not None:
            for key in ("core_detail", "chat_detail"):
                detail = ev.get(key)
                if key in ev and not isinstance(detail, dict):
                    problems.append(f"{e}: {key} is not an object")
                elif detail is not None:
                    problems += bound_problems(e, run.run_id, {}, detail.get("run"), detail.get("provenance"),
                                               detail.get("weights_sha256"), hashes, trained)
            if (bad := _non_finite(ev)) is not None:
                problems.append(f"{e}: {bad} is not finite")
            problems += schemas.problems("eval", ev, e)
            if scored:
                problems += _core_problems(e, ev)
    d = run_dir / "diagnostics.json"
    if not diagnostics and not d.exists():
        return
    diag = _json(d, problems)  # the diagnostics stage runs for every run
    if diag is not None:
        problems += schemas.problems("diagnostics", diag, d)  # its per-layer values among them
        problems += bound_problems(d, run.run_id, diag, diag.get("run"), diag.get("provenance"),
                                   diag.get("weights_sha256"), hashes, trained)


def _core_problems(e: Path, ev: dict) -> list[str]:
    problems = []
    if ev.get("core_complete") is not True or ev.get("missing"):
        problems.append(f"{e}: CORE is not complete (core_complete {ev.get('core_complete')!r}, "
                        f"missing {ev.get('missing')!r})")
    if not _finite(ev.get("core")) or not isinstance(ev.get("tasks"), dict) or not ev.get("tasks"):
        problems.append(f"{e}: no finite CORE score over its tasks (core {ev.get('core')!r})")
    if not isinstance(ev.get("core_detail"), dict) or not isinstance(ev["core_detail"].get("provenance"), dict):
        problems.append(f"{e}: no core_detail.provenance (which run and config it scored)")
    elif (ev["core_detail"].get("trained") or {}).get("complete") is False:
        problems.append(f"{e}: CORE scored a model that had not reached its horizon")
    return problems


def _run_problems(study, run, run_dir: Path, diagnostics: bool = True) -> list[str]:
    problems: list[str] = []
    if not run_dir.is_dir():
        return [f"{run_dir}: missing (the study declares run {run.run_id})"]
    cfg = run.config()
    config = _json(run_dir / "config.json", problems)
    summary = _json(run_dir / "summary.json", problems)
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
        if not _finite(summary.get("val_bpb")):
            problems.append(f"{s}: val_bpb is {summary.get('val_bpb')!r}, not a finite number")
        if (bad := _non_finite(summary)) is not None and bad != "val_bpb":
            problems.append(f"{s}: {bad} is not finite")
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
        if last["step"] != cfg.num_iterations or not _finite(last.get("val_bpb")):
            problems.append(f"{metrics_path}: the last line is step {last['step']}"
                            f"{'' if 'val_bpb' in last else ' without val_bpb'}; the run's record ends with "
                            f"the evaluation at step {cfg.num_iterations}")
        elif summary is not None and _finite(summary.get("val_bpb")) and summary["val_bpb"] != last["val_bpb"]:
            problems.append(f"{metrics_path}: the val_bpb at step {last['step']} ({last['val_bpb']}) is not the "
                            f"one summary.json reports ({summary['val_bpb']})")
    if records and not any("torn" in p for p in problems):
        problems += _schedule_problems(metrics_path, records, cfg)
    _bindings(run, run_dir, summary, config, problems, study.evaluated(run), diagnostics)
    return problems


def throughput_problems(study, results_dir) -> list[str]:
    """The study's throughput records (one per preset it measures): there, a JSON object of a complete
    measurement, every number finite (an all-NaN record would read as an overhead 'supported')."""
    problems: list[str] = []
    for preset in study.throughput.get("presets", []):
        path = Path(results_dir) / "throughput" / f"{preset}.json"
        tp = _json(path, problems)
        if tp is None:
            continue
        problems += schemas.problems("throughput", tp, path)
        ci = tp.get("overhead_ci95")
        if tp.get("complete") is not True:
            problems.append(f"{path}: complete is {tp.get('complete')!r}, not true (stopped before its measured steps)")
        if not _finite(tp.get("overhead_ratio")) or not (isinstance(ci, list) and len(ci) == 2):
            problems.append(f"{path}: overhead_ratio {tp.get('overhead_ratio')!r} and overhead_ci95 {ci!r} are not "
                            "a finite ratio and its interval")
        if (bad := _non_finite(tp)) is not None:
            problems.append(f"{path}: {bad} is not finite")
    return problems


def archive_problems(study, results_dir) -> list[str]:
    """The archived studies the robustness table carries: each file as xsa/archive.sha256 records it
    (a changed, NaN or missing record would change a row), and no run folder it does not list."""
    problems = schemas.manifest_problems(MANIFEST) if study.archived else []
    for a in study.archived:
        root, wanted = Path(results_dir) / ARCHIVE / a.commit, manifest(a.commit)
        if not root.is_dir():
            problems.append(f"{root}: missing (python -m xsa.archive --commit {a.commit} restores it)")
            continue
        for rel, digest in sorted(wanted.items()):
            if not (root / rel).is_file():
                problems.append(f"{root / rel}: missing (python -m xsa.archive --commit {a.commit} restores it)")
            elif sha256_file(root / rel) != digest:
                problems.append(f"{root / rel}: not the bytes {a.commit} holds (its sha256 differs from the manifest)")
            elif (kind := Path(rel).stem) in ("config", "summary", "provenance"):  # the values the table reads
                problems += schemas.check_file(kind, root / rel)
        runs = {rel.split("/")[1] for rel in wanted}
        problems += [f"{d}: not a run of the archive of {a.commit}" for d in sorted((root / "runs").glob("*"))
                     if d.name not in runs]
    return problems


def gpu_problems(study, results_dir) -> list[str]:
    """The GPU study's run folders that are here (the GPU table reads them beside any study's paper):
    each must be the whole record of its declared run."""
    if study.name == "gpu":
        return []
    gpu, root = get_study("gpu"), Path(results_dir) / "runs"
    return [p for run in gpu.runs if (root / run.run_id).exists()
            for p in _run_problems(gpu, run, root / run.run_id, diagnostics=False)]


def estimates_problems(study, results_dir) -> list[str]:
    """The estimates files of other studies the paper's text may read (results/estimates/*.json, a
    study built on another branch, say), each readable as one: the build replaces only its own, and a
    damaged file found after the tables are written would stop the paper half-written."""
    own = {study.name, study.robustness, study.prediction} | ({"archive"} if study.robustness else set())
    problems = []
    for path in sorted((Path(results_dir) / "estimates").glob("*.json")):
        if path.stem in own:
            continue
        try:
            read_estimates(path)
        except (OSError, ValueError) as e:
            problems.append(str(e) if str(path) in str(e) else f"{path}: {e}")
            continue
        problems += schemas.check_file("estimates", path)  # read as one: are its values of their kinds
    return problems


def studies_checked(study, results_dir) -> list:
    """The study and the adaptive study its robustness table reads (declared from the records)."""
    return [study] + ([get_study(study.robustness, results_dir)] if study.robustness else [])


def other_studies(study) -> str:
    """The studies besides `study` whose runs leave_out may name, as an error message says them."""
    return "".join(f" or of its {kind} study {name!r}" for kind, name in
                   (("robustness", study.robustness), ("scale", study.prediction)) if name)


def read_studies(study, results_dir) -> list:
    """The study, its robustness study, its prediction (scale) study and that study's checks, as their
    rules declare them from the records: every study whose runs the paper reads."""
    scale = [get_study(study.prediction, results_dir)] if study.prediction else []
    scale += [get_study(c, results_dir) for s in scale for c in s.checks]  # the checks of its levels
    return studies_checked(study, results_dir) + scale


def bound(study, results_dir) -> list:
    """The adaptive studies the paper reads: each has a ledger (xsa/report/ledger.py)."""
    return [s for s in read_studies(study, results_dir) if s.name in ADAPTIVE]


def known_runs(study, results_dir) -> set[str]:
    """The run ids `leave_out` may name: those of every study the paper reads, and every run their
    ledgers list (a finished run whose record is gone is named there)."""
    listed = {r for s in bound(study, results_dir) for r in ledger.read(results_dir, s.name)}
    return {r.run_id for s in read_studies(study, results_dir) for r in s.runs} | listed


def check_records(study, results_dir, leave_out=(), interim: bool = False) -> list[str]:
    """Every problem of the study's record set under results_dir/runs, and of its robustness study's
    (every declared run, or with `interim` those that have a summary), the runs in leave_out aside."""
    leave_out = set(leave_out or ())
    checked = studies_checked(study, results_dir)
    problems = [f"leave_out: {r!r} is not a run of the study {study.name!r}" + other_studies(study)
                for r in sorted(leave_out - known_runs(study, results_dir))]
    root = Path(results_dir) / "runs"
    for run in study.runs:
        if run.run_id not in leave_out:
            problems += _run_problems(study, run, root / run.run_id)
    for other in checked[1:]:
        runs = [r for r in other.runs if r.run_id not in leave_out]
        if interim:
            runs = [r for r in runs if (root / r.run_id / "summary.json").exists()]
        for run in runs:
            problems += _run_problems(other, run, root / run.run_id, diagnostics=False)
    return (problems + throughput_problems(study, results_dir) + archive_problems(study, results_dir)
            + gpu_problems(study, results_dir) + estimates_problems(study, results_dir)
            + ledger.problems(bound(study, results_dir), results_dir, leave_out))


def check_present(study, results_dir, leave_out=()) -> list[str]:
    """Every problem of the runs of a study in progress (an adaptive one) that have written a
    summary, those in leave_out aside: a run not started or still training is not a record yet, a
    run with a summary must be whole (its diagnostics aside: they come at the end of a pass)."""
    root = Path(results_dir) / "runs"
    return [p for run in study.runs if run.run_id not in set(leave_out or ())
            and (root / run.run_id / "summary.json").exists()
            for p in _run_problems(study, run, root / run.run_id, diagnostics=False)]


def validate(study, results_dir, leave_out=(), interim: bool = False) -> list[str]:
    """Raise RecordError unless every run of the study and of its robustness study (but those left
    out) has whole records; return the runs left out, each said aloud. With `interim`, the
    robustness study's runs not trained yet are allowed (the paper says its rows are interim)."""
    problems = check_records(study, results_dir, leave_out, interim)
    if problems:
        raise RecordError(f"the records of study {study.name!r} cannot make a paper ({len(problems)} problem"
                          f"{'s' if len(problems) > 1 else ''}; nothing was written):\n  " + "\n  ".join(problems)
                          + "\nrepair or retrain those runs, or leave a run out on purpose (--leave-out RUN_ID)"
                          + (f"; while {study.robustness!r} still trains, --interim builds an interim paper"
                             if study.robustness and not interim else ""))
    ledger.update(bound(study, results_dir), results_dir)  # whole: the runs that finished since join the ledgers
    left = sorted(set(leave_out or ()))
    for run_id in left:
        print(f"records: {run_id} is left out by choice (--leave-out); the paper says so", flush=True)
    return left
