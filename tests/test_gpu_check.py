"""The GPU quick check (xsa/gpu_check.py, xsa/gpu/parts.py) can fail: its resume part goes through
the checkpoint code and rejects a resume that lost the optimizer state; bad arguments are exit-2
errors before any work; a dry run writes outside the repository."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import xsa.stack.checkpoint as ckpt
from xsa.gpu_check import main
from xsa.gpu.parts import Arm, Check, Timer, resume_part

REPO = Path(__file__).resolve().parents[1]


def _check(tmp_path) -> Check:
    c = Check(dry=True, out=tmp_path / "r.json", batch=4, rounds=1, say=lambda *a, **k: None)
    c.device = torch.device("cpu")
    cfg = c.config(xsa=True, real=True)
    c.arms["xsa"] = arm = Arm(cfg, c.device, False, Timer(c.device))  # eager: no compile in this test
    data = c.data(cfg.device_batch_size, cfg)
    for it in range(6):  # momentum and second moments built up
        arm(it, data, 2)
    return c


def test_resume_part_passes_and_fails_without_the_muon_state(tmp_path, monkeypatch):
    c = _check(tmp_path)
    good = resume_part(c)
    assert good["ok"] and good["bitwise_equal"] and good["lost_state_diff"] > good["tolerance"] > 0
    real = ckpt.load_training_state

    def lose_muon(run_dir, *, model, optimizers, config):
        out = real(run_dir, model=model, optimizers=optimizers, config=config)
        optimizers[-1].state.clear()  # Muon: the momentum and second moments lost
        return out
    monkeypatch.setattr(ckpt, "load_training_state", lose_muon)
    bad = resume_part(c)
    assert not bad["ok"] and bad["diff"] > bad["tolerance"]


@pytest.mark.parametrize("args, message", [
    (["--dry", "--batch", "-3"], "--batch: expected a positive whole number, got '-3'"),
    (["--dry", "--batch", "0"], "--batch: expected a positive whole number, got '0'"),
    (["--dry", "--rounds", "x"], "--rounds: expected a positive whole number"),
    (["--quick", "--dry", "--out", "/proc/xsa/quick.json"], "cannot write there"),
])
def test_bad_arguments_exit_2_before_any_work(args, message, capsys):
    t0 = time.perf_counter()
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert time.perf_counter() - t0 < 5  # refused before the check starts


def test_dry_run_writes_outside_the_repository_by_default(monkeypatch, tmp_path):
    import xsa.gpu_check as gc
    seen = {}
    monkeypatch.setattr(gc, "run_check", lambda **kw: seen.update(kw) or {"ok": True})
    monkeypatch.setattr(gc.tempfile, "gettempdir", lambda: str(tmp_path))
    with pytest.raises(SystemExit) as e:
        main(["--quick", "--dry"])  # the README's command, as written
    assert e.value.code == 0 and seen["dry"]
    assert seen["out"].is_relative_to(tmp_path) and not seen["out"].is_relative_to(REPO)


def test_help_names_the_modes():
    out = subprocess.run([sys.executable, "-m", "xsa.gpu_check", "--help"], capture_output=True, text=True,
                         cwd=REPO, timeout=60).stdout
    assert "--dry" in out and "--quick" in out and "resume" in out


@pytest.mark.parametrize("args", [["--dry-run", "results/runs"], ["--quick", "--dry", "results/estimates/default.json"]])
def test_the_check_refuses_a_tracked_folder_or_file_as_its_output(args):
    import subprocess
    before = subprocess.run(["git", "status", "--porcelain", "--", "results"], cwd=REPO, capture_output=True,
                            text=True).stdout
    r = subprocess.run(["bash", "scripts/gpu_check.sh", *args], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "holds files git tracks" in r.stderr
    assert subprocess.run(["git", "status", "--porcelain", "--", "results"], cwd=REPO, capture_output=True,
                          text=True).stdout == before
