"""Validation of the XSA path (checks (a)-(d) of the validation stage) and model input errors."""

import pytest
import torch

from xsa.stack import config

from xsa import validation
from xsa.stack.config import ConfigError, GPTConfig
from xsa.stack.presets import make_config
from xsa.stack.attention import xsa_project
from xsa.stack.model import GPT


@pytest.mark.parametrize("check", validation.CHECKS, ids=lambda c: c.__name__)
def test_validation_check(check):
    result = check()
    assert result.passed, f"{result.name}: measured {result.measured:.3g} > tolerance {result.tolerance:g}"


@pytest.mark.parametrize("variant", config.XSA_VARIANTS)
def test_every_registered_variant_decodes_with_the_kv_cache_as_it_trains(variant):
    result = validation.check_kv_cache(variant=variant)
    assert result.passed, f"{result.name}: measured {result.measured:.3g} > tolerance {result.tolerance:g}"


def test_validation_decodes_every_registered_variant_with_the_kv_cache(monkeypatch):
    from xsa.stack import attention

    def damp(y, v, alpha):  # a variant of the token's own values: it keeps the contract
        return (1 - alpha) * y

    monkeypatch.setattr(config, "XSA_VARIANTS", (*config.XSA_VARIANTS, "damp"))
    monkeypatch.setitem(attention.XSA_VARIANTS, "damp", damp)
    rows = {c.name: c for c in validation.run_checks()}
    assert {f"KV-cache decoding equals full forward ({v})" for v in config.XSA_VARIANTS} <= set(rows)
    assert all(c.passed for c in rows.values())


def running_mean(y, v, alpha):
    """XSA against the running mean of the values: a variant that reads other tokens."""
    mean = v.cumsum(1) / torch.arange(1, v.size(1) + 1, dtype=v.dtype).view(1, -1, 1, 1)
    return xsa_project(y, mean, alpha)


def test_the_kv_cache_check_catches_a_variant_that_reads_other_tokens(monkeypatch):
    """XSA against the running mean of the values trains as intended but decodes wrongly with the
    cache (a new token sees only its own value): the validation stage fails it."""
    from xsa.stack import attention

    monkeypatch.setattr(config, "XSA_VARIANTS", (*config.XSA_VARIANTS, "running_mean"))
    monkeypatch.setitem(attention.XSA_VARIANTS, "running_mean", running_mean)
    failed = [c for c in validation.run_checks() if not c.passed]
    assert [c.name for c in failed] == ["KV-cache decoding equals full forward (running_mean)"]
    assert failed[0].measured > 1e-2  # not rounding: the logits differ
    assert validation.check_kv_cache(variant="xsa").measured < 1e-5


def test_checks_can_fail():
    # the orthogonality check must notice a projection that is only partial
    y, v = validation._random_yv(0)
    assert validation._max_abs_cos(xsa_project(y, v, 0.5), v) > 1e-2


def test_xsa_project_does_not_copy_v_under_gqa():
    # the broadcast is a view: v keeps its storage and no repeated tensor of y's size is built
    y, v = validation._random_yv(0, n_head=8, n_kv_head=2)
    z = xsa_project(y, v, 1.0)
    assert z.shape == y.shape and v.unsqueeze(3).data_ptr() == v.data_ptr()


def test_plain_value_mode_projects_against_c_v():
    model = validation.random_model(0, xsa_alpha=1.0, xsa_layers="all", xsa_value="plain")
    for b in model.blocks:
        b.attn.capture = {}
    model(torch.randint(0, 97, (1, 16)))
    cap = model.blocks[-1].attn.capture  # the last layer always has a value embedding
    v_plain = model.blocks[-1].attn.c_v  # the captured v must be c_v(x) alone, not the mixed one
    cos = torch.nn.functional.cosine_similarity(cap["z"][:, 1:], cap["v"].transpose(1, 2)[:, 1:], dim=-1)
    assert cos.abs().max() < 1e-5
    assert model.blocks[-1].attn.xsa_plain and v_plain.weight.shape[0] == cap["v"].shape[1] * cap["v"].shape[3]


@pytest.mark.parametrize("kwargs, field", [
    (dict(xsa_alpha=1.5), "xsa_alpha"),
    (dict(xsa_alpha=-0.1), "xsa_alpha"),
    (dict(xsa_alpha=1.0, xsa_layers="middle"), "xsa_layers"),
    (dict(xsa_alpha=1.0, xsa_layers="0,9"), "xsa_layers"),
    (dict(xsa_alpha=1.0, xsa_layers="last:0"), "xsa_layers"),
    (dict(n_embd=65), "n_embd"),
    (dict(xsa_value="both"), "xsa_value"),
    (dict(xsa_alpha=1.0, xsa_layers="none"), "xsa_alpha"),
])
def test_bad_model_config_names_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        GPTConfig(**{**validation.TINY, **kwargs})


def test_bad_preset_and_unknown_field():
    with pytest.raises(ConfigError, match="preset"):
        make_config("d13")
    with pytest.raises(ConfigError, match="learning_rate"):
        make_config("smoke", learning_rate=1.0)


def test_alpha_without_layers_means_all():
    cfg = make_config("smoke", xsa_alpha=0.5)
    assert cfg.model.xsa_layer_set() == frozenset(range(cfg.model.n_layer))
    assert make_config("smoke").model.xsa_layer_set() == frozenset()


def test_sequence_longer_than_rotary_cache_is_an_error():
    model = GPT(GPTConfig(**{**validation.TINY, "sequence_len": 4}))
    model.init_weights()
    with pytest.raises(ConfigError, match="sequence_len"):
        model(torch.zeros(1, 41, dtype=torch.long))
