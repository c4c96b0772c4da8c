"""The nanochat recipes (xsa/stack/config.py RECIPES): each piece numerically. Smear and backout at lambda
0 are the identity, every schedule at its breakpoints, the initialisation per tensor."""

import dataclasses

import pytest
import torch

from xsa.stack.config import RECIPES
from xsa.stack.presets import make_config
from xsa.stack.model import GPT
from xsa.stack.step import lr_multiplier, muon_momentum, weight_decay_multiplier

SHAPE = dict(sequence_len=32, vocab_size=4096, n_layer=4, n_head=4, n_kv_head=4, n_embd=256)


def model(seed=0, **overrides):
    torch.manual_seed(seed)
    m = GPT(dataclasses.replace(make_config("cpu-w64-d4").model, **{**SHAPE, **overrides}))
    m.init_weights()
    with torch.no_grad():  # every path carries signal (output projections start at zero)
        for p in m.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return m


def logits_with(m, other, idx):
    """other's logits with m's weights where their names agree."""
    other.load_state_dict({k: v for k, v in m.state_dict().items() if k in other.state_dict()})
    with torch.no_grad():
        return other(idx)


@pytest.mark.parametrize("piece, lam", [("smear", "smear_lambda"), ("backout", "backout_lambda")])
def test_smear_and_backout_at_lambda_zero_are_the_identity(piece, lam):
    idx = torch.randint(0, 4096, (2, 32), generator=torch.Generator().manual_seed(0))
    on = model()
    off = GPT(dataclasses.replace(on.config, **{piece: False}))
    with torch.no_grad():
        changed = (on(idx) - logits_with(on, off, idx)).abs().max().item()
        getattr(on, lam).zero_()
        same = (on(idx) - logits_with(on, off, idx)).abs().max().item()
    assert changed > 1e-3  # the piece does something at a non-zero lambda...
    assert same == 0.0  # ...and nothing at lambda 0


def test_smear_mixes_in_the_previous_token_only():
    m = model()
    with torch.no_grad():
        m.smear_lambda.fill_(1.0)
    x = torch.randn(1, 5, 256)
    out = m._smear(x, None)
    gate = torch.sigmoid(m.smear_gate(x[:, 1:, :24]))
    assert torch.equal(out[:, 0], x[:, 0])  # the first position has nothing before it
    assert torch.allclose(out[:, 1:], x[:, 1:] + gate * x[:, :-1])


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_initialisation_statistics(recipe):
    cfg = make_config("cpu-w64-d4", recipe=recipe, n_layer=5, n_embd=256, n_head=4, n_kv_head=4).model
    torch.manual_seed(0)
    m = GPT(cfg)
    m.init_weights()
    std = 256 ** -0.5
    assert m.wte.weight.std().item() == pytest.approx(cfg.init_wte_std, rel=0.02)
    assert m.lm_head.weight.std().item() == pytest.approx(0.001, rel=0.02)
    for block in m.blocks:
        for lin in (block.attn.c_q, block.attn.c_k, block.attn.c_v):
            assert lin.weight.std().item() == pytest.approx(std, rel=0.02)
        assert block.mlp.c_fc.weight.std().item() == pytest.approx(std * cfg.init_fc_scale, rel=0.02)
        assert not block.attn.c_proj.weight.any() and not block.mlp.c_proj.weight.any()
        gate = block.attn.ve_gate
        if gate is not None:
            assert 0.0 <= gate.weight.min() and gate.weight.max() <= cfg.init_gate_max
    for ve in m.value_embeds.values():
        assert ve.weight.std().item() == pytest.approx(std, rel=0.02)
    (r0, r1), (x0, x1) = cfg.init_resid_lambdas, cfg.init_x0_lambdas
    assert torch.allclose(m.resid_lambdas, torch.linspace(r0, r1, 5)) and torch.allclose(m.x0_lambdas, torch.linspace(x0, x1, 5))
    if recipe == "nanochat-92d63d4":
        assert (r0, r1, x0, x1, cfg.init_wte_std, cfg.init_fc_scale) == (1.15, 1.05, 0.20, 0.05, 0.8, 0.4)
        assert m.smear_lambda.item() == 0.0 and m.backout_lambda.item() == pytest.approx(0.2)
        assert 0.0 <= m.smear_gate.weight.min() and m.smear_gate.weight.max() <= 0.02
        assert m.smear_gate.weight.mean().item() == pytest.approx(0.01, abs=0.004)
    else:
        assert (r0, r1, x0, x1, cfg.init_wte_std, cfg.init_fc_scale) == (1.0, 1.0, 0.1, 0.1, 1.0, 1.0)
        assert not hasattr(m, "smear_lambda") and not hasattr(m, "backout_lambda")


def test_92d63d4_schedules_at_their_breakpoints():
    cfg = make_config("d12-nanochat")  # 2,520 steps, warm-down 65% (from step 882), warm-up 40
    n, start = cfg.num_iterations, cfg.num_iterations - round(0.65 * cfg.num_iterations)
    assert (n, start) == (2520, 882)
    assert lr_multiplier(0, cfg) == pytest.approx(1 / 40) and lr_multiplier(39, cfg) == 1.0
    assert lr_multiplier(start, cfg) == 1.0 and lr_multiplier(n, cfg) == pytest.approx(0.05)
    assert lr_multiplier(start + 819, cfg) == pytest.approx(0.5 * 1 + 0.5 * 0.05)  # half-way down
    # Muon momentum: 0.85 -> 0.97 over 400 steps, then 0.97 -> 0.90 over the warm-down
    assert muon_momentum(0, cfg) == 0.85 and muon_momentum(200, cfg) == pytest.approx(0.91)
    assert muon_momentum(400, cfg) == 0.97 and muon_momentum(start - 1, cfg) == 0.97
    assert muon_momentum(n, cfg) == pytest.approx(0.90)
    # weight decay: cosine to 0
    assert weight_decay_multiplier(0, cfg) == 1.0 and weight_decay_multiplier(n // 2, cfg) == pytest.approx(0.5)
    assert weight_decay_multiplier(n, cfg) == pytest.approx(0.0, abs=1e-12)


def test_324e69c_schedules_at_their_breakpoints():
    cfg = make_config("d12-nanochat", recipe="nanochat-324e69c")  # ratio 10.5: 2,205 steps
    n = cfg.num_iterations
    assert n == int(10.5 * 110_100_912) // 2**19
    assert lr_multiplier(0, cfg) == 1.0  # no warm-up
    half = n - round(0.5 * n)
    assert lr_multiplier(half, cfg) == 1.0 and lr_multiplier(n, cfg) == 0.0
    assert muon_momentum(0, cfg) == 0.85 and muon_momentum(150, cfg) == pytest.approx(0.90)
    assert muon_momentum(300, cfg) == 0.95 and muon_momentum(n, cfg) == 0.95  # no momentum warm-down
    assert weight_decay_multiplier(n // 2, cfg) == pytest.approx(1 - (n // 2) / n)  # linear


def test_cpu_presets_state_their_own_schedule():
    cfg = make_config("cpu-w64-d4")
    assert not cfg.batch_lr_scaling and not cfg.weight_decay_scaling
    assert (cfg.matrix_lr, cfg.embedding_lr, cfg.unembedding_lr, cfg.weight_decay) == (0.02, 0.3, 0.008, 0.28)
    assert cfg.warmup_steps == round(0.016 * cfg.num_iterations)
    assert cfg.muon_momentum_warmup_steps == round(0.16 * cfg.num_iterations)
