"""One owner per run folder, and the quiet cases of a hostile user: a finished run resumed, a torn
log, stale data builds, a damaged validation shard, an unfinished run evaluated, a full disk,
impossible output places. All on the smoke preset."""

import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xsa.base import records
from xsa.stack.presets import make_config
from xsa.base.records import REPO_ROOT, read_json, read_jsonl
from xsa.base.runlock import RunFolderBusy, lock_path, own_run
from xsa.train import train

from conftest import QUIET

HOLD = ("import sys, time\nfrom xsa.base.runlock import own_run\n"
        "with own_run(sys.argv[1], 'training'):\n    print('held', flush=True)\n    time.sleep(60)\n")


def run(cfg, out, data, **kw):
    return train(cfg, out, data_dir=data, progress=False, **kw)


def holder(run_dir):
    """A process holding the run folder's lock as a training does, until it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_on_a_run_folder_stops_at_once_naming_the_holder(smoke_data, tmp_path):
    out = tmp_path / "r"
    proc = holder(out)
    try:
        t0 = time.time()
        with pytest.raises(RunFolderBusy, match=rf"in use by another process \(pid {proc.pid} .*training"):
            run(make_config("smoke", **QUIET), out, smoke_data, max_steps=2)
        assert time.time() - t0 < 30 and not out.exists()  # nothing written, no waiting
        with pytest.raises(RunFolderBusy):  # an evaluation or diagnostics never reads a folder in training
            with own_run(out, "CORE evaluation", shared=True):
                pass
    finally:
        proc.kill()
        proc.wait()
    # kill -9 released it: the folder is free again, with no stale lock to clear
    assert run(make_config("smoke", **QUIET), out, smoke_data, max_steps=2)["steps"] == 2
    assert lock_path(out).parent == out.parent  # beside the folder: --overwrite cannot delete it


def test_readers_share_a_folder(tmp_path):
    with own_run(tmp_path / "r", "CORE evaluation", shared=True), own_run(tmp_path / "r", "chat", shared=True):
        with pytest.raises(RunFolderBusy):
            with own_run(tmp_path / "r", "training"):
                pass


def test_the_cli_refuses_a_busy_folder_in_one_line(smoke_data, tmp_path):
    out = tmp_path / "r"
    proc = holder(out)
    try:
        res = subprocess.run([sys.executable, "-m", "xsa.train", "--preset", "smoke", "--alpha", "0.5", "--out",
                              str(out), "--max-steps", "1", "--no-progress", "--data-dir", str(smoke_data)],
                             capture_output=True, text=True, cwd=REPO_ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    finally:
        proc.kill()
        proc.wait()
    assert res.returncode == 2 and "is in use by another process" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_resuming_a_finished_run_changes_nothing(smoke_data, tmp_path):
    cfg = make_config("smoke", **QUIET)
    out = tmp_path / "r"
    first = run(cfg, out, smoke_data)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    again = run(cfg, out, smoke_data, resume=True)
    assert again == first
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_a_torn_last_line_is_reported_and_its_evaluation_redone(smoke_data, tmp_path, capsys):
    cfg = make_config("smoke", **QUIET)
    out = tmp_path / "r"
    run(cfg, out, smoke_data)
    metrics = out / "metrics.jsonl"
    whole = read_jsonl(metrics)
    metrics.write_text(metrics.read_text()[:-30])  # the last line (the evaluation at the horizon) torn
    capsys.readouterr()
    summary = run(cfg, out, smoke_data, resume=True)
    assert f"{metrics}:{len(whole)}: a torn last line" in capsys.readouterr().out
    redone = read_jsonl(metrics)
    assert [r["step"] for r in redone] == [r["step"] for r in whole]
    assert redone[-1]["val_bpb"] == whole[-1]["val_bpb"] == summary["val_bpb"]


def test_resume_refuses_a_doubled_log(smoke_data, tmp_path):
    cfg = make_config("smoke", eval_every=10, checkpoint_every=10)
    out = tmp_path / "r"
    run(cfg, out, smoke_data, max_steps=10)
    metrics = out / "metrics.jsonl"
    metrics.write_text(metrics.read_text() * 2)
    with pytest.raises(ValueError, match="metrics.jsonl: record .* has step 0"):
        run(cfg, out, smoke_data, resume=True)


def test_stale_build_folders_are_removed_by_the_next_build(tmp_path, capsys):
    from xsa.data.build import _remove_stale
    out = tmp_path / "smoke"
    for name in (".smoke.building-123", ".smoke.old-456"):
        (tmp_path / name / "shards").mkdir(parents=True)
    (tmp_path / ".other.building-1").mkdir()  # another subset's: not ours to remove
    _remove_stale(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.building-1"]
    assert "left by a build that was killed" in capsys.readouterr().out


def test_diagnostics_refuse_a_damaged_validation_shard(smoke_data, tmp_path):
    import shutil
    from xsa.diagnostics import validation_rows
    data = tmp_path / "data"
    shutil.copytree(smoke_data, data)
    shard = next((data / "shards").glob("val_*.bin"))
    raw = bytearray(shard.read_bytes())
    raw[100] ^= 1
    shard.write_bytes(bytes(raw))
    cfg = make_config("smoke", **QUIET)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps({"data_dir": str(data)}))
    with pytest.raises(ValueError, match=f"{shard}.*corrupt"):
        validation_rows(tmp_path / "run", cfg, 2, 1, "cpu")


def test_an_unfinished_run_is_labelled_and_a_list_out_is_refused_first(tmp_path):
    from xsa.evaluate.run import check_merge_target, trained_state
    (tmp_path / "summary.json").write_text(json.dumps({"steps": 2, "num_iterations": 30, "complete": False}))
    with pytest.warns(UserWarning, match="not trained to its horizon \\(step 2 of 30\\)"):
        assert trained_state(tmp_path) == {"step": 2, "num_iterations": 30, "complete": False}
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ValueError, match="list.json holds a JSON list"):
        check_merge_target(tmp_path / "list.json")


def test_a_full_disk_names_the_file(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(records.os, "fsync", full)
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(OSError, match=f"cannot write {tmp_path / 'summary.json'} \\(No space left on device\\)"):
        records.atomic_write_json(tmp_path / "summary.json", {"a": 1})
    assert read_json(tmp_path / "summary.json") == {}  # the old file intact
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temporary left


def test_out_under_a_regular_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    res = subprocess.run([sys.executable, "-m", "xsa.train", "--preset", "smoke", "--out",
                          str(tmp_path / "file" / "run"), "--max-steps", "1", "--no-progress"],
                         capture_output=True, text=True, cwd=REPO_ROOT)
    assert res.returncode == 2 and f"out: {tmp_path / 'file'} is a file" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare for a read-only mount")
def test_resume_on_a_read_only_disk_is_one_line_before_any_work(smoke_data, tmp_path):
    ro = tmp_path / "ro"
    run(make_config("smoke", eval_every=10, checkpoint_every=10), ro / "r", smoke_data, max_steps=10)
    before = sorted((p.name, p.read_bytes()) for p in (ro / "r").iterdir() if p.is_file())
    script = (f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} && exec {sys.executable} -m xsa.train "
              f"--preset smoke --out {ro / 'r'} --resume --no-progress --data-dir {smoke_data}")
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, cwd=REPO_ROOT)
    assert res.returncode == 2 and f"cannot write the lock of {ro / 'r'}" in res.stderr, res.stderr
    assert "Read-only file system" in res.stderr and "Traceback" not in res.stderr
    assert sorted((p.name, p.read_bytes()) for p in (ro / "r").iterdir() if p.is_file()) == before


def test_one_lock_per_folder_through_a_symlink_and_after_its_lock_file_is_deleted(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (tmp_path / "link").symlink_to(out)
    proc = holder(out)
    try:
        with pytest.raises(RunFolderBusy):  # the same folder by another path
            with own_run(tmp_path / "link", "training"):
                pass
        lock_path(out).unlink()  # the lock file deleted under its holder: the folder is still held
        with pytest.raises(RunFolderBusy):
            with own_run(out, "training"):
                pass
    finally:
        proc.kill()
        proc.wait()


def test_the_lock_file_never_follows_a_symlink_nor_truncates_another_file(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "r"
    lock_path(out).symlink_to(victim)
    with pytest.raises(ValueError, match="is a symlink, not a lock file"):
        with own_run(out, "training"):
            pass
    lock_path(out).unlink()
    lock_path(out).write_text("precious\n")  # a file this code did not write: locked, never rewritten
    with own_run(out, "training"):
        pass
    assert victim.read_text() == lock_path(out).read_text() == "precious\n"
    lock_path(out).unlink()
    os.link(victim, lock_path(out))  # a second name of another file
    with pytest.raises(ValueError, match="not a lock file"):
        with own_run(out, "training"):
            pass
    assert victim.read_text() == "precious\n"


def test_overwrite_moves_the_old_folder_aside_and_a_killed_writes_temporary_is_removed(smoke_data, tmp_path):
    from xsa.base.runlock import REPLACED
    out = tmp_path / "r"
    run(make_config("smoke", **QUIET), out, smoke_data, max_steps=2)
    old = (out / "config.json").read_bytes()
    (out / ".summary.json.x1y2.tmp").write_text("{")  # what a killed atomic write leaves
    run(make_config("smoke", xsa_alpha=1.0, **QUIET), out, smoke_data, max_steps=2, overwrite=True)
    aside = list((tmp_path / REPLACED).iterdir())
    assert len(aside) == 1 and (aside[0] / "config.json").read_bytes() == old  # kept, not deleted
    assert read_json(out / "config.json")["model"]["xsa_alpha"] == 1.0
    run(make_config("smoke", xsa_alpha=1.0, **QUIET), out, smoke_data, max_steps=3, resume=True)
    (out / ".metrics.jsonl.a.tmp").write_text("x")
    run(make_config("smoke", xsa_alpha=1.0, **QUIET), out, smoke_data, max_steps=4, resume=True)
    assert not list(out.glob(".*.tmp"))


def test_a_resume_on_data_changed_since_the_checkpoint_stops_naming_it(smoke_data, tmp_path):
    """The data rebuilt under a run (a shard changed and the manifest with it): the resume stops."""
    import hashlib
    data = tmp_path / "data"
    shutil.copytree(smoke_data, data)
    cfg = make_config("smoke", **{**QUIET, "eval_every": 10, "checkpoint_every": 10})
    out = tmp_path / "r"
    run(cfg, out, data, max_steps=10)
    shard = sorted((data / "shards").glob("train_*.bin"))[0]
    raw = bytearray(shard.read_bytes())
    raw[100] ^= 1
    shard.write_bytes(bytes(raw))
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["files"][f"shards/{shard.name}"]["sha256"] = hashlib.sha256(raw).hexdigest()
    (data / "manifest.json").write_text(json.dumps(manifest))
    before = (out / "metrics.jsonl").read_bytes()
    with pytest.raises(ValueError, match=f"the data in {data} changed since"):
        run(cfg, out, data, resume=True)
    assert (out / "metrics.jsonl").read_bytes() == before  # nothing was changed


def test_no_command_writes_a_record_over_another_kind(tmp_path, capsys):
    """CORE, diagnostics and throughput never write into a run folder's config, summary or
    provenance (through a symlink neither), nor over a record of another kind, --overwrite or not."""
    from xsa import diagnostics, throughput
    from xsa.evaluate.run import check_merge_target
    run_dir = tmp_path / "run"
    shutil.copytree(REPO_ROOT / "results" / "runs" / "cpu-w64-d4_xsa1_s3", run_dir)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    (tmp_path / "alias.json").symlink_to(run_dir / "summary.json")
    for name in ("config.json", "summary.json", "provenance.json", "diagnostics.json"):
        with pytest.raises(ValueError, match=f"{name}"):
            check_merge_target(run_dir / name)
    with pytest.raises(ValueError, match="summary record"):
        check_merge_target(tmp_path / "alias.json")
    for argv in (["--preset", "smoke", "--out", str(run_dir / "summary.json"), "--overwrite"],
                 ["--preset", "smoke", "--out", str(run_dir / "diagnostics.json"), "--overwrite"]):
        with pytest.raises(SystemExit) as e:
            throughput.main(argv)
        assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        diagnostics.main(["--run", str(run_dir), "--out", str(run_dir / "provenance.json"), "--overwrite"])
    assert e.value.code == 2 and "provenance record" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
    check_merge_target(run_dir / "eval.json")  # its own record: merged into, as before


def test_an_adaptive_shard_that_loses_a_run_to_another_goes_on(monkeypatch):
    """Two shards that pick the same pending run at once: the one that finds its folder taken as it starts
    skips it and trains the next, rather than stopping (a failure of a run nobody else holds still stops it)."""
    from types import SimpleNamespace
    from xsa import pipeline as P
    jobs = [SimpleNamespace(name=n, index=i, params={"out_dir": n}) for i, n in enumerate(("a", "b"))]
    taken, trained = set(), []

    def run_job(tag, job, ctx):
        if job.name == "a":
            taken.add("a")  # the other shard locked it first
            raise P.StageError("RunFolderBusy")
        trained.append(job.name)
        return job.name

    monkeypatch.setattr(P, "jobs_for", lambda stage, ctx: jobs)
    monkeypatch.setattr(P, "is_done", lambda job, ctx: job.name in trained)
    monkeypatch.setattr(P, "busy", lambda out_dir: out_dir in taken)
    monkeypatch.setattr(P, "run_job", run_job)
    monkeypatch.setattr(P, "redeclare", lambda ctx: True)
    ctx = SimpleNamespace(mine=lambda i: True, study=SimpleNamespace(name="t"))
    assert P.run_adaptive_train(ctx) == "b" and trained == ["b"]
    taken.clear()
    monkeypatch.setattr(P, "busy", lambda out_dir: False)  # a real failure: nobody holds the folder
    trained.clear()
    with pytest.raises(P.StageError):
        P.run_adaptive_train(ctx)
