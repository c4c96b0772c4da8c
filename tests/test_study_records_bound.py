"""Every registered study's records are bound as the default study's are, by being registered: the
factorial's (and any study's) forged, swapped, deleted or unfinished record is refused naming the run,
before anything is written; a value no record can hold never reaches the statistics; a run left out of
a study registered final stops the build before it writes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from xsa import report
from xsa.studies.factorial import analysis, models
from xsa.checks import integrity, run_check
from xsa.books.factorial import factorial_book
from xsa.runs.diverged import write_diverged
from xsa.base.records import REPO_ROOT
from xsa.studies import registry
from xsa.studies.kinds import Study
from xsa.studies.factorial.design import factorial_study

RESULTS = REPO_ROOT / "results"
DEFAULT = registry.get_study("default")
FACTORIAL = "cpu-{w}-d4-s1097_{arm}-compiled-mlr{lr}_s{seed}"  # a long cell's run: the factorial's own


def run_id(w="w64", arm="xsa1", lr="0.04", seed=300) -> str:
    return FACTORIAL.format(w=w, arm=arm, lr=lr, seed=seed)


@pytest.fixture
def results(tmp_path):
    """A results folder whose run folders link to the committed ones (read only here); the runs a test
    damages are copied in first (own), and every file the build may write is a copy."""
    root = tmp_path / "results"
    (root / "runs").mkdir(parents=True)
    for d in (RESULTS / "runs").iterdir():
        if not d.name.startswith("."):
            (root / "runs" / d.name).symlink_to(d)
    for name in ("throughput", "archive", "estimates"):
        shutil.copytree(RESULTS / name, root / name)
    for d in RESULTS.iterdir():
        if (d / "ledger.txt").exists():
            (root / d.name).mkdir()
            shutil.copy(d / "ledger.txt", root / d.name / "ledger.txt")
    return root


def own(results: Path, run: str) -> Path:
    """The run's folder as a copy of the committed one, which a test may damage."""
    folder = results / "runs" / run
    folder.unlink()
    shutil.copytree(RESULTS / "runs" / run, folder)
    return folder


def edit(path: Path, **changes) -> None:
    d = json.loads(path.read_text())
    d.update(changes)
    path.write_text(json.dumps(d))


def swap_in(results: Path, run: str, other: str) -> None:
    """Every file of run's folder replaced by those of `other` (a record copied into the wrong folder)."""
    folder = own(results, run)
    shutil.rmtree(folder)
    shutil.copytree(RESULTS / "runs" / other, folder)


def snapshot(*roots) -> dict:
    """Every file under `roots` that is not a link into the committed records: its bytes and mtime."""
    out = {}
    for root in roots:
        for p in sorted(Path(root).rglob("*")) if Path(root).exists() else ():
            if p.is_file() and not any(q.is_symlink() for q in (p, *p.parents)):
                out[str(p)] = (p.stat().st_mtime_ns, p.read_bytes())
    return out


# each damage: the run it damages and what the refusal must say of it
def negative_bpb(results):
    edit(own(results, run := run_id(seed=300)) / "summary.json", val_bpb=-1.0)
    return run, "summary.json: val_bpb: -1.0 is less than or equal to the minimum of 0"


def huge_bpb(results):
    edit(own(results, run := run_id(seed=301)) / "summary.json", val_bpb=1e300)
    return run, "summary.json: val_bpb: 1e+300 is greater than or equal to the maximum of 20"


def summary_not_its_log(results):
    folder = own(results, run := run_id(arm="base", seed=302))
    edit(folder / "summary.json", val_bpb=json.loads((folder / "summary.json").read_text())["val_bpb"] * 0.985)
    return run, "is not the one summary.json reports"


def record_of_the_other_rate(results):
    swap_in(results, run := run_id(w="w128", seed=303), run_id(w="w128", lr="0.08", seed=303))
    return run, f"config.json: not the config of {run}"


def baseline_in_the_xsa_folder(results):
    swap_in(results, run := run_id(w="w128", seed=304), run_id(w="w128", arm="base", seed=304))
    return run, f"config.json: not the config of {run}"


def config_at_the_other_rate(results):
    edit(own(results, run := run_id(w="w128", arm="base", seed=305)) / "config.json", matrix_lr=0.08)
    return run, f"config.json: not the config of {run}"


def summary_of_another_seed(results):
    folder = own(results, run := run_id(w="w128", arm="base", lr="0.08", seed=308))
    shutil.copy(RESULTS / "runs" / run_id(w="w128", arm="base", lr="0.08", seed=309) / "summary.json", folder)
    return run, "summary.json: seed 309, the folder's run"


def deleted(results):
    (results / "runs" / (run := run_id(arm="base", lr="0.08", seed=306))).unlink()
    return run, "no summary.json (the study 'factorial', registered final"


