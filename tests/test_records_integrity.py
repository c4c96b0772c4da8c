"""The paper is built only from a whole record set: each damage a hostile user tried on a copy of
the committed default study is refused naming the file, and a run left out is said aloud."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from xsa import report
from xsa.base.records import REPO_ROOT, check_steps, read_jsonl
from xsa.checks.integrity import check_records, validate
from xsa.studies.registry import get_study

STUDY = get_study("default")
RUN = "cpu-w64-d4_xsa1_s3"  # a scored run of the primary comparison


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """A copy of the committed records (the originals are never touched)."""
    root = tmp_path_factory.mktemp("committed")
    shutil.copytree(REPO_ROOT / "results" / "runs", root / "runs")
    shutil.copytree(REPO_ROOT / "results" / "throughput", root / "throughput")
    shutil.copytree(REPO_ROOT / "results" / "archive", root / "archive")
    return root


@pytest.fixture
def results(committed, tmp_path):
    shutil.copytree(committed, tmp_path / "results")
    return tmp_path / "results"


def edit_json(path, **changes):
    d = json.loads(path.read_text())
    d.update(changes)
    path.write_text(json.dumps(d))


def test_the_committed_study_is_whole():
    assert check_records(STUDY, REPO_ROOT / "results") == []


def damage_nan_val_bpb(run):
    edit_json(run / "summary.json", val_bpb=float("nan"))
    return "summary.json: val_bpb is nan"


def damage_torn_tail(run):
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(text[:-40])
    return "metrics.jsonl:385: torn last line"


def damage_deleted(run):
    shutil.rmtree(run)
    return f"{run}: missing"


def damage_empty_core(run):
    (run / "eval.json").write_text("{}")
    return "eval.json: empty"


def damage_incomplete(run):
    edit_json(run / "summary.json", complete=False)
    return "complete is False"


def damage_doubled(run):
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(text + text)
    return "metrics.jsonl:386: step 0 goes back to step 384"


def damage_two_runs_mixed(run):
    """A second training (another alpha) appended its lines into the same folder."""
    other = (run.parent / "cpu-w64-d4_xsa0.5_s3" / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text() + "".join(other[:3]))
    return "step 0 goes back to step 384"


def damage_wrong_config(run):
    edit_json(run / "summary.json", config_hash="0123456789abcdef")
    return "config hash 0123456789abcdef"


def damage_nan_metric(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    rec = json.loads(lines[10])
    rec["train_loss"] = float("nan")
    lines[10] = json.dumps(rec)
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return "metrics.jsonl:11: train_loss is not finite"


def damage_last_eval_lost(run):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    return "the last line is step 383"


def damage_core_incomplete(run):
    edit_json(run / "eval.json", core_complete=False, missing=["piqa"])
    return "CORE is not complete"


def damage_no_diagnostics(run):
    (run / "diagnostics.json").unlink()
    return "diagnostics.json: missing"


def damage_eval_of_another_run(run):
    shutil.copy(run.parent / "cpu-w64-d4_base_s3" / "eval.json", run / "eval.json")
    return "eval.json: config hash"


def damage_diagnostics_of_another_run(run):
    shutil.copy(run.parent / "cpu-w64-d4_xsa0.5_s3" / "diagnostics.json", run / "diagnostics.json")
    return "diagnostics.json: the record of run 'cpu-w64-d4_xsa0.5_s3'"


def damage_nan_core_bpb(run):
    edit_json(run / "eval.json", core_bpb=float("nan"))
    return "eval.json: core_bpb is not finite"


def damage_nan_diagnostic(run):
    d = json.loads((run / "diagnostics.json").read_text())
    d["layers"][1]["entropy"] = float("inf")
    (run / "diagnostics.json").write_text(json.dumps(d))
    return "diagnostics.json: layers.1.entropy is not finite"


def damage_other_weights(run):
    d = json.loads((run / "diagnostics.json").read_text())
    d["weights_sha256"] = "0" * 64
    (run / "diagnostics.json").write_text(json.dumps(d))
    return "diagnostics.json: scored weights with sha256 0000"


def damage_no_provenance(run):
    (run / "provenance.json").unlink()
    return "provenance.json: missing"


def damage_middle_evaluations_removed(run):
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    kept = [x for x in lines if json.loads(x)["step"] not in (96, 192)]
    (run / "metrics.jsonl").write_text("".join(kept))
    return "no evaluation at steps 96, 192"


DAMAGES = [damage_nan_val_bpb, damage_torn_tail, damage_deleted, damage_empty_core, damage_incomplete,
           damage_doubled, damage_two_runs_mixed, damage_wrong_config, damage_nan_metric, damage_last_eval_lost,
           damage_core_incomplete, damage_no_diagnostics, damage_eval_of_another_run,
           damage_diagnostics_of_another_run, damage_nan_core_bpb, damage_nan_diagnostic, damage_other_weights,
           damage_no_provenance, damage_middle_evaluations_removed]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__[7:])
def test_each_damage_is_refused_naming_the_file(results, damage):
    expected = damage(results / "runs" / RUN)
    problems = check_records(STUDY, results)
    assert problems and all(RUN in p for p in problems), problems
    assert any(expected in p for p in problems), problems
    with pytest.raises(report.RecordError, match="nothing was written"):
        validate(STUDY, results)


def test_a_run_left_out_on_purpose_is_named(results, capsys):
    shutil.rmtree(results / "runs" / RUN)
    assert validate(STUDY, results, leave_out=[RUN]) == [RUN]
    assert f"{RUN} is left out by choice" in capsys.readouterr().out
    from xsa.report.notes import left_out_note
    assert f"Left out by choice, so in no number below: {RUN}" in left_out_note([RUN])
    with pytest.raises(report.RecordError, match="not a run of the study"):
        validate(STUDY, results, leave_out=["no-such-run"])


def robust_primary_run() -> str:
    robust = get_study("robust")
    pair = robust.comparison(robust.primary)
    return pair.b.run(robust.estimate_from).run_id


@pytest.mark.parametrize("what", ["folder", "summary"])
def test_a_declared_run_of_the_robustness_study_without_a_record_stops_the_paper(results, what, capsys):
    run = robust_primary_run()
    if what == "folder":
        shutil.rmtree(results / "runs" / run)
    else:
        (results / "runs" / run / "summary.json").unlink()
    problems = check_records(STUDY, results)
    assert problems and all(run in p for p in problems), problems
    with pytest.raises(report.RecordError, match="--interim"):
        validate(STUDY, results)
    assert check_records(STUDY, results, interim=True) == []  # an interim paper, when asked
    assert validate(STUDY, results, leave_out=[run]) == [run]  # or left out on purpose, and named


def nan_throughput(results):
    edit_json(results / "throughput" / "cpu-w64-d4.json", overhead_ratio=float("nan"), overhead_ci95=[float("nan")] * 2)
    return "cpu-w64-d4.json: overhead_ratio nan"


def list_throughput(results):
    (results / "throughput" / "cpu-w64-d8.json").write_text("[]")
    return "cpu-w64-d8.json: empty or not a JSON dict"


def deleted_throughput(results):
    (results / "throughput" / "cpu-w64-d4.json").unlink()
    return "cpu-w64-d4.json: missing"


def changed_archive(results):
    path = next((results / "archive" / "30bc3ae" / "runs").glob("cpu-d4_xsa1_s0")) / "summary.json"
    edit_json(path, val_bpb=float("nan"))
    return "cpu-d4_xsa1_s0/summary.json: not the bytes 30bc3ae holds"


def deleted_archive_record(results):
    (results / "archive" / "30bc3ae" / "runs" / "cpu-d8_base_s1" / "summary.json").unlink()
    return "cpu-d8_base_s1/summary.json: missing"


def extra_archive_run(results):
    root = results / "archive" / "30bc3ae" / "runs"
    shutil.copytree(root / "cpu-d8_base_s1", root / "cpu-d8_base_s7")
    return "cpu-d8_base_s7: not a run of the archive"


def handmade_gpu_folder(results):
    """A folder named as a run of the GPU study, made by hand from a CPU run's records."""
    shutil.copytree(results / "runs" / RUN, results / "runs" / "d12_base_s0")
    return "d12_base_s0/config.json: not the config of d12_base_s0"


