"""The sink study's two attention arms (config.attn_gate, config.attn_sink): off they change nothing,
on they learn, they reach their optimizer groups, and they decode with the KV cache as they train."""

import pytest
import torch

from xsa.stack.config import ConfigError, GPTConfig
from xsa.stack.kvcache import KVCache
from xsa.stack.model import GPT
from xsa.stack.optim import build_optimizers
from xsa.stack.presets import make_config
from xsa.stack.spec import Run
from xsa.validation import TINY, random_model


def tokens(seed=0, shape=(2, 24)):
    return torch.randint(0, TINY["vocab_size"], shape, generator=torch.Generator().manual_seed(seed))


def test_arms_off_are_the_committed_runs():
    # a new field's default reproduces the old behaviour: the same run id, and the same weights drawn
    run = Run.of("cpu-w64-d4", seed=3, cpu_compile=True, matrix_lr=0.04)
    assert run.run_id == "cpu-w64-d4_base-compiled-mlr0.04_s3"
    assert Run.of("cpu-w64-d4", seed=3, attn_gate=False).run_id == "cpu-w64-d4_base_s3"
    torch.manual_seed(0)
    a = GPT(GPTConfig(**TINY))
    torch.manual_seed(0)
    b = GPT(GPTConfig(**TINY, attn_gate=False, attn_sink=False))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_arm_names():
    assert Run.of("cpu-w64-d4", seed=1, attn_gate=True).run_id == "cpu-w64-d4_base-attngate_s1"
    assert Run.of("cpu-w64-d4", seed=1, attn_sink=True, xsa_alpha=1.0, xsa_layers="all").run_id == \
        "cpu-w64-d4_xsa1-sink_s1"


@pytest.mark.parametrize("field", ["attn_gate", "attn_sink"])
def test_a_non_bool_is_refused_naming_the_field(field):
    with pytest.raises(ConfigError, match=field):
        GPTConfig(**TINY, **{field: 1})


def test_gate_and_sink_learn():
    model = random_model(0, attn_gate=True, attn_sink=True, xsa_alpha=1.0, xsa_layers="all")
    model(tokens(), tokens(1)).backward()
    for block in model.blocks:
        assert block.attn.attn_gate.weight.grad.abs().sum() > 0
        assert block.attn.attn_sink.grad.abs().sum() > 0


def test_gate_is_a_muon_matrix_and_sink_an_adamw_scalar():
    cfg = make_config("smoke", attn_gate=True, attn_sink=True)
    torch.manual_seed(0)
    model = GPT(cfg.model)
    model.init_weights()
    groups = {g["name"]: g for opt in build_optimizers(model, cfg) for g in opt.param_groups}
    gates = {id(b.attn.attn_gate.weight) for b in model.blocks}
    assert gates <= {id(p) for p in groups["matrix"]["params"]}
    assert {id(p) for p in groups["attn_sink"]["params"]} == {id(b.attn.attn_sink) for b in model.blocks}
    assert groups["attn_sink"]["lr"] == groups["x0_lambdas"]["lr"]  # a logit of order 1, the x0 scalars' rate
    assert all(float(b.attn.attn_sink.detach().abs().sum()) == 0 for b in model.blocks)  # initialised at 0


def test_sink_decodes_with_the_cache_under_padding():
    # prompts of unequal length, left-padded: each row's logits equal its own unpadded forward
    model = random_model(2, attn_sink=True, attn_gate=True, n_kv_head=2)
    c = model.config
    short, long_ = tokens(3, (1, 7)), tokens(4, (1, 10))
    batch = torch.cat([torch.cat([torch.zeros(1, 3, dtype=torch.long), short], 1), long_])
    cache = KVCache(c.n_layer, 2, c.n_kv_head, c.head_dim, 12, pad=torch.tensor([3, 0]))
    with torch.no_grad():
        out = model(batch, kv_cache=cache)[:, -1]
        assert (out[0] - model(short)[0, -1]).abs().max() < 1e-4
        assert (out[1] - model(long_)[0, -1]).abs().max() < 1e-4


def test_sink_runs_under_bf16_autocast():
    # the GPU code path's precision: the softmax in fp32, the output in the compute dtype
    model = random_model(0, attn_sink=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(tokens(), tokens(1))
    assert torch.isfinite(loss)
