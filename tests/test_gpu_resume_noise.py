"""The quick check's resume part measures its own noise floor: on a GPU the same steps land a little
apart run to run (reductions summed in another order), so the tolerance comes from two identical
resumes, not from a fixed share of the steps' movement. Emulated on the CPU with gradient noise of
1e-6: a correct resume passes, one that drops Muon's momentum still fails."""

from pathlib import Path

import torch

import xsa.stack.checkpoint as ckpt
from xsa.gpu.parts import RESUME_MIN_TOL, RESUME_NOISE_MULT, Arm, Check, Timer, resume_part
from xsa.stack.optim import Muon

NOISE = 1e-6


def trained_check(tmp_path: Path) -> Check:
    """The dry check's XSA arm (eager: no compile here), six steps in, so the optimizers hold state."""
    c = Check(dry=True, out=tmp_path / "r.json", batch=4, rounds=1, say=lambda *a, **k: None)
    c.device = torch.device("cpu")
    cfg = c.config(xsa=True, real=True)
    c.arms["xsa"] = arm = Arm(cfg, c.device, False, Timer(c.device))
    data = c.data(cfg.device_batch_size, cfg)
    for it in range(6):
        arm(it, data, 2)
    return c


def noisy_gradients(arm: Arm, scale: float = NOISE, seed: int = 0) -> None:
    """Every gradient element times (1 + scale * N(0, 1)) before each optimizer step, as a GPU's
    reductions summed in another order would leave it; a zero gradient stays zero (a sum of nothing).
    The generator is the test's own: loading a checkpoint restores torch's, which would repeat the noise."""
    gen = torch.Generator().manual_seed(seed)
    for opt in arm.step.optimizers:
        def step(*args, _step=opt.step, _opt=opt, **kw):
            with torch.no_grad():
                for group in _opt.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            noise = 1 + scale * torch.randn(p.grad.shape, generator=gen)
                            p.grad.copy_(p.grad.float() * noise)
            return _step(*args, **kw)
        opt.step = step


def test_a_correct_resume_passes_under_gradient_noise(tmp_path):
    c = trained_check(tmp_path)
    noisy_gradients(c.arms["xsa"])
    r = resume_part(c)
    assert not r["bitwise_equal"] and r["noise_floor"] > 0  # the noise is there, and measured
    assert r["tolerance"] == max(RESUME_NOISE_MULT * r["noise_floor"], RESUME_MIN_TOL)
    assert r["ok"] and r["diff"] <= r["tolerance"] < r["lost_state_diff"], r


def test_a_resume_without_muons_momentum_fails_under_gradient_noise(tmp_path, monkeypatch):
    c = trained_check(tmp_path)
    noisy_gradients(c.arms["xsa"])
    real = ckpt.load_training_state

    def lose_momentum(run_dir, *, model, optimizers, config):
        out = real(run_dir, model=model, optimizers=optimizers, config=config)
        for opt in optimizers:
            if isinstance(opt, Muon):
                for state in opt.state.values():
                    del state["momentum_buffer"]
        return out
    monkeypatch.setattr(ckpt, "load_training_state", lose_momentum)
    r = resume_part(c)
    # the resume itself misses the tolerance its own noise floor sets, not only the control
    assert r["noise_floor"] > 0 and r["tolerance"] == max(RESUME_NOISE_MULT * r["noise_floor"], RESUME_MIN_TOL)
    assert not r["ok"] and r["diff"] > r["tolerance"], r
