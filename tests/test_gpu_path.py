"""The CUDA code path, run on a CPU: `gpu_path=True` turns on what CUDA always gets (torch.compile of
the model and bf16 autocast, xsa/stack/step.py Precision). The smoke preset trains through it, checkpoints,
resumes bit for bit, lands near the fp32 run, and keeps XSA's output orthogonal to the token's value
under autocast. This catches a graph break, a dtype mismatch or a recompile per step before a GPU
user does."""

import pytest
import torch
import torch.nn.functional as F

from xsa.stack.presets import make_config
from xsa.stack.attention import xsa_project
from xsa.stack.model import GPT
from xsa.base.records import read_jsonl
from xsa.stack.step import Precision
from xsa.train import train

from conftest import QUIET, kill_during

GPU = dict(gpu_path=True, xsa_alpha=1.0, **QUIET)


def _run(cfg, out, data, **kw):
    return train(cfg, out, data_dir=data, progress=False, **kw)


def test_precision_policy():
    cpu = Precision.of(torch.device("cpu"), make_config("smoke"))
    emulated = Precision.of(torch.device("cpu"), make_config("smoke", gpu_path=True))
    assert (cpu.autocast, cpu.compile) == (None, False)
    assert (emulated.autocast, emulated.compile) == (torch.bfloat16, True)


def test_xsa_is_orthogonal_under_autocast():
    # bf16 inputs, autocast on: the reductions and the subtraction run in fp32, only z is rounded
    g = torch.Generator().manual_seed(0)
    y = torch.randn(2, 64, 4, 32, generator=g).bfloat16()
    v = (y.float() * 3 + 0.1 * torch.randn(2, 64, 4, 32, generator=g)).bfloat16()  # y nearly parallel to v
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = xsa_project(y, v, 1.0)
    assert z.dtype == torch.bfloat16
    cos = F.cosine_similarity(z.float(), v.float(), dim=-1).abs().max().item()
    assert cos < 1e-2  # what is left after cancelling ~97% of y is rounded to bf16 once
    # and in a whole model under the emulated path, per layer, positions >= 1
    torch.manual_seed(0)
    model = GPT(make_config("smoke", xsa_alpha=1.0).model)
    model.init_weights()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    for block in model.blocks:
        block.attn.capture = {}
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        model(torch.randint(0, 2048, (2, 64)))
    for block in model.blocks:
        cap = block.attn.capture
        cos = F.cosine_similarity(cap["z"][:, 1:].float(), cap["v"].transpose(1, 2)[:, 1:].float(), dim=-1)
        assert cos.abs().mean().item() < 1e-3 and cos.abs().max().item() < 2e-2


# The smoke preset's own learning rates (nanochat's base LRs, unscaled) make its 30 steps chaotic: the
# fp32 eager run spikes from 7.10 to 9.65 on one step, and whether a bf16 run spikes too depends on the
# CPU's bf16 kernels, so a comparison there decides nothing about precision. At these lower rates both
# runs fall smoothly (7.62 -> about 6.5) and land within 0.002 bpb of each other on this machine.
STABLE = dict(matrix_lr=0.01, embedding_lr=0.1, unembedding_lr=0.004, scalar_lr=0.1)


@pytest.mark.slow
def test_gpu_path_trains_resumes_and_matches_fp32(smoke_data, tmp_path):
    gpu = {k: v for k, v in GPU.items() if k != "checkpoint_every"}
    cfg = make_config("smoke", checkpoint_every=10, **gpu, **STABLE)
    full = _run(cfg, tmp_path / "full", smoke_data)
    assert full["complete"] and full["steps"] == cfg.num_iterations
    losses = [r["train_loss"] for r in read_jsonl(tmp_path / "full" / "metrics.jsonl") if "train_loss" in r]
    assert all(torch.isfinite(torch.tensor(losses)))
    # it learns: the last five steps' mean loss well under the first five's (7.58 -> about 6.4)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5

    # killed at update 16 (after the step-10 checkpoint), then resumed: the same final weights
    kill_during(cfg, tmp_path / "killed", smoke_data, step=16)
    resumed = _run(cfg, tmp_path / "killed", smoke_data, resume=True)
    assert resumed["final_weights_sha256"] == full["final_weights_sha256"]

    # the fp32 eager run of the same config lands close: bf16 rounding over 30 smooth steps moves
    # val bpb by about 0.002 here; 0.03 leaves room for other CPUs' bf16 kernels, and is still well
    # under the 1.0 bpb that a diverged run (as at the preset's own rates) is off by
    fp32 = _run(make_config("smoke", xsa_alpha=1.0, **QUIET, **STABLE), tmp_path / "fp32", smoke_data)
    assert abs(full["val_bpb"] - fp32["val_bpb"]) < 0.03
