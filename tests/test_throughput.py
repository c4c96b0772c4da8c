"""The XSA cost benchmark (xsa/throughput.py) and the GPU check script: structure, never timings."""

import json
import subprocess
from pathlib import Path

import pytest
import torch

from xsa.throughput import copy_task_batch, main, overhead_stats

REPO = Path(__file__).resolve().parent.parent
PINNED = {"baseline_tok_per_s", "xsa_tok_per_s", "overhead_ratio", "overhead_ci95", "device"}


def test_overhead_of_paired_step_times():
    base = [1.0, 2.0, 1.0, 2.0, 1.5]
    stats = overhead_stats(base, [1.1 * t for t in base])  # every xsa step 10% slower than its pair
    assert stats["overhead_ratio"] == pytest.approx(0.1)
    assert stats["paired_ratio_median"] == pytest.approx(0.1)
    lo, hi = stats["overhead_ci95"]
    assert lo <= 0.1 + 1e-9 and hi >= 0.1 - 1e-9 and hi - lo < 0.5
    assert overhead_stats(base, [1.1 * t for t in base]) == stats  # fixed bootstrap seed


def test_copy_task_repeats_the_first_half():
    x, y = copy_task_batch(torch.Generator().manual_seed(0), 3, 10, 50, "cpu")
    seq = torch.cat([x, y[:, -1:]], dim=1)  # the 11 tokens behind x and y
    assert x.shape == y.shape == (3, 10) and torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(seq[:, 6:], seq[:, :5]) and int(x.max()) < 50


def test_command_runs_at_smoke_and_writes_pinned_keys(tmp_path, capsys):
    out = tmp_path / "tp.json"
    threads = torch.get_num_threads()
    main(["--preset", "smoke", "--steps", "3", "--warmup", "1", "--train-steps", "1", "--device", "cpu",
          "--threads", "1", "--out", str(out)])
    assert torch.get_num_threads() == threads  # restored
    r = json.loads(out.read_text())
    assert r["threads"] == 1 and len(r["cpu_time_overhead_ci95"]) == 2
    assert PINNED <= set(r)
    assert r["preset"] == "smoke" and r["device"].startswith("cpu") and r["measured_steps"] == 3
    assert r["baseline_tok_per_s"] > 0 and r["xsa_tok_per_s"] > 0 and r["matmul_peak_flops"] > 0
    assert len(r["overhead_ci95"]) == 2 and r["overhead_ci95"][0] <= r["overhead_ci95"][1]
    for arm in ("baseline", "xsa"):
        assert len(r["arms"][arm]["step_times_s"]) == 3
        assert len(r["loss_curves"][arm]) == 5  # warm-up + measured + training steps
    assert r["peak_mem_bytes"] > 0 and 0 < r["baseline_mfu"] < 1
    assert r["datasheet_peak_flops"] is None and r["baseline_mfu_datasheet"] is None  # CPUs have no datasheet
    assert r["provenance"]["config_hash"] and r["provenance"]["xsa_config_hash"] != r["provenance"]["config_hash"]
    assert "overhead" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # results are never overwritten
        main(["--preset", "smoke", "--out", str(out)])


def test_command_names_a_bad_preset(capsys):
    with pytest.raises(SystemExit):
        main(["--preset", "d13"])
    assert "d13" in capsys.readouterr().err


def test_gpu_check_dry_run(tmp_path):
    out = tmp_path / "gpu"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("throughput_d12", "throughput_d24"):
        r = json.loads((out / f"{name}.json").read_text())
        assert PINNED <= set(r) and r["preset"] == "smoke"
    assert (out / "nvidia-smi.txt").exists()
    again = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", str(out)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already holds results" in again.stderr


def test_notebook_is_stored_clean_and_runs(tmp_path):
    import nbformat
    import papermill as pm
    path = REPO / "notebooks" / "04_throughput.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    out = tmp_path / "tp.json"
    pm.execute_notebook(str(path), str(tmp_path / "out.ipynb"), kernel_name="python3", progress_bar=False,
                        parameters=dict(preset="smoke", steps=2, warmup=1, device="cpu", out=str(out),
                                        out_dir=str(tmp_path)))
    assert PINNED <= set(json.loads(out.read_text()))
    assert (tmp_path / "throughput_smoke.png").exists() and (tmp_path / "throughput_smoke.svg").exists()


def test_benchmark_arms_are_the_study_runs(tmp_path):
    """The baseline arm is the study's baseline (no XSA layer at all), not XSA at alpha 0."""
    from xsa.studies import xsa_pair
    from xsa.throughput import run_throughput
    r = run_throughput("smoke", steps=1, warmup=0, device="cpu", threads=1, progress=False,
                       out=tmp_path / "tp.json")
    pair = xsa_pair("smoke")
    assert r["runs"] == {"baseline": pair.a.run(0).run_id, "xsa": pair.b.run(0).run_id}
    assert r["model"]["xsa_layers"] == "none" and r["xsa_arm"]["xsa_layers"] == "all"
    assert r["provenance"]["config_hash"] == pair.a.config().config_hash()
    assert json.loads((tmp_path / "tp.json").read_text())["complete"] is True


def test_gpu_check_names_missing_prerequisites():
    """On a CPU-only machine the check stops before any work and says what a GPU server needs."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--prereq"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "missing: a CUDA build of torch" in proc.stdout


def test_datasheet_peaks_by_device_name(monkeypatch):
    from xsa.common import datasheet_peak_flops, mfu
    assert datasheet_peak_flops(torch.device("cpu")) is None
    for name, peak in [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H200", 989e12),
                       ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA GeForce GTX 1080", None)]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, n=name: n)
        assert datasheet_peak_flops(torch.device("cuda")) == peak, name
    # one MFU, two peaks: the measured one (about 790 TFLOP/s on an H200) and the datasheet's 989
    assert mfu(1e9, 4e5, 1.0, 790e12) == pytest.approx(1e9 * 4e5 / 790e12)
    assert mfu(1e9, 4e5, 1.0, None) is None
