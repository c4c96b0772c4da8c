"""A GPU run never falls back to the CPU: where torch cannot see or use the GPUs (a driver older than
its CUDA build, fewer GPUs than asked for, a build that cannot run on them), `python -m xsa.gpu_study`,
the pipeline's `--device cuda` and `make gpu-study` stop before any work with one line naming why;
every training and stage command they launch is told `--device cuda`. The GPU is emulated on the CPU
by replacing what torch reports."""

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import xsa.gpu_check as gc
import xsa.gpu_study as gs
import xsa.train as t
from xsa.pipeline import main as pipeline_main
from xsa.studies.registry import STUDIES

REPO = Path(__file__).resolve().parents[1]
TOO_OLD = ("CUDA initialization: The NVIDIA driver on your system is too old (found version 12020). Please "
           "update your GPU driver by downloading and installing a new version from the URL: "
           "http://www.nvidia.com/Download/index.aspx")


def no_gpu(monkeypatch):
    """A CUDA build whose driver is too old: torch warns once and reports no GPU."""
    def is_available():
        warnings.warn(TOO_OLD)
        return False
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", is_available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def gpus(monkeypatch, count: int, runs: bool = True):
    """A CUDA build that sees `count` GPUs; `runs=False`: one whose operations fail on them."""
    def op(device):
        if not runs:
            raise RuntimeError("CUDA error: no kernel image is available for execution on the device")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(gc, "tiny_op", op)
    monkeypatch.setattr(gc, "compiler_problems", lambda: [])


def launched(monkeypatch) -> list:
    ran = []
    monkeypatch.setattr(gs.subprocess, "run", lambda cmd: ran.append(cmd) or type("R", (), {"returncode": 0})())
    return ran


def refusal(capsys, call) -> str:
    """The one line a refused command writes; exit status 2, no traceback, nothing on stdout."""
    with pytest.raises(SystemExit) as e:
        call()
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_gpu_study_refuses_in_one_line_where_torch_sees_no_gpu(monkeypatch, capsys):
    no_gpu(monkeypatch)
    ran = launched(monkeypatch)
    for args in (["--study", "gpu", "--nproc", "8"], ["--study", "gpu"], ["--nproc", "8", "--check"]):
        err = refusal(capsys, lambda: gs.main(args))
        assert "cannot train on the GPU" in err and "driver on your system is too old (found version 12020)" in err
        assert "Please update" not in err  # torch's advice is left out: the line stays one line
    assert ran == []  # no torchrun started


def test_gpu_study_refuses_fewer_gpus_than_asked_and_a_build_that_cannot_run(monkeypatch, capsys):
    ran = launched(monkeypatch)
    gpus(monkeypatch, 4)
    err = refusal(capsys, lambda: gs.main(["--study", "gpu", "--nproc", "8"]))
    assert "sees 4 GPU(s), 8 asked for" in err
    gpus(monkeypatch, 8, runs=False)
    err = refusal(capsys, lambda: gs.main(["--study", "gpu", "--nproc", "8"]))
    assert "cannot run on cuda:0" in err and "no kernel image" in err
    assert ran == []


def test_every_run_is_launched_with_device_cuda(monkeypatch, capsys):
    gpus(monkeypatch, 8)
    ran = launched(monkeypatch)
    monkeypatch.setattr(gs, "finished_summary", lambda folder, cfg: None)
    assert gs.main(["--study", "gpu", "--nproc", "8", "--check"]) == 0 and ran == []
    assert "GPUs ok" in capsys.readouterr().out
    assert gs.main(["--study", "gpu", "--nproc", "8"]) == 0
    assert len(ran) == len(STUDIES["gpu"]().runs)
    seen = []
    monkeypatch.setattr(t, "train", lambda cfg, out, **kw: seen.append(kw["device"]) or
                        {"val_bpb": 0.0, "steps": 0, "tok_per_s": None})
    for cmd in ran:
        assert cmd[cmd.index("--device") + 1] == "cuda"
        t.main(cmd[cmd.index("xsa.train") + 1:])
    assert seen == ["cuda"] * len(ran)  # what the training itself is told


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_the_command_line_refuses_on_a_machine_without_a_gpu(tmp_path):
    """The real command on this CPU machine: one line, exit 2, no traceback, no torchrun."""
    proc = subprocess.run([sys.executable, "-m", "xsa.gpu_study", "--study", "gpu", "--nproc", "8"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot train on the GPU" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_training_told_cuda_refuses_on_a_machine_without_a_gpu(tmp_path, capsys):
    out = tmp_path / "run"
    err = refusal(capsys, lambda: t.main(["--preset", "smoke", "--out", str(out), "--device", "cuda"]))
    assert "no CUDA device" in err and not out.exists()


def test_pipeline_device_cuda_stops_before_any_stage(monkeypatch, tmp_path, capsys):
    no_gpu(monkeypatch)
    results = tmp_path / "results"
    code = pipeline_main(["--study", "smoke", "--stages", "validation", "data", "--device", "cuda",
                          "--results", str(results), "--paper", str(tmp_path / "paper")])
    out, err = capsys.readouterr()
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("pipeline stopped: --device cuda:") and "too old" in err
    assert not results.exists() and "study smoke" not in out  # no stage began


def _make_gpu_study(tmp_path, fail_check: bool) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`make gpu-study` with every python command replaced by a stub that logs its arguments."""
    log, stub = tmp_path / "ran.log", tmp_path / "py"
    stub.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n'
                    + ('case "$*" in *--check*) echo "no GPU" >&2; exit 2;; esac\n' if fail_check else "")
                    + "exit 0\n")
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")}
    out = subprocess.run(["make", "-o", ".venv/.xsa-installed", "gpu-study", f"PY={stub}", "NGPU=2"],
                         cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    return out, log.read_text().splitlines() if log.exists() else []


@pytest.mark.skipif(not shutil.which("make"), reason="no make")
def test_make_gpu_study_checks_the_gpus_first_and_tells_every_stage_cuda(tmp_path):
    out, ran = _make_gpu_study(tmp_path, fail_check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert ran[0] == "-m xsa.gpu_study --study gpu --nproc 2 --check"
    assert ran[1].startswith("-m xsa.pipeline --study gpu --device cuda --stages validation data")
    assert ran[2] == "-m xsa.gpu_study --study gpu --nproc 2"
    shards = sorted(ran[3:5])
    assert shards == [f"-m xsa.pipeline --study gpu --device cuda --stages train evaluate diagnostics throughput "
                      f"--shard {k}/2" for k in (0, 1)]
    assert ran[5:] == ["-m xsa.pipeline --study gpu --stages paper"]  # the paper needs no GPU


@pytest.mark.skipif(not shutil.which("make"), reason="no make")
def test_make_gpu_study_stops_where_the_gpu_check_fails(tmp_path):
    out, ran = _make_gpu_study(tmp_path, fail_check=True)
    assert out.returncode != 0 and "no GPU" in out.stderr
    assert ran == ["-m xsa.gpu_study --study gpu --nproc 2 --check"]  # no data, no training, no stage
