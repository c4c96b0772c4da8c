"""Muon's orthogonalisation, the Muon update, and the optimizer split (xsa/stack/optim.py)."""

import numpy as np
import pytest
import torch

from xsa.stack.presets import make_config
from xsa.stack.model import GPT
from xsa.stack.optim import (POLAR_EXPRESS_COEFFS, QUINTIC_COEFFS, Muon, build_optimizers, normuon_scale,
                        orthogonalize)

SCHEDULES = {"quintic": ([QUINTIC_COEFFS] * 5, 1.0), "polar_express": (POLAR_EXPRESS_COEFFS, 1.01)}


def scalar_map(s: np.ndarray, schedule: str) -> np.ndarray:
    """What 5 steps do to a singular value s of the Frobenius-normalised input (float64)."""
    coeffs, scale = SCHEDULES[schedule]
    s = s / scale
    for a, b, c in coeffs:
        s = a * s + b * s**3 + c * s**5
    return s


def band(schedule: str, lo: float = 1e-2) -> tuple[float, float]:
    """The range of the scalar map over normalised singular values in [lo, 1]."""
    out = scalar_map(np.logspace(np.log10(lo), 0, 200_001), schedule)
    return out.min(), out.max()


def test_expected_bands():
    # (f) the bands the two schedules are designed to land in, for inputs not far from full rank:
    # the quintic trades accuracy for speed (singular values ~0.68..1.13, Keller Jordan's Muon),
    # Polar Express is minimax-optimal for 5 steps and lands tighter around 1 (~0.86..1.14)
    q_lo, q_hi = band("quintic")
    p_lo, p_hi = band("polar_express")
    assert 0.67 < q_lo < 0.69 and 1.13 < q_hi < 1.14
    assert 0.85 < p_lo < 0.87 and 1.14 < p_hi < 1.15
    assert p_hi - p_lo < q_hi - q_lo


@pytest.mark.parametrize("schedule", ["quintic", "polar_express"])
@pytest.mark.parametrize("shape", [(64, 256), (256, 64), (96, 384)])
def test_singular_values_in_band(schedule, shape):
    # (f) a random Gaussian matrix has normalised singular values well above 1e-2 at these aspect
    # ratios, so after orthogonalisation every singular value must sit inside the schedule's band
    G = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    s = torch.linalg.svdvals(orthogonalize(G, 5, schedule)).double()
    lo, hi = band(schedule)
    assert s.min() >= lo - 1e-4 and s.max() <= hi + 1e-4, (s.min().item(), s.max().item())


