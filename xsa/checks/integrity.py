"""
The record set a paper is built from, checked before anything is written.

A paper built from whatever is there changes its numbers quietly when one record is damaged (a NaN
val bpb drops a seed, a torn metrics line moves the gap curve, a deleted folder shrinks n, a summary
copied from the folder beside it swaps two arms). So the paper stage first checks every run the study
declares whole (xsa/checks/run_check.py: each file against its schema, the summary against its own
log, the folder against its config and seed, provenance, CORE and diagnostics bound to the run).

Every registered study is checked the same way, by being registered (xsa/studies/registry.py:
STUDIES; `registered_problems`): the parts of the report that read another study's records (the
robustness table, the scale section, the factorial's estimates, any study added later) read none
unchecked, and a new study needs no line here. Each declared run of any registered study with a
record here is whole; a study registered final (Study.final: its text states it whole) with any
record here has every declared run; an adaptive study's ledger lists no run without a finished
record (xsa/checks/ledger.py). A run several studies declare is checked once.

The study's throughput records (one per preset it measures) are there, complete and finite. A study
with a robustness table is checked with its adaptive study: every run that study declares is whole
too (diagnostics aside: they need the weights, which only the machine that trained a run holds); an
interim paper (`interim=True`) checks only the runs of that study that have a summary. The archived
records are the manifest's bytes. An estimates file of another study the paper's text may read
(results/estimates/*.json, but those this build writes) must read as one.

Any failure raises RecordError listing every file (so every run) and what is wrong with it. A run
the user leaves out on purpose (`leave_out`) is not checked, and the paper names it; a run left out
of a study registered final makes its estimates not whole, which the build refuses before it writes
anything (xsa/books/verdicts.py: `unwhole_problems`): a final study's text has no interim reading.
"""

from __future__ import annotations

from pathlib import Path

from xsa.archive import ARCHIVE, MANIFEST, manifest
from xsa.base.records import read_json, sha256_file
from xsa.studies import registry
from xsa.studies.registry import ADAPTIVE, get_study
from xsa.checks import ledger, schemas
from xsa.checks.run_check import DIVERGED, diverged_problems, is_finite, non_finite, read_object, run_problems


class RecordError(ValueError):
    """The record set cannot make a paper; the message lists each file and what is wrong."""


def throughput_problems(study, results_dir) -> list[str]:
    """The study's throughput records (one per preset it measures): there, a JSON object of a complete
    measurement, every number finite (an all-NaN record would read as an overhead 'supported')."""
    problems: list[str] = []
    for preset in study.throughput.get("presets", []):
        path = Path(results_dir) / "throughput" / f"{preset}.json"
        tp = read_object(path, problems)
        if tp is None:
            continue
        problems += schemas.problems("throughput", tp, path)
        ci = tp.get("overhead_ci95")
        if tp.get("complete") is not True:
            problems.append(f"{path}: complete is {tp.get('complete')!r}, not true (stopped before its measured steps)")
        if not is_finite(tp.get("overhead_ratio")) or not (isinstance(ci, list) and len(ci) == 2):
            problems.append(f"{path}: overhead_ratio {tp.get('overhead_ratio')!r} and overhead_ci95 {ci!r} are not "
                            "a finite ratio and its interval")
        if (bad := non_finite(tp)) is not None:
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
            read_json(path)  # names the file if it is not JSON; the schema checks the rest
        except (OSError, ValueError) as e:
            problems.append(str(e) if str(path) in str(e) else f"{path}: {e}")
            continue
        # read as one: its shape and fields are an Estimate's and its values of their kinds
        if wrong := [p.removeprefix(f"{path}: ") for p in schemas.check_file("estimates", path)]:
            problems.append(f"{path}: not an estimates file ({'; '.join(wrong)})")
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
    """The adaptive studies the paper reads: each has a ledger (xsa/checks/ledger.py)."""
    return [s for s in read_studies(study, results_dir) if s.name in ADAPTIVE]


