"""The XSA cost benchmark (xsa/throughput.py) and the GPU check script: structure, never timings."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from xsa.checks import schemas
from xsa.throughput import copy_task_batch, main, overhead_stats

REPO = Path(__file__).resolve().parent.parent
PINNED = {"baseline_tok_per_s", "xsa_tok_per_s", "overhead_ratio", "overhead_ci95", "device"}


def test_overhead_of_paired_step_times():
    base = [1.0, 2.0, 1.0, 2.0, 1.5]
    stats = overhead_stats(base, [1.1 * t for t in base])  # every xsa step 10% slower than its pair
    assert stats["overhead_ratio"] == pytest.approx(0.1)
    assert stats["paired_ratio_median"] == pytest.approx(0.1)
    assert stats["paired_ratio_quartiles"] == pytest.approx([0.1, 0.1])
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
    from xsa.studies.registry import xsa_pair
    from xsa.throughput import run_throughput
    r = run_throughput("smoke", steps=1, warmup=0, device="cpu", threads=1, progress=False,
                       out=tmp_path / "tp.json")
    pair = xsa_pair("smoke")
    assert r["runs"] == {"baseline": pair.a.run(0).run_id, "xsa": pair.b.run(0).run_id}
    assert r["model"]["xsa_layers"] == "none" and r["xsa_arm"]["xsa_layers"] == "all"
    # each arm in full: its name, its overrides and every attention field (variant and gate included)
    assert r["arm_specs"]["xsa"] == dict(arm=pair.b.name, overrides=dict(pair.b.overrides), xsa_alpha=1.0,
                                         xsa_layers="all", xsa_value="mixed", xsa_variant="xsa", xsa_gate=False,
                                         attn_gate=False, attn_sink=False)
    assert r["arm_specs"]["baseline"]["arm"] == pair.a.name
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
    from xsa.base.common import datasheet_peak_flops, mfu
    assert datasheet_peak_flops(torch.device("cpu")) is None
    for name, peak in [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H200", 989e12),
                       ("NVIDIA H200 NVL", 836e12), ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA GeForce GTX 1080", None)]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, n=name: n)
        assert datasheet_peak_flops(torch.device("cuda")) == peak, name
    # one MFU, two peaks: the measured one (about 790 TFLOP/s on an H200) and the datasheet's 989
    assert mfu(1e9, 4e5, 1.0, 790e12) == pytest.approx(1e9 * 4e5 / 790e12)
    assert mfu(1e9, 4e5, 1.0, None) is None


def test_gpu_quick_check_dry_mode(tmp_path):
    """The GPU quick check's parts on a CPU (tiny shapes, bf16 autocast, the XSA arm compiled), through the script."""
    out = tmp_path / "quick.json"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--quick", "--dry", str(out)],
                          capture_output=True, text=True, timeout=480, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert schemas.check_file("gpu_check", out) == []  # the fresh record passes its schema
    assert r["complete"] and r["ok"] and r["dry"]
    parts = r["parts"]
    assert set(parts) == {"versions", "compile", "steps", "precision", "sdpa", "timing", "xsa_cos", "resume",
                          "memory", "decode"}
    assert all(p["ok"] for p in parts.values()), {k: p.get("error") for k, p in parts.items()}
    assert parts["versions"]["matmul_peak_flops"] > 0 and parts["versions"]["datasheet_peak_flops"] is None
    assert parts["compile"]["graphs_compiled"] >= 1  # the dry mode compiles the XSA arm
    assert len(set(parts["steps"]["lr_mults"])) == 4 and parts["steps"]["new_graphs"] in (0, None)
    assert parts["precision"]["loss_diff"] < parts["precision"]["loss_tol"]
    assert parts["sdpa"]["backend"] in ("flash", "efficient", "cudnn", "math")
    timing = parts["timing"]
    assert timing["micro_batches"] == 2 and timing["baseline_tok_per_s"] > 0 and timing["xsa_mfu"] > 0
    assert 0 < timing["xsa_optimizer_s"] < timing["xsa_step_s"]
    assert max(parts["xsa_cos"]["mean_abs_cos_per_layer"]) < 1e-3
    resume = parts["resume"]
    assert resume["bitwise_equal"] and resume["tolerance"] < resume["lost_state_diff"]
    decode = parts["decode"]  # fp32 on a CPU: a batched reply is the one the question gets alone
    assert decode["replies_agree"] == 1.0 and decode["tokens_per_s_batched"] > 0
    again = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--quick", "--dry", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "never overwritten" in again.stderr


def test_gpu_quick_check_needs_a_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from xsa.gpu_check import main as quick_main
    with pytest.raises(SystemExit) as e:
        quick_main(["--quick"])
    assert e.value.code == 2 and "--dry" in capsys.readouterr().err


BLOCKER = """
import importlib.machinery, sys
class Block:  # these packages' imports fail, as on a server that lacks them
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"pyarrow", "yaml", "rustbpe", "filelock", "pandas", "matplotlib", "papermill"}:
            return importlib.machinery.ModuleSpec(name, self)
    def create_module(self, spec):
        raise ImportError("not installed here: " + spec.name)
    def exec_module(self, module):
        pass
sys.meta_path.insert(0, Block())
"""


def test_training_and_benchmark_need_only_torch_numpy_tiktoken_tqdm(smoke_data, tmp_path):
    """A server with its own torch gets numpy, tiktoken and tqdm, nothing else: training on built
    data and the benchmark still run (the builder's and the evaluation's imports stay lazy)."""
    code = BLOCKER + f"""
import torch
torch.set_num_threads(1)
from xsa.stack.presets import make_config
from xsa.train import train
from xsa.throughput import run_throughput
s = train(make_config("smoke", eval_every=1000, checkpoint_every=1000), {str(tmp_path / "r")!r},
          data_dir={str(smoke_data)!r}, max_steps=2, progress=False)
assert s["steps"] == 2
run_throughput("smoke", steps=1, warmup=0, device="cpu", threads=1, progress=False)
print("ran")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr[-3000:]


def test_command_compares_two_arbitrary_configs(tmp_path):
    """--set: a field of both arms; --vs: the baseline against itself plus a field (not XSA)."""
    out = tmp_path / "vs.json"
    main(["--preset", "smoke", "--steps", "2", "--warmup", "0", "--device", "cpu", "--threads", "1",
          "--set", "diag_every=2", "--vs", "loss_chunk=100", "--out", str(out)])
    r = json.loads(out.read_text())
    assert r["runs"] == {"baseline": "smoke_base-diag2_s0", "xsa": "smoke_base-diag2-lchunk100_s0"}
    assert r["arm_overrides"] == {"baseline": {"diag_every": 2}, "xsa": {"diag_every": 2, "loss_chunk": 100}}
    assert r["xsa_arm"]["xsa_layers"] == "none" and len(r["paired_ratio_quartiles"]) == 2
    for bad in (["--vs", "loss_chunk"], ["--vs", "loss_chunk=0"], ["--set", "no_such_field=1"]):
        with pytest.raises(SystemExit):
            main(["--preset", "smoke", "--steps", "1", "--out", str(tmp_path / "x.json"), *bad])
