"""An adaptive study's declared set cannot shrink unseen: a finished run that its ledger lists and
whose record is gone stops the paper, unless it is left out by name."""

from __future__ import annotations

import shutil

from xsa.base.records import REPO_ROOT
from xsa.checks import ledger
from xsa.checks.integrity import bound, known_runs
from xsa.studies.registry import get_study

RESULTS = REPO_ROOT / "results"


def _results_without(tmp_path, gone: str):
    """A results folder whose run folders link to the committed ones, one removed, with the ledgers."""
    (tmp_path / "runs").mkdir()
    for d in (RESULTS / "runs").iterdir():
        if d.name != gone:
            (tmp_path / "runs" / d.name).symlink_to(d)
    for name in ("robust", "scale", "scale-check"):
        (tmp_path / name).mkdir()
        shutil.copy(ledger.path(RESULTS, name), ledger.path(tmp_path, name))
    return tmp_path


def test_the_committed_ledgers_list_every_finished_run_of_the_adaptive_studies():
    studies = bound(get_study("default"), RESULTS)
    assert {s.name for s in studies} == {"robust", "scale", "scale-check"}
    assert ledger.problems(studies, RESULTS) == []
    for s in studies:
        assert {r.run_id for r in s.runs if ledger.finished(RESULTS, r.run_id)} <= ledger.read(RESULTS, s.name)


def test_a_deleted_scale_record_is_named_and_can_only_be_left_out_by_name(tmp_path):
    gone = "cpu-w64-d4-s1536_base-compiled-mlr0.08_s215"
    results = _results_without(tmp_path, gone)
    study = get_study("default")
    found = ledger.problems(bound(study, results), results)
    assert len(found) == 1 and found[0].startswith(gone) and "scale" in found[0]
    assert gone in known_runs(study, results)  # so --leave-out may name it
    assert ledger.problems(bound(study, results), results, leave_out=[gone]) == []


def test_the_ledger_only_grows(tmp_path):
    class Study:
        name = "grow"
        runs = ()
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "summary.json").write_text('{"complete": true}')
    Study.runs = (type("R", (), {"run_id": "a"})(), type("R", (), {"run_id": "b"})())
    ledger.update([Study], tmp_path)
    assert ledger.read(tmp_path, "grow") == {"a"}
    (tmp_path / "runs" / "a" / "summary.json").unlink()
    ledger.update([Study], tmp_path)
    assert ledger.read(tmp_path, "grow") == {"a"}
    assert "a: listed in" in ledger.problems([Study], tmp_path)[0]
