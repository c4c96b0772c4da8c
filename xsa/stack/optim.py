"""
Optimizers: Muon for the 2-D matrices of the transformer blocks, AdamW for everything else.

The orthogonalisation (`orthogonalize`) and the whole Muon update of one matrix (`muon_update`) are
pure functions of tensors, tested on their own; `Muon` is a thin optimizer around them that gives
each matrix one owner rank under torch.distributed; `build_optimizers` splits a GPT's parameters by
role and sets every learning rate and weight decay from a TrainConfig.

Muon, per matrix W (rows x cols) with gradient g, as nanochat's muon_step_fused (92d63d4):
    buf <- lerp(buf, g, 1 - m);  g <- lerp(g, buf, m)                       Nesterov momentum
    X <- g with each row rescaled to the mean row norm                     MuonEq (muon_eq)
    X <- orthogonalize(X)  (5 Polar Express steps, G / (||G||_F * ns_scale))
    X <- X * sqrt(min(rows, cols)) / ||X||_F                               Muon+ (muon_plus)
    X <- X * NorMuon scale (per-row or per-column second moment, beta2)    NorMuon (normuon_beta2)
    lr' = lr * max(1, rows / cols)^0.5
    W <- W - lr' * X - lr' * wd * W * [X * W >= 0]                         cautious weight decay
Each piece is a switch of the TrainConfig, so the 324e69c recipe (no MuonEq, no Muon+, beta2 0.95,
scale 1.02) and plain Muon are one override away. The update runs in bf16 on CUDA (as nanochat's
COMPUTE_DTYPE) and in fp32 elsewhere (bf16 matmuls are slow on CPUs).

Distributed: no DDP. Each rank accumulates its own gradients; Muon's step reduces every matrix's
gradient to the rank that owns it (matrix i belongs to rank i % world), the owner computes the
update, and broadcasts the new weights; AdamW shards its state the same way (parameter j of its
groups on rank j % world: its memory divided by the ranks, as nanochat's MuonAdamW shards it by
slices of each large tensor). The reduces start in step(), after the backward, as nanochat's: the
model is compiled as one graph, whose backward hands every gradient over when it ends, so launching
them from gradient hooks would overlap nothing (docs/gpu.md, tests/test_backward_overlap.py).
On one process nothing is communicated and the update is the per-matrix function above. Muon's
state (momentum, second moment) lives on the owner only: a checkpoint gathers it to rank 0
(`Muon.full_state_dict`), and loading keeps each rank's share, so a resume on any world size
continues with every matrix's state.

Stacked (`stacked=True`, the GPU presets' `muon_stacked`): each rank stacks the matrices it owns by
shape and runs one muon_update per shape on the (K, rows, cols) stack, compiled where `compiled`
(as nanochat 92d63d4's MuonAdamW, which stacks same-shape parameters and runs muon_step_fused,
torch.compile'd, once per group, with the changing lr, momentum and weight decay as 0-d tensors so
that no new value recompiles). Ownership, communication and the checkpointed state are those of
the per-matrix path; the update agrees with it to rounding (tests/test_optim.py). On a GPU the
per-matrix path launches about 86 kernels per matrix; the stacked, compiled one a few per shape.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.distributed as dist

from xsa.stack.attention import LEARNED
from xsa.stack.config import scaling_params

# Quintic Newton-Schulz (Keller Jordan's Muon): coefficients chosen to maximise the slope at zero,
# so 5 steps bring small singular values up fast; the price is that the result is only roughly
# orthogonal, with singular values scattered around 1 (about 0.7 to 1.2) instead of exactly 1.
QUINTIC_COEFFS = (3.4445, -4.7750, 2.0315)

# Polar Express (Amsel, Persson, Musco, Gower 2025, arXiv:2505.16932): a different odd quintic per
# step, optimal in the minimax sense for 5 steps (safety factor 2e-2, cushion 2), as nanochat uses.
# It converges much tighter to 1 than the fixed quintic.
POLAR_EXPRESS_COEFFS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
ADAMW_EPS = 1e-10
B_REF = 2**19  # nanochat's d12 reference batch: batch_lr_scaling and weight_decay_scaling are relative to it


def orthogonalize(G: torch.Tensor, steps: int = 5, schedule: str = "polar_express", scale: float = 1.01) -> torch.Tensor:
    """Approximate the orthogonal polar factor U V^T of G = U S V^T (G: (..., rows, cols)).

    Each step applies an odd polynomial X <- a X + b (X X^T) X + c (X X^T)^2 X, which maps every
    singular value s to a s + b s^3 + c s^5 and leaves the singular vectors alone. G is first divided
    by its Frobenius norm (an upper bound of the spectral norm) times `scale` (Polar Express: a small
    safety margin below 1), the range the polynomials are designed for. Runs in bf16 on CUDA (fast
    and stable for these polynomials), fp32 elsewhere; returns G's dtype.
    """
    if schedule == "quintic":
        coeffs, scale = [QUINTIC_COEFFS] * steps, 1.0
    elif schedule == "polar_express":
        if steps > len(POLAR_EXPRESS_COEFFS):
            raise ValueError(f"steps: Polar Express has coefficients for at most {len(POLAR_EXPRESS_COEFFS)} steps")
        coeffs = POLAR_EXPRESS_COEFFS[:steps]
    else:
        raise ValueError(f"schedule: unknown orthogonalisation schedule {schedule!r} (polar_express or quintic)")
    X = G.bfloat16() if G.is_cuda else G.float()
    # work on the wide orientation so that X X^T is the smaller Gram matrix
    tall = X.size(-2) > X.size(-1)
    if tall:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) * scale + 1e-6)
    for a, b, c in coeffs:
        A = X @ X.mT
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    if tall:
        X = X.mT
    return X.to(G.dtype)


def normuon_scale(u: torch.Tensor, second: torch.Tensor, beta2: float) -> torch.Tensor:
    """NorMuon (arXiv:2510.05491) as nanochat: rescale each row (tall or square matrices) or column
    (wide ones) of the orthogonalised update by the inverse root of its running mean square, then
    restore the update's Frobenius norm. `second` is the running mean square, (rows, 1) or (1, cols),
    updated in place."""
    red = -1 if u.size(-2) >= u.size(-1) else -2
    v_mean = u.float().square().mean(dim=red, keepdim=True)
    size = u.size(red)
    v_norm = (v_mean.sum(dim=(-2, -1), keepdim=True) * size).sqrt()
    second.lerp_(v_mean.to(second.dtype), 1 - beta2)
    step = second.clamp_min(1e-10).rsqrt()
    v_norm_new = ((v_mean * size) * step.float().square()).sum(dim=(-2, -1), keepdim=True).sqrt()
    return u * (step * (v_norm / v_norm_new.clamp_min(1e-10))).to(u.dtype)


def second_moment_shape(shape) -> tuple[int, int]:
    rows, cols = shape[-2], shape[-1]
    return (rows, 1) if rows >= cols else (1, cols)


@torch.no_grad()
def muon_update(p: torch.Tensor, g: torch.Tensor, buf: torch.Tensor, second: torch.Tensor | None, *,
                lr: float, momentum: float, weight_decay: float, ns_steps: int = 5,
                schedule: str = "polar_express", ns_scale: float = 1.01, muon_eq: bool = True,
                muon_plus: bool = True, beta2: float | None = 0.9) -> None:
    """One Muon update of the matrix p in place, from its gradient g (see the module docstring).
    buf: the momentum buffer (p's shape); second: NorMuon's running mean square (None: off)."""
    buf.lerp_(g, 1 - momentum)
    g = g.lerp(buf, momentum)
    X = g.bfloat16() if g.is_cuda else g
    if muon_eq:  # rescale each row to the mean row norm: a better-conditioned spectrum to orthogonalise
        target = X.float().norm(dim=(-2, -1), keepdim=True) / (X.size(-2) ** 0.5)
        rows = X.float().norm(dim=-1, keepdim=True).clamp_min(1e-6)
        X = X * (target / rows).to(X.dtype)
    u = orthogonalize(X, ns_steps, schedule, ns_scale).to(p.dtype)
    if muon_plus:  # snap the norm to that of an exactly semi-orthogonal matrix
        norm = u.float().norm(dim=(-2, -1), keepdim=True).clamp_min(1e-6)
        u = u * (min(u.size(-2), u.size(-1)) ** 0.5 / norm).to(u.dtype)
    if beta2 is not None:
        u = normuon_scale(u, second, beta2)
    lr = lr * max(1.0, p.size(-2) / p.size(-1)) ** 0.5
    mask = (u * p) >= 0  # cautious weight decay: decay only where update and weight agree in sign
    p.sub_(lr * u + (lr * weight_decay) * p * mask)


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Muon(torch.optim.Optimizer):
    """MomentUm Orthogonalized by Newton-Schulz, for 2-D weight matrices only (muon_update per matrix).

    Under torch.distributed matrix i is owned by rank i % world: its gradient is reduced to the
    owner, the owner updates it, and broadcasts it back (so each matrix is orthogonalised once,
    not on every rank). The trainer drives group['lr'], group['momentum'] and group['weight_decay'].
    """

    def __init__(self, params, lr: float = 0.02, momentum: float = 0.95, weight_decay: float = 0.0,
                 ns_steps: int = 5, schedule: str = "polar_express", ns_scale: float = 1.01,
                 muon_eq: bool = True, muon_plus: bool = True, beta2: float | None = 0.9,
                 stacked: bool = False, compiled: bool = False):
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, ns_steps=ns_steps, schedule=schedule,
                        ns_scale=ns_scale, muon_eq=muon_eq, muon_plus=muon_plus, beta2=beta2)
        super().__init__(params, defaults)
        self.stacked = stacked
        # the stacked update, compiled once per stack shape; the scheduled scalars as 0-d CPU tensors
        self._update = torch.compile(muon_update, dynamic=False, fullgraph=True) if compiled else muon_update
        self._scalars = {k: torch.zeros((), dtype=torch.float32) for k in ("lr", "momentum", "weight_decay")}
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon takes 2-D matrices only, got a parameter of shape {tuple(p.shape)}")

    def _state(self, p, beta2):
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p)
            if beta2 is not None:
                state["second_momentum_buffer"] = torch.zeros(second_moment_shape(p.shape), dtype=p.dtype,
                                                               device=p.device)
        return state

    @torch.no_grad()
    def step(self):
        if self.stacked:
            return self._step_stacked()
        rank, world = _world()
        for group in self.param_groups:
            # matrix i of a group belongs to rank i % world, whether or not it has a gradient, so that
            # ownership is a fixed function of the model (full_state_dict and load_state_dict use it)
            params = [(i, p) for i, p in enumerate(group["params"]) if p.grad is not None]
            # phase 1: every gradient on its way to its owner
            works = [dist.reduce(p.grad, dst=i % world, async_op=True) if world > 1 else None
                     for i, p in params]
            # phase 2: each owner updates its matrices and sends them out
            sends = []
            for (i, p), work in zip(params, works):
                owner = i % world
                if work is not None:
                    work.wait()
                if owner == rank:
                    g = p.grad.div_(world) if world > 1 else p.grad
                    state = self._state(p, group["beta2"])
                    muon_update(p, g, state["momentum_buffer"], state.get("second_momentum_buffer"),
                                lr=group["lr"], momentum=group["momentum"], weight_decay=group["weight_decay"],
                                ns_steps=group["ns_steps"], schedule=group["schedule"], ns_scale=group["ns_scale"],
                                muon_eq=group["muon_eq"], muon_plus=group["muon_plus"], beta2=group["beta2"])
                if world > 1:
                    sends.append(dist.broadcast(p, src=owner, async_op=True))
            for w in sends:
                w.wait()

    def _update_stack(self, group, params: list) -> None:
        """One muon_update of the same-shape matrices `params` (all owned here) as one stack."""
        states = [self._state(p, group["beta2"]) for p in params]
        P, G = torch.stack(params), torch.stack([p.grad for p in params])
        M = torch.stack([s["momentum_buffer"] for s in states])
        S = torch.stack([s["second_momentum_buffer"] for s in states]) if group["beta2"] is not None else None
        for k, t in self._scalars.items():
            t.fill_(group[k])
        self._update(P, G, M, S, **self._scalars, ns_steps=group["ns_steps"], schedule=group["schedule"],
                     ns_scale=group["ns_scale"], muon_eq=group["muon_eq"], muon_plus=group["muon_plus"],
                     beta2=group["beta2"])
        torch._foreach_copy_(params, list(P.unbind(0)))
        torch._foreach_copy_([s["momentum_buffer"] for s in states], list(M.unbind(0)))
        if S is not None:
            torch._foreach_copy_([s["second_momentum_buffer"] for s in states], list(S.unbind(0)))

    @torch.no_grad()
    def _step_stacked(self):
        """The stacked step: every gradient reduced to its owner, each owner's matrices updated one
        stack per shape, the new weights broadcast from their owners (ownership as step())."""
        rank, world = _world()
        for group in self.param_groups:
            params = [(i, p) for i, p in enumerate(group["params"]) if p.grad is not None]
            if world > 1:
                works = [dist.reduce(p.grad, dst=i % world, async_op=True) for i, p in params]
                for w in works:
                    w.wait()
            by_shape: dict[tuple, list] = {}
            for i, p in params:
                if i % world == rank:
                    if world > 1:
                        p.grad.div_(world)
                    by_shape.setdefault(tuple(p.shape), []).append(p)
            for same in by_shape.values():
                self._update_stack(group, same)
            if world > 1:
                for w in [dist.broadcast(p, src=i % world, async_op=True) for i, p in params]:
                    w.wait()

    @torch.no_grad()
    def full_state_dict(self) -> dict:
        """The state_dict of every matrix, gathered from the owner ranks (a collective: every rank
        calls it; the result is complete on rank 0, the other ranks get their own state_dict()).

        Each rank holds the momentum and NorMuon second moment of only the matrices it owns, so
        state_dict() of rank 0 alone would miss (world - 1) / world of them. The gathered state does
        not depend on the world size: load_state_dict keeps each rank's share of it, on any world size.
        """
        rank, world = _world()
        local = self.state_dict()
        if world == 1:
            return local
        state = {}
        for group, saved in zip(self.param_groups, local["param_groups"]):
            for i, (p, key) in enumerate(zip(group["params"], saved["params"])):
                owner = i % world
                own = self._state(p, group["beta2"]) if owner == rank else None  # zeros if never stepped
                entry = {}
                for name, shape in (("momentum_buffer", p.shape),
                                    ("second_momentum_buffer", second_moment_shape(p.shape))):
                    if name == "second_momentum_buffer" and group["beta2"] is None:
                        continue
                    t = own[name] if own is not None else torch.empty(shape, dtype=p.dtype, device=p.device)
                    dist.broadcast(t, src=owner)
                    if rank == 0:  # the other ranks drop what they received at once
                        entry[name] = t
                state[key] = entry
        return {"state": state, "param_groups": local["param_groups"]} if rank == 0 else local

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a full state (full_state_dict), then keep only the matrices this rank owns."""
        super().load_state_dict(state_dict)
        rank, world = _world()
        if world > 1:
            for group in self.param_groups:
                for i, p in enumerate(group["params"]):
                    if i % world != rank:
                        self.state.pop(p, None)


class AdamW(torch.optim.AdamW):
    """torch's AdamW (decoupled weight decay; the same update as nanochat's adamw_step_fused), its
    state sharded over the ranks (as nanochat 92d63d4's MuonAdamW, which shards by slices of each large
    tensor; here by whole tensors, the owner scheme of Muon): parameter j of the flattened
    groups belongs to rank j % world, which receives the summed gradient, updates it, holds its two
    moments, and broadcasts the new weights. On one process it is torch's AdamW."""

    def _owners(self) -> list[tuple[int, torch.Tensor]]:
        world = _world()[1]
        return [(j % world, p) for j, p in enumerate(p for g in self.param_groups for p in g["params"])]

    @torch.no_grad()
    def step(self, closure=None):
        rank, world = _world()
        if world == 1:
            return super().step(closure)
        owners = [(o, p) for o, p in self._owners() if p.grad is not None]
        for w in [dist.reduce(p.grad, dst=o, async_op=True) for o, p in owners]:
            w.wait()
        for o, p in owners:
            if o == rank:
                p.grad.div_(world)
            else:
                p.grad = None  # torch's AdamW skips it: no update, no state here
        loss = super().step(closure)
        for w in [dist.broadcast(p, src=o, async_op=True) for o, p in owners]:
            w.wait()
        return loss

    def full_state_dict(self) -> dict:
        """Every parameter's state, gathered from the owner ranks to rank 0 (a collective; the other
        ranks get their own state_dict()); load_state_dict keeps each rank's share on any world size."""
        rank, world = _world()
        local = self.state_dict()
        if world == 1:
            return local
        shares = [None] * world if rank == 0 else None
        dist.gather_object({k: {n: t.cpu() if torch.is_tensor(t) else t for n, t in v.items()}
                            for k, v in local["state"].items()}, shares, dst=0)
        if rank != 0:
            return local
        return {"state": {k: v for share in shares for k, v in share.items()}, "param_groups": local["param_groups"]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a full state (full_state_dict), then keep only the parameters this rank owns."""
        super().load_state_dict(state_dict)
        rank = _world()[0]
        for owner, p in self._owners():
            if owner != rank:
                self.state.pop(p, None)


def lr_scales(cfg) -> tuple[float, float]:
    """(batch scale, d_model scale): nanochat's sqrt(B / 2^19) where batch_lr_scaling is on, and the
    (n_embd / 768)^-0.5 of the AdamW learning rates."""
    batch = (cfg.total_batch_size / B_REF) ** 0.5 if cfg.batch_lr_scaling else 1.0
    return batch, (cfg.model.n_embd / 768) ** -0.5


def muon_weight_decay(cfg) -> float:
    """The Muon weight decay: cfg.weight_decay, or with weight_decay_scaling nanochat's rule
    wd * sqrt(B / 2^19) * (D_ref / D), D the run's target tokens and D_ref those of nanochat's d12
    (12 layers, 768 wide, 128-dim heads) at the same tokens:params ratio (base_train's T_epoch rule)."""
    if not cfg.weight_decay_scaling:
        return cfg.weight_decay
    ratio = cfg.param_data_ratio
    d12 = dataclasses.replace(cfg.model, n_layer=12, n_embd=768, n_head=6, n_kv_head=6,
                              xsa_layers="none", xsa_alpha=0.0, xsa_value="mixed", xsa_variant="xsa")
    target = int(ratio * scaling_params(cfg.model)) if ratio else cfg.num_tokens
    d_ref = (ratio or cfg.num_tokens / scaling_params(cfg.model)) * scaling_params(d12)
    return cfg.weight_decay * math.sqrt(cfg.total_batch_size / B_REF) * (d_ref / target)


def build_optimizers(model, cfg, world_size: int = 1) -> list[torch.optim.Optimizer]:
    """The optimizers of a GPT for a TrainConfig: [AdamW, Muon] (optimizer "muon") or [AdamW].

    Every param group records 'initial_lr' (the schedule multiplies it), 'initial_wd' and
    'decay_scheduled' (whether the weight-decay schedule drives it: the Muon matrices, and the
    matrices of the AdamW-only arm; the other AdamW groups keep their decay, as nanochat), and a
    'name' for logs. `world_size` is not needed: the optimizers read the process group.
    """
    del world_size
    groups = model.param_groups()
    batch, dmodel = lr_scales(cfg)
    emb = cfg.embedding_lr * dmodel * batch
    lrs = {"lm_head": cfg.unembedding_lr * dmodel * batch, "embedding": emb,
           "value_embeds": emb * cfg.value_embed_lr_scale, "resid_lambdas": cfg.scalar_lr * 0.01 * batch,
           "x0_lambdas": cfg.scalar_lr * batch, "smear": cfg.smear_lr,
           # the attention's learned vectors, each at its multiple of the scalar rate (attention.LEARNED)
           **{name: cfg.scalar_lr * what.scalar_lr * batch for name, what in LEARNED.items()
              if what.scalar_lr is not None}}
    adam = [dict(name=name, params=groups[name], lr=lrs[name], betas=cfg.adam_betas[name],
                 weight_decay=cfg.adam_weight_decay[name], decay_scheduled=False)
            for name in lrs if groups.get(name)]
    wd = muon_weight_decay(cfg)
    if cfg.optimizer == "adamw":
        # control arm: the block matrices join AdamW at their own lr, with the weight decay Muon would
        # have had (decoupled, on the same schedule)
        adam.append(dict(name="matrix", params=groups["matrix"], lr=cfg.adamw_matrix_lr * batch,
                         betas=cfg.adamw_matrix_betas, weight_decay=wd, decay_scheduled=True))
    # fused AdamW on CUDA saves kernel launches; the CPU path stays the plain, deterministic loop
    on_cuda = groups["embedding"][0].is_cuda
    optimizers = [AdamW(adam, eps=ADAMW_EPS, fused=True if on_cuda else None)]
    if cfg.optimizer == "muon":
        optimizers.append(Muon([dict(name="matrix", params=groups["matrix"], decay_scheduled=True)],
                               lr=cfg.matrix_lr * batch, momentum=cfg.muon_momentum, weight_decay=wd,
                               schedule=cfg.ns_schedule, ns_scale=cfg.ns_scale, muon_eq=cfg.muon_eq,
                               muon_plus=cfg.muon_plus, beta2=cfg.normuon_beta2, stacked=cfg.muon_stacked,
                               compiled=cfg.muon_stacked and (on_cuda or cfg.gpu_path)))
    for opt in optimizers:
        for g in opt.param_groups:
            g["initial_lr"] = g["lr"]
            g["initial_wd"] = g["weight_decay"]
    return optimizers
