"""The classes of hostile input that scripts/hostile_more.py found mishandled, each refused in one line
naming the thing at fault, before any work and without changing a record: a damaged record file
(binary garbage, a JSON list for a run's record), an evaluation's per-item values beside another's,
an unreachable download, a throughput pair that is not the study's, a pre-registration with nothing
to size it or written over a folder or a record, a reproduction written over a record, a results
"folder" that is a file."""

import json
import subprocess
import sys

import pytest

from conftest import REPO, train_smoke
from test_evaluate import synthetic_tasks, write_bundle

from xsa.base.records import read_json


@pytest.fixture(scope="module")
def run(tmp_path_factory, smoke_data):
    """A smoke run of one step (config, summary, provenance, weights)."""
    out = tmp_path_factory.mktemp("hostile") / "run"
    train_smoke(out, smoke_data, max_steps=1)
    return out


# -----------------------------------------------------------------------------
# a damaged record file: named, never a traceback

@pytest.mark.parametrize("name, content, said", [
    ("config.json", b"\x89\xff\x00garbage", "not UTF-8 text"),
    ("summary.json", b"[]", "holds a JSON list"),
    ("provenance.json", b'"a string"', "holds a JSON str"),
])
def test_damaged_record_file_is_named(tmp_path, name, content, said):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=said) as exc:
        read_json(tmp_path / name)
    assert str(tmp_path / name) in str(exc.value)


def test_other_json_files_may_hold_any_value(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    assert read_json(tmp_path / "list.json") == [1, 2]


def test_diagnostics_of_a_run_whose_config_is_a_list(run, tmp_path, capsys):
    from xsa.diagnostics import main
    bad = tmp_path / "run"
    bad.mkdir()
    for name in ("summary.json", "provenance.json"):
        (bad / name).write_bytes((run / name).read_bytes())
    (bad / "config.json").write_text("[]")
    with pytest.raises(SystemExit) as exc:
        main(["--run", str(bad), "--out", str(tmp_path / "d.json")])
    assert exc.value.code == 2 and f"{bad / 'config.json'}: holds a JSON list" in capsys.readouterr().err


# -----------------------------------------------------------------------------
# two CORE evaluations into one folder: each keeps its per-item values

def test_core_items_beside_each_out(run, tmp_path):
    from xsa.evaluate.run import evaluate_run_core
    bundle = write_bundle(tmp_path / "bundle", synthetic_tasks(4))
    keep = tmp_path / "keep"
    evaluate_run_core(run, bundle=bundle, max_per_task=2, out=keep / "a.json", device="cpu")
    first = (keep / "a.core_items.json").read_bytes()
    evaluate_run_core(run, bundle=bundle, max_per_task=3, out=keep / "b.json", device="cpu")
    assert (keep / "a.core_items.json").read_bytes() == first
    assert json.loads((keep / "b.core_items.json").read_text())["max_per_task"] == 3
    assert not (keep / "core_items.json").exists()


# -----------------------------------------------------------------------------
# a download that cannot happen: an OSError naming the URL (every command reports those in one line)

def test_unreachable_download_is_an_oserror_naming_the_url(tmp_path):
    from xsa.data.hub import download_parquet
    url = "http://127.0.0.1:9/nothing.parquet"
    with pytest.raises(OSError, match="could not download http://127.0.0.1:9/nothing.parquet") as exc:
        download_parquet(url, tmp_path / "x.parquet", "supply it offline", retries=1, backoff=0)
    assert isinstance(exc.value, RuntimeError)  # what callers caught before


# -----------------------------------------------------------------------------
# throughput: more threads than cores (torch crashes on them), or XSA given to the baseline arm

def test_throughput_refuses_more_threads_than_cores(tmp_path):
    # in a process of its own: torch.set_num_threads(100000) kills the process that calls it
    res = subprocess.run([sys.executable, "-m", "xsa.throughput", "--preset", "smoke", "--steps", "1", "--warmup",
                          "0", "--threads", "100000", "--out", str(tmp_path / "t.json")],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "--threads 100000" in res.stderr, res.stderr[-500:]
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("field", ["xsa_alpha=0.5", "xsa_layers=last:1"])
def test_throughput_refuses_an_arm_field_for_both_arms(tmp_path, capsys, field):
    from xsa.throughput import main
    with pytest.raises(SystemExit) as exc:
        main(["--preset", "smoke", "--steps", "1", "--warmup", "0", "--set", field, "--out", str(tmp_path / "t.json")])
    assert exc.value.code == 2 and field.split("=")[0] in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


# -----------------------------------------------------------------------------
# prereg: no records to size the design; --out a folder or a record, --force or not

@pytest.mark.parametrize("study", ["robust", "scale", "scale-check"])
def test_prereg_without_records_is_refused(tmp_path, capsys, study):
    from xsa.prereg import main
    (tmp_path / "results" / "runs").mkdir(parents=True)
    with pytest.raises(SystemExit) as exc:
        main(["--study", study, "--results", str(tmp_path / "results"), "--out", str(tmp_path / "p.md")])
    assert exc.value.code == 2 and str(tmp_path / "results") in capsys.readouterr().err
    assert not (tmp_path / "p.md").exists()


def test_prereg_never_writes_over_a_folder_or_a_record(run, tmp_path, capsys):
    from xsa.prereg import main
    summary = (run / "summary.json").read_bytes()
    (tmp_path / "folder").mkdir()
    for out in (tmp_path / "folder", run / "summary.json"):
        with pytest.raises(SystemExit) as exc:
            main(["--results", str(REPO / "results"), "--out", str(out), "--force"])
        assert exc.value.code == 2 and str(out) in capsys.readouterr().err
    assert (run / "summary.json").read_bytes() == summary and not any((tmp_path / "folder").iterdir())


# -----------------------------------------------------------------------------
# reproduce: --out checked before the run is trained again, never a run's record

def test_reproduce_checks_out_before_retraining(run, tmp_path, capsys):
    from xsa.reproduce import main
    summary = (run / "summary.json").read_bytes()
    (tmp_path / "folder").mkdir()
    for out in (tmp_path / "folder", run / "summary.json"):
        with pytest.raises(SystemExit) as exc:
            main(["--run", str(run), "--out", str(out), "--no-progress"])
        assert exc.value.code == 2 and str(out) in capsys.readouterr().err
    assert (run / "summary.json").read_bytes() == summary


# -----------------------------------------------------------------------------
# pipeline --status of a results "folder" that is a file: not "0 of N trained"

def test_pipeline_status_of_a_file(tmp_path, capsys):
    from xsa.pipeline import main
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as exc:
        main(["--study", "smoke", "--status", "--results", str(tmp_path / "file")])
    assert exc.value.code == 2 and str(tmp_path / "file") in capsys.readouterr().err


# -----------------------------------------------------------------------------
# torchrun's environment and a world size no node has


@pytest.mark.parametrize("env,named", [(dict(RANK="abc", LOCAL_RANK="0", WORLD_SIZE="1"), "$RANK='abc'"),
                                       (dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="0"), "$WORLD_SIZE=0"),
                                       (dict(RANK="3", LOCAL_RANK="0", WORLD_SIZE="2"), "RANK < WORLD_SIZE")])
def test_a_rank_torchrun_would_never_set_is_named(env, named, monkeypatch):
    from xsa.base.common import dist_info
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=named.replace("$", r"\$")):
        dist_info()