@pytest.mark.parametrize("schedule", ["quintic", "polar_express"])
def test_orthogonalize_is_polynomial_in_singular_values(schedule):
    # the iteration keeps the singular vectors and maps each singular value through the scalar
    # polynomial: compare against U f(S) V^T from an SVD, on an ill-conditioned square matrix
    gen = torch.Generator().manual_seed(1)
    U, _ = torch.linalg.qr(torch.randn(48, 48, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(48, 48, generator=gen, dtype=torch.float64))
    S = torch.logspace(0, -3, 48, dtype=torch.float64)
    G = (U * S) @ V.T
    S_norm = (S / S.norm()).numpy()
    expected = (U * torch.from_numpy(scalar_map(S_norm, schedule))) @ V.T
    got = orthogonalize(G.float(), 5, schedule).double()
    assert (got - expected).abs().max() < 1e-4


def test_orthogonalize_rejects_unknown_schedule():
    with pytest.raises(ValueError, match="schedule"):
        orthogonalize(torch.randn(4, 4), 5, "cubic")


PLAIN = dict(muon_eq=False, muon_plus=False, beta2=None)  # plain Muon: none of nanochat's three additions


def test_muon_first_step_and_cautious_decay():
    torch.manual_seed(0)
    W = torch.nn.Parameter(torch.randn(32, 8))  # tall: lr scaled by sqrt(32/8) = 2
    W0 = W.detach().clone()
    g = torch.randn(32, 8)
    W.grad = g.clone()
    lr, wd = 0.1, 0.5
    Muon([W], lr=lr, momentum=0.9, weight_decay=wd, **PLAIN).step()
    # first step: buf = 0.1 g, Nesterov mixes g and buf -> a positive multiple of g, whose
    # orthogonalisation equals that of g (it normalises the scale away); as nanochat, the decay
    # uses the scaled lr too: W - lr' u - lr' wd W [u W >= 0], lr' = 2 lr
    u = orthogonalize(g, 5, "polar_express")
    mask = (u * W0 >= 0).float()
    expected = W0 - 2 * lr * u - 2 * lr * wd * W0 * mask
    assert torch.allclose(W.detach(), expected, atol=1e-6)
    assert 0 < mask.mean() < 1  # both decayed and protected entries occur


def test_normuon_scale_by_hand():
    # a tall update whose rows have mean squares 4, 1 and 0.25: after the first step (buffer
    # 0.1 * v_mean with beta2 = 0.9) each row is divided by its root mean square, then the whole
    # update is rescaled to keep its Frobenius norm
    u = torch.tensor([[2.0, 2.0], [1.0, -1.0], [0.5, 0.5]])
    second = torch.zeros(3, 1)
    out = normuon_scale(u, second, beta2=0.9)
    assert torch.allclose(second, 0.1 * torch.tensor([[4.0], [1.0], [0.25]]))
    rows = u / torch.tensor([[2.0], [1.0], [0.5]])  # every row now has unit mean square
    assert torch.allclose(out, rows * u.norm() / rows.norm(), atol=1e-6)
    wide = torch.tensor([[2.0, 1.0, 0.5], [2.0, -1.0, 0.5]])  # wide: per column
    second = torch.zeros(1, 3)
    out = normuon_scale(wide, second, beta2=0.9)
    cols = wide / torch.tensor([[2.0, 1.0, 0.5]])
    assert torch.allclose(out, cols * wide.norm() / cols.norm(), atol=1e-6)


def test_muon_eq_and_muon_plus():
    torch.manual_seed(0)
    g = torch.randn(16, 48) * torch.logspace(0, 2, 16)[:, None]  # rows of very different norms
    W = torch.nn.Parameter(torch.zeros(16, 48))
    W.grad = g.clone()
    Muon([W], lr=1.0, momentum=0.0, weight_decay=0.0, muon_eq=False, muon_plus=True, beta2=None).step()
    # Muon+: the update's Frobenius norm snapped to sqrt(min(16, 48)) = 4
    assert (-W.detach()).norm().item() == pytest.approx(4.0, rel=1e-5)
    # MuonEq: equilibrated rows make the same update as an input that already had equal row norms
    W2, W3 = torch.nn.Parameter(torch.zeros(16, 48)), torch.nn.Parameter(torch.zeros(16, 48))
    W2.grad = g.clone()
    W3.grad = g / g.norm(dim=1, keepdim=True)
    for w in (W2, W3):
        Muon([w], lr=1.0, momentum=0.0, weight_decay=0.0, muon_eq=True, muon_plus=False, beta2=None).step()
    assert torch.allclose(W2.detach(), W3.detach(), atol=1e-5)


def test_muon_rejects_non_matrices():
    with pytest.raises(ValueError, match="2-D"):
        Muon([torch.nn.Parameter(torch.zeros(3))])


@pytest.mark.parametrize("optimizer", ["muon", "adamw"])
def test_build_optimizers_covers_every_parameter_once(optimizer):
    cfg = make_config("smoke", optimizer=optimizer)
    model = GPT(cfg.model)
    opts = build_optimizers(model, cfg)
    seen = [id(p) for opt in opts for g in opt.param_groups for p in g["params"]]
    assert sorted(seen) == sorted(id(p) for p in model.parameters())
    groups = {g["name"]: g for opt in opts for g in opt.param_groups}
    scale = (cfg.model.n_embd / 768) ** -0.5
    assert groups["embedding"]["lr"] == pytest.approx(cfg.embedding_lr * scale)
    assert groups["value_embeds"]["lr"] == pytest.approx(cfg.embedding_lr * scale * 0.5)
    assert groups["lm_head"]["lr"] == pytest.approx(cfg.unembedding_lr * scale)
    assert groups["resid_lambdas"]["lr"] == pytest.approx(cfg.scalar_lr * 0.01)
    assert groups["smear"]["lr"] == 0.2 and groups["smear"]["betas"] == (0.8, 0.95)
    assert groups["lm_head"]["betas"] == (0.8, 0.96) and groups["lm_head"]["weight_decay"] == 0.01
    assert groups["embedding"]["betas"] == (0.8, 0.995) and groups["x0_lambdas"]["betas"] == (0.96, 0.95)
    assert all(g["initial_lr"] == g["lr"] for g in groups.values())
    assert {n for n, g in groups.items() if g["decay_scheduled"]} == {"matrix"}
    if optimizer == "muon":
        assert isinstance(opts[-1], Muon) and groups["matrix"]["lr"] == cfg.matrix_lr
    else:
        assert len(opts) == 1 and groups["matrix"]["lr"] == cfg.adamw_matrix_lr


def test_batch_and_weight_decay_scaling_rules():
    """nanochat's base_train rules: every LR x sqrt(B / 2^19); Muon wd x sqrt(B / 2^19) x D_d12 / D."""
    from xsa.stack.optim import lr_scales, muon_weight_decay
    d12, d24 = make_config("d12-nanochat"), make_config("d24-nanochat")
    assert lr_scales(d12) == (1.0, 1.0) and muon_weight_decay(d12) == pytest.approx(0.28)  # the reference
    batch, _ = lr_scales(d24)
    assert batch == pytest.approx(2 ** 0.5)  # 2^20 tokens a step
    ratio = 110_100_912 / 729_810_624  # scaling params (matrices + lm_head) of d12 and d24, nanochat's shapes
    assert muon_weight_decay(d24) == pytest.approx(0.28 * 2 ** 0.5 * ratio, rel=1e-6)
    cpu = make_config("cpu-w64-d4")  # the CPU presets state their LRs and decay, unscaled
    assert lr_scales(cpu)[0] == 1.0 and muon_weight_decay(cpu) == cpu.weight_decay
