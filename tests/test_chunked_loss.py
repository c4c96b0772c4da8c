"""The chunked loss (TrainConfig.loss_chunk, xsa/stack/loss.py): the default path's loss and gradients to
float rounding, eager and compiled, and a default that leaves the training forward untouched."""

import pytest
import torch
import torch.nn.functional as F

import xsa.stack.loss
from xsa.stack.config import ConfigError, TrainConfig
from xsa.stack.presets import make_config
from xsa.stack.model import GPT
from xsa.base.records import REPO_ROOT, read_json
from xsa.stack.spec import Run
from xsa.stack.step import Step

# gradients: |chunked - default| <= RTOL * |default| + ATOL_FRAC * (largest |gradient| of the model)
RTOL, ATOL_FRAC = 1e-4, 1e-5


def _model_and_batch():
    cfg = make_config("smoke")
    torch.manual_seed(0)
    model = GPT(cfg.model)
    model.init_weights()
    with torch.no_grad():  # off the init's zeros, so every parameter has a gradient
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    gen = torch.Generator().manual_seed(1)
    B, T, V = cfg.device_batch_size, cfg.model.sequence_len, cfg.model.vocab_size
    x, y = (torch.randint(0, V, (B, T), generator=gen) for _ in range(2))
    y[0, :7] = -1  # ignored targets (B*T = 256 rows, 249 scored)
    return cfg, model, x, y


def _loss_and_grads(model, forward, x, y, **kw):
    model.zero_grad(set_to_none=True)
    loss = forward(x, y, **kw)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _assert_matches(model, forward, x, y, chunk):
    ref_loss, ref = _loss_and_grads(model, model, x, y)
    loss, grads = _loss_and_grads(model, forward, x, y, loss_chunk=chunk)
    assert abs(loss.item() - ref_loss.item()) <= 1e-6 * abs(ref_loss.item())
    atol = ATOL_FRAC * max(g.abs().max().item() for g in ref.values())
    assert grads.keys() == ref.keys()
    for name in ref:
        torch.testing.assert_close(grads[name], ref[name], rtol=RTOL, atol=atol, msg=name)


@pytest.mark.parametrize("chunk", [64, 100, 1000])  # divides B*T = 256, does not, one chunk for all
def test_chunked_loss_matches_the_default_eager(chunk):
    _, model, x, y = _model_and_batch()
    _assert_matches(model, model, x, y, chunk)


def test_chunked_loss_matches_the_default_compiled():
    # the CPU policy that compiles (fp32, inductor, dynamic=False): one graph, no break
    _, model, x, y = _model_and_batch()
    explained = torch._dynamo.explain(model)(x, y, loss_chunk=100)
    assert explained.graph_break_count == 0, explained.break_reasons
    _assert_matches(model, torch.compile(model, dynamic=False), x, y, 100)


def test_chunked_loss_under_autocast_runs_the_head_in_its_dtype():
    # the gpu_path policy on a CPU (bf16 autocast): forward and the recomputing backward agree
    _, model, x, y = _model_and_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_loss, ref = _loss_and_grads(model, model, x, y)
        loss, grads = _loss_and_grads(model, model, x, y, loss_chunk=100)
    assert abs(loss.item() - ref_loss.item()) <= 1e-2 * abs(ref_loss.item())
    rel = (grads["lm_head.weight"] - ref["lm_head.weight"]).norm() / ref["lm_head.weight"].norm()
    assert rel < 0.05


def test_default_leaves_the_training_forward_as_it_was(monkeypatch):
    # loss_chunk 0: Step calls the model as before (no loss_chunk argument, the chunked function
    # never runs), and loss and gradients are bit-identical to cross-entropy of the model's logits
    cfg, model, x, y = _model_and_batch()
    assert cfg.loss_chunk == 0
    step = Step(model, cfg, torch.device("cpu"))
    assert step.loss_kwargs == {}

    def refuse(*args, **kwargs):
        raise AssertionError("the default path ran the chunked loss")
    monkeypatch.setattr(xsa.stack.loss.ChunkedSoftcapCrossEntropy, "apply", refuse)
    logits = model(x)
    ref = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1), ignore_index=-1)
    model.zero_grad(set_to_none=True)
    ref.backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    loss, grads = _loss_and_grads(model, model, x, y)
    assert torch.equal(loss, ref.detach())
    assert all(torch.equal(grads[n], ref_grads[n]) for n in ref_grads)
    with torch.no_grad():  # and Step's loss is that loss (before its update)
        before = model(x, y)
    assert torch.equal(step(0, [(x, y)], 1), before)


def test_chunked_step_trains_and_matches_the_default_step():
    cfg, model, x, y = _model_and_batch()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    losses = {}
    for chunk in (0, 100):
        model.load_state_dict(state)
        step = Step(model, make_config("smoke", loss_chunk=chunk), torch.device("cpu"))
        losses[chunk] = [step(it, [(x, y)], 1).item() for it in range(3)]
    assert losses[100] == pytest.approx(losses[0], rel=1e-5)
    assert losses[0][-1] < losses[0][0]


def test_run_ids_and_records_with_the_new_field():
    assert Run.of("cpu-w64-d4").run_id == "cpu-w64-d4_base_s0"
    assert Run.of("cpu-w64-d4", loss_chunk=0).run_id == "cpu-w64-d4_base_s0"
    chunked = Run.of("cpu-w64-d4", loss_chunk=512, cpu_compile=True)
    assert chunked.run_id == "cpu-w64-d4_base-compiled-lchunk512_s0"
    assert Run.from_config(chunked.config()) == chunked
    assert chunked.config().config_hash() != make_config("cpu-w64-d4", cpu_compile=True).config_hash()
    # a committed record predates the field: it reads back at 0, the run its folder names
    folder = REPO_ROOT / "results" / "runs" / "cpu-w64-d4_base_s0"
    cfg = TrainConfig.from_dict(read_json(folder / "config.json"))
    assert cfg.loss_chunk == 0 and cfg == Run.of("cpu-w64-d4").config()


def test_bad_values_name_the_field():
    for bad in (-1, True, 1.5):
        with pytest.raises(ConfigError, match="loss_chunk"):
            make_config("smoke", loss_chunk=bad)
    _, model, x, y = _model_and_batch()
    with pytest.raises(ValueError, match="loss_chunk"):
        model(x, y, loss_reduction="none", loss_chunk=64)