def test_memory_of_a_huge_world_answers_at_once():
    from xsa.memory import per_rank
    small, huge = per_rank("d12", 8, after=True), per_rank("d12", 10**11, after=True)
    assert huge["weights"] == small["weights"] and huge["adamw"] <= small["adamw"]  # each rank holds at most one


def test_a_world_size_no_job_has_is_refused_in_one_line(capsys):
    from xsa.memory import main
    with pytest.raises(SystemExit) as stop:
        main(["--world", str(10**11)])
    assert stop.value.code == 2 and "--world must be between 1 and" in capsys.readouterr().err


def test_a_run_from_uncommitted_code_records_the_change(tmp_path, monkeypatch):
    """Item 10: provenance of a run from a dirty tree holds the change itself, outputs left out."""
    from xsa.base import records
    repo = tmp_path / "repo"
    (repo / "xsa").mkdir(parents=True)
    (repo / "xsa" / "m.py").write_text("x = 1\n")
    (repo / "results").mkdir()
    for cmd in (["init", "-q"], ["add", "."], ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "c"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    monkeypatch.setattr(records, "REPO_ROOT", repo)
    clean = records.code_provenance(records.git_state()["git_commit"], False)
    assert clean["git_dirty"] is False and "git_diff" not in clean
    (repo / "xsa" / "m.py").write_text("x = 2\n")
    (repo / "results" / "r.json").write_text("{}")
    dirty = records.code_provenance(records.git_state()["git_commit"], True)
    assert "+x = 2" in dirty["git_diff"] and "results" not in dirty["git_diff"]