def unfinished(results):
    edit(own(results, run := run_id(lr="0.08", seed=307)) / "summary.json", complete=False)
    return run, "complete is False, not true"


DAMAGES = [negative_bpb, huge_bpb, summary_not_its_log, record_of_the_other_rate, baseline_in_the_xsa_folder,
           config_at_the_other_rate, summary_of_another_seed, deleted, unfinished]


def test_each_damaged_factorial_record_is_refused_naming_its_run_before_anything_is_written(results, tmp_path):
    expected = dict(damage(results) for damage in DAMAGES)
    before = snapshot(results)
    problems = integrity.check_records(DEFAULT, results)
    for run, why in expected.items():
        assert any(run in p and why in p for p in problems), (run, why, problems)
    assert all(any(run in p for run in expected) for p in problems), problems  # nothing else is blamed
    with pytest.raises(report.RecordError, match="nothing was written") as refused:
        report.validate(DEFAULT, results)
    assert all(run in str(refused.value) for run in expected)
    assert snapshot(results) == before  # no ledger, no estimate


def test_every_registered_study_is_checked_by_being_registered(monkeypatch):
    """Every run with a record of every registered study goes through the run checks, a study planted
    in the registry (named nowhere in the checks) among them."""
    checked = set()

    def record(study, run, run_dir, diagnostics=True):
        checked.add(run.run_id)
        return []
    planted = factorial_study()
    monkeypatch.setitem(registry.STUDIES, "planted", lambda: Study(**{**planted.__dict__, "name": "planted"}))
    monkeypatch.delitem(registry.STUDIES, "factorial")  # its runs are then the planted study's alone
    monkeypatch.delitem(registry.STUDIES, "sink")  # (the sink study declares some of them too)
    monkeypatch.setattr(integrity, "run_problems", record)
    assert integrity.check_records(DEFAULT, RESULTS) == []
    for name in registry.STUDIES:
        present = {r.run_id for r in registry.get_study(name, RESULTS).runs
                   if (RESULTS / "runs" / r.run_id / "summary.json").exists()}
        assert present <= checked, (name, sorted(present - checked)[:5])
    assert {r.run_id for r in planted.runs} <= checked


def test_a_value_no_record_holds_never_reaches_the_statistics(results):
    """Past the record check (a caller that skips it), a val bpb of 1e300 is refused naming its run,
    not an OverflowError inside the statistics."""
    folder = own(results, run := run_id(seed=301))
    edit(folder / "summary.json", val_bpb=1e300)
    with pytest.raises(analysis.OutOfRange, match=run):
        factorial_book(results)


def test_degenerate_effects_are_a_clear_error(monkeypatch):
    """Every XSA run at its baseline's val bpb (no spread between seeds): the model comparison names
    the conditions, not an IndexError or LinAlgError from inside the fit."""
    real = analysis.final_bpb

    def flat(results, run):  # an XSA run reads as its baseline's record (final_bpb reads the run id only)
        return real(results, SimpleNamespace(run_id=run.run_id.replace("_xsa1-", "_base-")))
    monkeypatch.setattr(analysis, "final_bpb", flat)
    with pytest.raises(models.Degenerate, match="w64 short, w64 long, w128 short, w128 long"):
        models.compare(RESULTS)
    assert analysis.welch([0.1, 0.1], [0.2, 0.2])["p"] is None  # no spread: no p, never NaN


def test_a_run_left_out_of_a_final_study_stops_the_build_before_it_writes(results, tmp_path):
    """`make report LEAVE_OUT=<a scale run>`: the scale study is registered final, so its text has no
    interim reading; the build stops naming the run before a table, figure or estimate is written."""
    gone = "cpu-w64-d4-s1536_base-compiled-mlr0.08_s215"
    out = tmp_path / "out"
    before = snapshot(results, out)
    assert report.validate(DEFAULT, results, [gone]) == [gone]
    with pytest.raises(report.RecordError, match=f"(?s)nothing was written.*{re.escape(gone)} \\(left out\\)"):
        report.build(DEFAULT, results, out, [gone])
    assert snapshot(results, out) == before
    assert not out.exists()


def test_a_divergence_record_is_bound_to_its_run(tmp_path):
    """A run that diverged has diverged.json for a summary (the optimizer study's sweeps): it is a
    record, checked against its run's config, not a missing run."""
    run = next(r for r in factorial_study().runs if r.run_id == run_id(seed=300))
    folder = tmp_path / run.run_id
    folder.mkdir()
    config = json.loads((RESULTS / "runs" / run.run_id / "config.json").read_text())
    write_diverged(folder, 6, "train loss is nan", config)
    assert run_check.diverged_problems(run, folder) == []
    other = json.loads((RESULTS / "runs" / run_id(lr="0.08", seed=300) / "config.json").read_text())
    write_diverged(folder, 6, "train loss is nan", other)
    assert any(f"not the config of {run.run_id}" in p for p in run_check.diverged_problems(run, folder))
