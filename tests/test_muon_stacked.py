"""Muon stacked by shape (xsa/stack/optim.py, the GPU presets' muon_stacked) against the per-matrix
update the committed runs trained with: eager, compiled, and on two gloo ranks."""

import pytest
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

from xsa.stack.config import GPTConfig
from xsa.stack.model import GPT
from xsa.stack.optim import Muon

from conftest import spawn_ranks

# three updates at changing scheduled values, as the trainer drives them
SCHEDULE = [(0.02, 0.85, 0.28), (0.018, 0.87, 0.2), (0.015, 0.9, 0.1)]
KW = dict(ns_steps=5, schedule="polar_express", ns_scale=1.01, muon_eq=True, muon_plus=True, beta2=0.9)


def matrices(n_layer=4, n_embd=64, n_head=2, seed=0) -> list[torch.nn.Parameter]:
    """The Muon matrices of a small GPT (q, k, v, proj, fc, mlp proj and value-embedding gates:
    four shapes), with their init."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(sequence_len=32, vocab_size=256, n_layer=n_layer, n_head=n_head, n_kv_head=n_head,
                          n_embd=n_embd))
    model.init_weights()
    for p in model.parameters():  # zero-initialised projections get a non-zero start too
        p.data.add_(0.01 * torch.randn_like(p))
    return [torch.nn.Parameter(p.detach().clone()) for p in model.param_groups()["matrix"]]


def grads(params, step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=gen) for p in params]


def run(params, **opt) -> Muon:
    muon = Muon(params, **KW, **opt)
    for k, (lr, mom, wd) in enumerate(SCHEDULE):
        for p, g in zip(params, grads(params, k)):
            p.grad = g
        for group in muon.param_groups:
            group.update(lr=lr, momentum=mom, weight_decay=wd)
        muon.step()
    return muon


def max_diff(a: Muon, b: Muon, pa, pb) -> float:
    out = max((x - y).abs().max().item() for x, y in zip(pa, pb))
    for x, y in zip(pa, pb):
        for name in ("momentum_buffer", "second_momentum_buffer"):
            out = max(out, (a.state[x][name] - b.state[y][name]).abs().max().item())
    return out


def test_stacked_update_matches_per_matrix():
    ref, mine = matrices(), matrices()
    a = run(ref)
    calls = []
    b = Muon(mine, **KW, stacked=True)
    update = b._update
    b._update = lambda *args, **kw: (calls.append(args[0].shape), update(*args, **kw))
    for k, (lr, mom, wd) in enumerate(SCHEDULE):
        for p, g in zip(mine, grads(mine, k)):
            p.grad = g
        b.param_groups[0].update(lr=lr, momentum=mom, weight_decay=wd)
        b.step()
    assert max_diff(a, b, ref, mine) < 1e-6
    # one call per shape and step, on a stack of every matrix of that shape
    shapes = {tuple(p.shape) for p in ref}
    assert len(shapes) == 4 and len(calls) == 4 * len(SCHEDULE)
    assert sum(s[0] for s in calls[:4]) == len(ref)
    assert max(abs(x - y).max().item() for x, y in zip(ref, matrices())) > 1e-3  # the steps moved them


def test_compiled_stacked_update_matches_and_compiles_once_per_shape():
    """The GPU path's compiled stack (inductor on the CPU here): the same update to rounding, and the
    changing lr, momentum and weight decay (0-d tensors) compile no new graph."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    ref, mine = matrices(n_layer=2), matrices(n_layer=2)
    a, b = run(ref), run(mine, stacked=True, compiled=True)
    assert max_diff(a, b, ref, mine) < 1e-5
    assert counters["stats"]["unique_graphs"] == 4  # one graph per shape, for all three steps


def _ops(params, stacked: bool) -> int:
    """ATen operators one Muon step dispatches (each about one kernel launch on a GPU)."""
    muon = run(params, stacked=stacked)  # state initialised: the steady-state step is counted
    for p, g in zip(params, grads(params, 9)):
        p.grad = g
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        muon.step()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::") and e.cpu_children == [])


def test_stacked_step_dispatches_far_fewer_operators():
    # d12's layout of Muon matrices (12 layers: 78 matrices in four shapes) at a small width: the
    # operator count does not depend on the width
    per_matrix, stacked = _ops(matrices(n_layer=12), False), _ops(matrices(n_layer=12), True)
    assert stacked * 5 < per_matrix, (per_matrix, stacked)


def _rank_worker(rank, out):
    dist.init_process_group("gloo")
    params = matrices()
    muon = run(params, stacked=True)  # every rank the same gradients: their mean is the gradient
    state = muon.full_state_dict()
    if rank == 0:
        torch.save({"params": [p.detach() for p in params], "state": state}, out)
    # a rank that leaves the group while the other still receives its last broadcast aborts (gloo)
    dist.barrier()
    dist.destroy_process_group()


def test_stacked_on_two_ranks_matches_one_process(tmp_path):
    single = matrices()
    one = run(single, stacked=True)
    spawn_ranks(_rank_worker, str(tmp_path / "two.pt"))
    two = torch.load(tmp_path / "two.pt", weights_only=True)
    assert max((x - y).abs().max().item() for x, y in zip(single, two["params"])) == 0.0
    # every matrix's state gathered from its owner rank
    want = one.state_dict()["state"]
    assert sorted(two["state"]["state"]) == sorted(want)
    for k, entry in want.items():
        for name, t in entry.items():
            assert torch.equal(two["state"]["state"][k][name], t)


def test_build_optimizers_stacks_for_the_gpu_presets():
    from xsa.stack.presets import make_config
    from xsa.stack.optim import build_optimizers
    assert make_config("d12").muon_stacked and not make_config("cpu-w64-d4").muon_stacked
    cfg = make_config("smoke", muon_stacked=True)
    muon = build_optimizers(GPT(cfg.model), cfg)[-1]
    assert muon.stacked and muon._update.__name__ == "muon_update"  # eager on the CPU path
    assert not build_optimizers(GPT(cfg.model), make_config("smoke"))[-1].stacked


if __name__ == "__main__":
    pytest.main([__file__])
