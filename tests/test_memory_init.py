"""Memory and start-up on the GPU path: the model built on the meta device and initialised on its
device, the embeddings stored in bf16 under bf16 autocast, AdamW's state sharded over two gloo
ranks, and the per-rank memory table (xsa/memory.py)."""

import torch
import torch.distributed as dist

from xsa.stack.presets import make_config
from xsa.memory import per_rank
from xsa.stack.model import GPT, build
from xsa.stack.optim import AdamW
from xsa.stack.step import Step

from conftest import spawn_ranks


def test_meta_build_initialises_every_tensor():
    cfg = make_config("smoke").model
    ref = build(cfg, 0, torch.device("cpu"))  # the committed runs' path
    meta = build(cfg, 0, torch.device("cpu"), meta=True)
    a, b = ref.state_dict(), meta.state_dict()
    for name, t in b.items():
        assert torch.isfinite(t).all(), name
    for name in ("resid_lambdas", "x0_lambdas", "blocks.0.attn.c_proj.weight", "backout_lambda"):
        assert torch.equal(a[name], b[name]), name  # deterministic parts of the init agree exactly
    assert torch.equal(ref.cos, meta.cos) and torch.equal(ref.sin, meta.sin)
    assert abs(b["wte.weight"].std().item() - cfg.init_wte_std) < 0.05  # drawn, at the recipe's scale
    assert not any(t.is_meta for t in meta.state_dict().values())


def test_embeddings_stored_in_bf16_on_the_gpu_path_only():
    cfg = make_config("smoke", gpu_path=True)
    model = GPT(cfg.model)
    Step(model, cfg, torch.device("cpu"))
    assert model.wte.weight.dtype == torch.bfloat16
    assert all(ve.weight.dtype == torch.bfloat16 for ve in model.value_embeds.values())
    assert model.lm_head.weight.dtype == torch.float32 and model.blocks[0].attn.c_q.weight.dtype == torch.float32
    plain = GPT(make_config("smoke").model)
    Step(plain, make_config("smoke"), torch.device("cpu"))
    assert all(p.dtype == torch.float32 for p in plain.parameters())


def test_memory_per_rank_by_hand():
    model = GPT(make_config("d12").model)
    groups = model.param_groups()
    n = sum(p.numel() for p in model.parameters())
    emb = sum(p.numel() for g in ("embedding", "value_embeds") for p in groups[g])
    one_before, one_after = per_rank("d12", 1, False), per_rank("d12", 1, True)
    assert one_before["weights"] == 4 * n and one_after["weights"] == 4 * n - 2 * emb
    adam = sum(p.numel() for g, ps in groups.items() if g != "matrix" for p in ps)
    assert one_before["adamw"] == 8 * adam and one_after["adamw"] == 8 * adam - 4 * emb
    eight = per_rank("d12", 8, True)
    assert eight["adamw"] < one_after["adamw"] / 4 and eight["total"] < 0.5 * per_rank("d12", 8, False)["total"]


def _params(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen)) for shape in ((8, 4), (3,), (5, 2), (7,))]


def _steps(params, opt, steps=3):
    for k in range(steps):
        gen = torch.Generator().manual_seed(10 + k)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()


def _rank_worker(rank, out):
    dist.init_process_group("gloo")
    params = _params()
    opt = AdamW([{"params": params[:2]}, {"params": params[2:]}], lr=0.1, betas=(0.8, 0.95), eps=1e-10,
                weight_decay=0.01)
    _steps(params, opt)
    held = sorted(i for i, p in enumerate(params) if p in opt.state)
    full = opt.full_state_dict()
    if rank == 0:
        torch.save({"params": [p.detach() for p in params], "state": full, "held": held}, out)
    # a rank that leaves the group while the other still receives its last broadcast aborts (gloo)
    dist.barrier()
    dist.destroy_process_group()


def test_adamw_state_sharded_over_two_ranks(tmp_path):
    params = _params()
    one = AdamW([{"params": params[:2]}, {"params": params[2:]}], lr=0.1, betas=(0.8, 0.95), eps=1e-10,
                weight_decay=0.01)
    _steps(params, one)
    spawn_ranks(_rank_worker, str(tmp_path / "two.pt"))
    two = torch.load(tmp_path / "two.pt", weights_only=False)
    assert two["held"] == [0, 2]  # rank 0 holds the state of parameters 0 and 2 only
    assert all(torch.equal(a, b) for a, b in zip(params, two["params"]))
    want = one.state_dict()["state"]
    assert sorted(two["state"]["state"]) == sorted(want)
    for k, entry in want.items():
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(two["state"]["state"][k][name], entry[name])
    # a full state loads on one process whole, and each rank keeps its share
    fresh = _params()
    opt = AdamW([{"params": fresh[:2]}, {"params": fresh[2:]}], lr=0.1)
    opt.load_state_dict(two["state"])
    assert len(opt.state) == 4