@pytest.mark.parametrize("damage", [nan_throughput, list_throughput, deleted_throughput, changed_archive,
                                    deleted_archive_record, extra_archive_run, handmade_gpu_folder],
                         ids=lambda f: f.__name__)
def test_every_other_input_of_the_paper_is_checked(results, damage):
    expected = damage(results)
    problems = check_records(STUDY, results)
    assert any(expected in p for p in problems), problems
    with pytest.raises(report.RecordError, match="nothing was written"):
        validate(STUDY, results)


def test_a_damaged_estimates_file_of_another_study_stops_the_paper_before_anything_is_written(results):
    """The text may read the estimates of a study built elsewhere (results/estimates/<study>.json):
    one that is not an estimates file is named by the record check, not a traceback after the tables."""
    from xsa.books.estimates import read_estimates
    est = results / "estimates"
    est.mkdir()
    (est / "default.json").write_text("[]")  # this build's own: replaced, never read
    (est / "gpu.json").write_text('{"study": "gpu", "estimates": [{"key": "x", "value": 1.0, "runs": []}]}')
    assert check_records(STUDY, results) == []
    for text, why in (("[]", "not an estimates file"), ('{"estimates": [{"key": "x"', "corrupt JSON"),
                      ('{"estimates": [{"key": "x", "runs": [], "colour": 1}]}', "not an estimates file")):
        (est / "gpu.json").write_text(text)
        with pytest.raises(ValueError, match=f"gpu.json: {why}"):
            read_estimates(est / "gpu.json")
        problems = check_records(STUDY, results)
        assert len(problems) == 1 and f"{est / 'gpu.json'}: {why}" in problems[0], problems
        with pytest.raises(report.RecordError, match="nothing was written"):
            validate(STUDY, results)


