"""Commands where their users run them: a bare GPU node (simulated on the CPU), a fresh clone, bad input.

Each case fails without its fix: the GPU study's launcher and its printed commands, `make setup`'s torch
build, `make study SHARDS=0`, `--shard 0/0`, an empty XSA_CACHE, gpu_check.sh through a symlink,
prereg on no records and on an impossible path, archive on an impossible path, decode_speed past the
rotary cache, ChatCORE with no reply tokens, a killed write's temporary file in ckpt/, and the paper
stage's executed notebook and lock.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import xsa.gpu_study as gs
from xsa.runs.layout import Layout
from xsa.studies.registry import STUDIES

from test_gpu_no_cpu_fallback import gpus, launched, refusal

REPO = Path(__file__).resolve().parents[1]


def refused(capsys, call) -> str:
    """The error line of a command-line refusal (argparse's: its usage, then one line): exit status 2,
    no traceback, nothing on stdout."""
    with pytest.raises(SystemExit) as e:
        call()
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and "Traceback" not in err, err
    return err.strip().splitlines()[-1]


has_make = pytest.mark.skipif(not shutil.which("make"), reason="no make")


# -----------------------------------------------------------------------------
# the GPU study from bare metal

def test_ranks_are_launched_by_this_interpreters_torch_distributed_run(monkeypatch, tmp_path):
    """No `torchrun` from PATH (a bare node has none of the project's): the interpreter's own launcher."""
    monkeypatch.setattr(gs, "default_layout", lambda name: Layout(tmp_path, tmp_path / "paper", name))
    for cmd in gs.commands(STUDIES["gpu"](), 8):
        assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"] and "torchrun" not in cmd
    bare = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}  # no .venv/bin on it
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--help"], env=bare, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "--nproc" in done.stdout


def test_a_bare_node_dry_run_checks_and_prints_from_the_interpreter(monkeypatch, tmp_path, capsys):
    """--check and --print on an 8-GPU node (simulated) with an empty results folder and no venv on PATH."""
    gpus(monkeypatch, 8)
    ran = launched(monkeypatch)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(gs, "default_layout", lambda name: Layout(tmp_path, tmp_path / "paper", name))
    assert gs.main(["--study", "gpu", "--nproc", "8", "--check"]) == 0 and "GPUs ok" in capsys.readouterr().out
    assert gs.main(["--study", "gpu", "--nproc", "8", "--print"]) == 0 and ran == []
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(STUDIES["gpu"]().runs)
    assert all(line.startswith(f"{sys.executable} -m torch.distributed.run --standalone") for line in lines)
    assert not any("--resume" in line for line in lines)


def test_print_shows_no_command_for_a_run_already_finished(monkeypatch, tmp_path):
    """A finished record whose summary hash predates a config field added since (as every committed
    default-study run): finished by value, as the pipeline judges it, so no `--resume` is printed."""
    study = STUDIES["gpu"]()
    monkeypatch.setattr(gs, "default_layout", lambda name: Layout(tmp_path, tmp_path / "paper", name))
    run = study.runs[0]
    folder = tmp_path / "runs" / run.run_id
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(run.config().to_dict()))
    (folder / "summary.json").write_text(json.dumps({"complete": True, "config_hash": "an older hash"}))
    cmds = gs.commands(study, 8)
    assert len(cmds) == len(study.runs) - 1 and not any(str(folder) in c for cmd in cmds for c in cmd)


def test_a_device_batch_that_does_not_divide_the_batch_is_refused(monkeypatch, capsys, tmp_path):
    gpus(monkeypatch, 8)
    ran = launched(monkeypatch)
    monkeypatch.setattr(gs, "default_layout", lambda name: Layout(tmp_path, tmp_path / "paper", name))
    err = refusal(capsys, lambda: gs.main(["--study", "gpu", "--nproc", "8", "--device-batch-size", "3"]))
    assert "d12_base_s0" in err and "3 rows" in err and ran == []


def _make(tmp_path, target: str, *args, nvidia: bool | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`make TARGET` with python replaced by a stub that logs its arguments (and an nvidia-smi that lists
    one GPU, none, or is absent)."""
    log, stub, bin_ = tmp_path / "ran.log", tmp_path / "py", tmp_path / "bin"
    stub.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexit ${{STUB_EXIT:-0}}\n')
    stub.chmod(0o755)
    bin_.mkdir(exist_ok=True)
    if nvidia is not None:
        smi = bin_ / "nvidia-smi"
        smi.write_text("#!/bin/sh\n" + ('echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n' if nvidia else "exit 9\n"))
        smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")}
    env["PATH"] = f"{bin_}:{env['PATH']}"
    out = subprocess.run(["make", target, f"PY={stub}", *args], cwd=REPO, capture_output=True, text=True, env=env,
                         timeout=120)
    return out, log.read_text().splitlines() if log.exists() else []


@has_make
@pytest.mark.parametrize("gpu", [True, False])
def test_setup_installs_the_pinned_torch_build_the_machine_has_and_says_which(tmp_path, gpu):
    out, ran = _make(tmp_path, "setup", f"STAMP={tmp_path / 'stamp'}", nvidia=gpu)
    assert out.returncode == 0, out.stdout + out.stderr
    torch_lines = [r for r in ran if r.startswith("-m pip install") and "torch" in r]
    assert torch_lines == (["-m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"] if gpu
                           else ["-m pip install torch==2.13.0"])
    assert ran.index(torch_lines[0]) < ran.index("-m pip install -e .[test]")  # first, so pip keeps it
    assert ("CUDA build" if gpu else "CPU build") in out.stdout


# -----------------------------------------------------------------------------
# counts and shards

@has_make
@pytest.mark.parametrize("target", ["study", "paper"])
def test_make_refuses_zero_shards_before_any_work(tmp_path, target):
    out, ran = _make(tmp_path, target, "SHARDS=0", "-o", ".venv/.xsa-installed", "-o", "tcmalloc", "-o", "browser")
    assert out.returncode != 0 and "SHARDS='0' must be at least 1" in out.stderr
    assert ran == []  # no stage, no --status loop


def test_shard_zero_of_zero_is_refused_in_one_line(capsys):
    from xsa.pipeline import main
    for args in (["--shard", "0/0", "--status"], ["--shard", "0/0"]):
        err = refused(capsys, lambda: main(["--study", "smoke", *args]))
        assert "--shard" in err and "0/0" in err


def test_an_empty_xsa_cache_is_unset(monkeypatch, tmp_path):
    from xsa.base.common import cache_dir
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XSA_CACHE", "")
    assert cache_dir() == tmp_path / ".cache" / "xsa"
    monkeypatch.setenv("XSA_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"


# -----------------------------------------------------------------------------
# writing where it must not

@pytest.mark.skipif(not shutil.which("git"), reason="no git")
def test_gpu_check_refuses_a_symlink_to_a_tracked_folder(tmp_path):
    link = tmp_path / "looks-new"
    link.symlink_to(REPO / "paper")
    done = subprocess.run(["bash", "scripts/gpu_check.sh", "--dry-run", str(link)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "holds files git tracks" in done.stderr
    assert not (REPO / "paper" / "nvidia-smi.txt").exists()


def test_prereg_on_no_records_is_refused_not_written_as_nan_hours(tmp_path, capsys):
    from xsa.prereg import main
    (tmp_path / "runs").mkdir()
    for study in ("factorial", "robust"):
        err = refused(capsys, lambda: main(["--study", study, "--results", str(tmp_path), "--out",
                                            str(tmp_path / "p.md")]))
        assert "no records to estimate from" in err
    assert not (tmp_path / "p.md").exists()


@pytest.mark.parametrize("out", ["/proc/xsa-57.md", "/proc/self/xsa-57.md"])
def test_prereg_to_an_impossible_path_is_one_line(out, capsys):
    from xsa.prereg import main
    err = refused(capsys, lambda: main(["--study", "robust", "--out", out]))
    assert out in err


def test_archive_to_an_impossible_path_is_one_line(capsys):
    from xsa.archive import main
    err = refused(capsys, lambda: main(["--commit", "30bc3ae", "--results", "/proc/xsa-57"]))
    assert "/proc/xsa-57" in err


# -----------------------------------------------------------------------------
# evaluation input

def test_decode_speed_past_the_rotary_cache_is_refused_naming_tokens(capsys):
    from xsa.evaluate.decode_speed import main
    err = refused(capsys, lambda: main(["--preset", "smoke", "--questions", "1", "--tokens", "100000",
                                        "--device", "cpu"]))
    assert "--tokens 100000" in err and "rotary cache" in err


def test_chatcore_with_no_reply_tokens_is_refused_naming_gen_tokens(tmp_path):
    from xsa.evaluate.chat import evaluate_chatcore
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="gen_tokens"):
            evaluate_chatcore(None, None, tmp_path, 64, gen_tokens=bad)


# -----------------------------------------------------------------------------
# interrupted writes

def test_a_killed_writes_temporary_in_ckpt_is_removed_when_the_run_is_resumed(smoke_data, tmp_path):
    from conftest import QUIET
    from xsa.stack.presets import make_config
    from xsa.train import train
    out = tmp_path / "r"
    cfg = make_config("smoke", **QUIET)
    train(cfg, out, data_dir=smoke_data, max_steps=2, progress=False)
    left = [out / "ckpt" / ".state.pt.k1ll.tmp", out / ".summary.json.x.tmp"]
    for p in left:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"half a file")
    train(cfg, out, data_dir=smoke_data, max_steps=3, resume=True, progress=False)
    assert not any(p.exists() for p in left)


def test_the_executed_notebook_is_replaced_whole_never_written_in_place(tmp_path, monkeypatch):
    """papermill writes its output as cells run: into a temporary file, renamed over the record, so a
    build killed half-way leaves the record (the paper's is tracked) as it was."""
    from types import SimpleNamespace

    import papermill as pm

    from xsa import pipeline
    from xsa.runs.layout import NOTEBOOKS
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / NOTEBOOKS["paper"]).write_text("{}")
    record = tmp_path / "executed" / "05_paper.ipynb"
    record.parent.mkdir()
    record.write_text("the committed notebook")
    job = SimpleNamespace(stage="paper", name="paper", params={}, inputs=lambda: "x")
    ctx = SimpleNamespace(notebooks=tmp_path / "notebooks", record=lambda job: record)
    written = []

    def killed(notebook, output, **kw):  # a kill after papermill's first write of its output
        written.append(output)
        Path(output).write_text("{half")
        raise KeyboardInterrupt
    monkeypatch.setattr(pm, "execute_notebook", killed)
    monkeypatch.setattr(pipeline, "check_parameters", lambda job, nb: None)
    with pytest.raises(KeyboardInterrupt):
        pipeline.execute(job, ctx)
    assert record.read_text() == "the committed notebook" and Path(written[0]) != record
    assert Path(written[0]).parent == record.parent and not list(record.parent.glob(".*.tmp"))


def test_the_executed_notebook_names_its_own_path_not_the_temporary_one(tmp_path, monkeypatch):
    """A whole run through the temporary file: the record says where it is (the committed notebook's
    metadata does not change from build to build)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook
    from types import SimpleNamespace

    import papermill as pm

    from xsa import pipeline
    from xsa.runs.layout import NOTEBOOKS
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / NOTEBOOKS["paper"]).write_text("{}")
    record = tmp_path / "executed" / "05_paper.ipynb"
    record.parent.mkdir()
    job = SimpleNamespace(stage="paper", name="paper", params={}, inputs=lambda: "x", outputs=[])

    def run(notebook, output, **kw):  # what papermill writes: the notebook with its output path in it
        nb = new_notebook(cells=[new_code_cell("x = 1")], metadata={"papermill": {"output_path": output}})
        nbformat.write(nb, output)
    monkeypatch.setattr(pm, "execute_notebook", run)
    monkeypatch.setattr(pipeline, "check_parameters", lambda job, nb: None)
    pipeline.execute(job, SimpleNamespace(notebooks=tmp_path / "notebooks", record=lambda job: record))
    meta = nbformat.read(record, as_version=4).metadata
    assert ".tmp" not in meta["papermill"]["output_path"] and not list(record.parent.glob(".*.tmp"))


def test_a_second_paper_build_stops_at_once_naming_the_first(tmp_path):
    from xsa.pipeline import StageError, paper_lock
    paper = tmp_path / "paper"
    code = ("import sys\nsys.path.insert(0, %r)\nfrom xsa.pipeline import paper_lock\nfrom pathlib import Path\n"
            "with paper_lock(Path(%r)):\n    print('held', flush=True)\n    sys.stdin.read()\n") % (str(REPO), str(paper))
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StageError, match="stage paper: .* in use by another process"):
            with paper_lock(paper):
                pass
    finally:
        holder.communicate("", timeout=60)
    with paper_lock(paper):  # free again once the first has ended
        pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_the_gpu_studys_print_starts_with_the_interpreter_on_the_command_line(tmp_path):
    """The real command: `--print` on this CPU machine (--nproc given, no GPU check) prints commands
    that start with the interpreter."""
    done = subprocess.run([sys.executable, "-m", "xsa.gpu_study", "--study", "gpu", "--nproc", "8", "--print"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert all(line.startswith(sys.executable) for line in done.stdout.splitlines() if "xsa.train" in line)