def known_runs(study, results_dir) -> set[str]:
    """The run ids `leave_out` may name: those of every study the paper reads, and every run their
    ledgers list (a finished run whose record is gone is named there)."""
    listed = {r for s in bound(study, results_dir) for r in ledger.read(results_dir, s.name)}
    return {r.run_id for s in read_studies(study, results_dir) for r in s.runs} | listed


def registered_problems(results_dir, leave_out=(), checked=(), interim_study: str = "") -> list[str]:
    """Every problem of the records of every registered study (registry.STUDIES, read when called: a
    study is checked by being registered), the runs in leave_out aside and those in `checked` (the
    paper's own study's and its robustness study's, checked already with more) not checked twice:
    each declared run with a record (a summary.json) is whole (run_check.py), and a divergence record
    (diverged.json, a final record without a summary) is of its run; a study registered final
    with any record here has every declared run (a results folder with none of its records, a smoke
    study's, does not carry it; `interim_study` may still be training); each study's ledger, where it
    has one, lists no run without a finished record. A run several studies declare is checked once."""
    root, leave_out, checked = Path(results_dir) / "runs", set(leave_out or ()), set(checked)
    seen, problems = checked | leave_out, []
    for name in registry.STUDIES:
        study = get_study(name, results_dir)
        runs = [r for r in study.runs if r.run_id not in leave_out]
        present = {r.run_id for r in runs if (root / r.run_id / "summary.json").is_file()}
        diverged = {r.run_id for r in runs if r.run_id not in present and (root / r.run_id / DIVERGED).is_file()}
        if study.final and present and name != interim_study:
            problems += [f"{root / r.run_id}: no summary.json (the study {name!r}, registered final, declares run "
                         f"{r.run_id}: a deleted or unfinished record)" for r in runs
                         if r.run_id not in present | diverged | checked]
        for run in runs:
            if run.run_id in present | diverged and run.run_id not in seen:
                seen.add(run.run_id)
                problems += (run_problems(study, run, root / run.run_id, diagnostics=False) if run.run_id in present
                             else diverged_problems(run, root / run.run_id))
        problems += ledger.problems([study], results_dir, leave_out)
    return problems


def check_records(study, results_dir, leave_out=(), interim: bool = False) -> list[str]:
    """Every problem of the study's record set under results_dir/runs, and of its robustness study's
    (every declared run, or with `interim` those that have a summary), and of every registered
    study's records (registered_problems), the runs in leave_out aside."""
    leave_out = set(leave_out or ())
    checked = studies_checked(study, results_dir)
    problems = [f"leave_out: {r!r} is not a run of the study {study.name!r}" + other_studies(study)
                for r in sorted(leave_out - known_runs(study, results_dir))]
    root = Path(results_dir) / "runs"
    for run in study.runs:
        if run.run_id not in leave_out:
            problems += run_problems(study, run, root / run.run_id)
    for other in checked[1:]:
        runs = [r for r in other.runs if r.run_id not in leave_out]
        if interim:
            runs = [r for r in runs if (root / r.run_id / "summary.json").exists()]
        for run in runs:
            problems += run_problems(other, run, root / run.run_id, diagnostics=False)
    ids = {r.run_id for s in checked for r in s.runs}
    return (problems + throughput_problems(study, results_dir) + archive_problems(study, results_dir)
            + estimates_problems(study, results_dir)
            + registered_problems(results_dir, leave_out, ids, study.robustness if interim else ""))


def check_present(study, results_dir, leave_out=()) -> list[str]:
    """Every problem of the runs of a study in progress (an adaptive one) that have written a
    summary, those in leave_out aside: a run not started or still training is not a record yet, a
    run with a summary must be whole (its diagnostics aside: they come at the end of a pass)."""
    root = Path(results_dir) / "runs"
    return [p for run in study.runs if run.run_id not in set(leave_out or ())
            and (root / run.run_id / "summary.json").exists()
            for p in run_problems(study, run, root / run.run_id, diagnostics=False)]


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