SCALE_RUN = "cpu-w64-d4-s1536_base-compiled-mlr0.08_s200"  # a finished record of the scale study (its x4 bracket)


@pytest.mark.parametrize("damage", ["nan", "another seed"])
def test_a_damaged_record_of_the_scale_study_stops_the_paper_naming_it(results, damage):
    """The default paper carries the scale study's section: a finished record of it that is not whole
    stops the build naming the file, before any estimates file or table is written."""
    run = results / "runs" / SCALE_RUN
    if damage == "nan":
        edit_json(run / "summary.json", val_bpb=float("nan"))
        expected = f"{run / 'summary.json'}: val_bpb is nan"
    else:
        shutil.copy(results / "runs" / SCALE_RUN.replace("_s200", "_s201") / "summary.json", run / "summary.json")
        expected = f"{run / 'summary.json'}: config hash"
    with pytest.raises(report.RecordError, match="cannot make the scale section") as e:
        report.build(STUDY, results)
    assert expected in str(e.value), str(e.value)
    assert not (results / "estimates").exists() and not (results / "tables").exists()


def test_reading_a_record_refuses_repeated_or_earlier_steps(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 1}\n{"step": 1}\n')
    with pytest.raises(ValueError, match="step 1, which repeats step 1"):
        check_steps(read_jsonl(path), path)
    run = tmp_path / "results"
    shutil.copytree(REPO_ROOT / "results" / "runs" / RUN, run / "runs" / RUN)
    damage_doubled(run / "runs" / RUN)
    with pytest.raises(ValueError, match="metrics.jsonl: record 386 has step 0"):
        report.load_run(run / "runs" / RUN)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "xsa.pipeline", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)


def test_the_paper_stage_stops_on_a_damaged_record_and_writes_nothing(results, tmp_path):
    damage_nan_val_bpb(results / "runs" / RUN)
    damage_torn_tail(results / "runs" / "cpu-w64-d4_base_s3")
    out = cli("--study", "default", "--stages", "paper", "--results", str(results), "--paper", str(tmp_path / "paper"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"{RUN}/summary.json: val_bpb is nan" in out.stderr and "cpu-w64-d4_base_s3/metrics.jsonl" in out.stderr
    assert not (tmp_path / "paper").exists() and not (results / "tables").exists()
    assert not (results / "figures").exists()


def test_paper_stage_arguments_are_checked_before_any_stage(tmp_path, results):
    out = cli("--study", "default", "--stages", "paper", "--results", str(results), "--paper", str(tmp_path / "p"),
              "--leave-out", "no-such-run")
    assert out.returncode == 1 and "--leave-out: no-such-run is not a run" in out.stderr
    (tmp_path / "file").write_text("x")
    out = cli("--study", "default", "--stages", "paper", "--results", str(results),
              "--paper", str(tmp_path / "file" / "paper"))
    assert out.returncode == 1 and f"paper: {tmp_path / 'file'} is a file" in out.stderr
    assert "running" not in out.stdout
