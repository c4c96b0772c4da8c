"""
Optimizers: Muon for the 2-D hidden matrices, AdamW for everything else.

The orthogonalisation is a pure function of a tensor (`orthogonalize`), tested on its own; `Muon`
is a thin optimizer around it; `build_optimizers` splits a GPT's parameters by role.

Matches karpathy/nanochat (commit 92d63d4):
- Muon on every matrix inside the transformer blocks, AdamW on the token embedding, the value
  embeddings, the lm_head and the two per-layer scalar vectors.
- Nesterov momentum (buffer <- lerp(buffer, g, 1-m); update from lerp(g, buffer, m)); the trainer
  warms m from 0.85 to its final value; 5 orthogonalisation steps, Polar Express by default.
- Muon lr scaled by max(1, rows/cols)^0.5; cautious weight decay (decay only the entries where the
  update and the weight agree in sign), which the trainer decays linearly to 0 over training.
- AdamW betas (0.8, 0.95), eps 1e-10, no weight decay; lrs: embedding and value embeddings at
  embedding_lr, lm_head at unembedding_lr, each scaled by (n_embd / 768)^-0.5 (tuned at width 768);
  resid_lambdas at scalar_lr * 0.01 and x0_lambdas at scalar_lr with beta1 0.96, both unscaled.

Simplified against nanochat:
- No NorMuon variance reduction (per-row/column second-moment rescaling after orthogonalisation):
  this is plain Muon, as in the seed paper's description.
- No sharded distributed Muon/AdamW: under DDP the gradients are all-reduced by DDP and every rank
  runs the same (replicated) update. Slower on many GPUs, identical in result.
- No fused/compiled kernels and no stacking of same-shape matrices: one matrix at a time.
- No batch-size lr scaling and no depth scaling of weight decay.
"""

from __future__ import annotations

import torch

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


def orthogonalize(G: torch.Tensor, steps: int = 5, schedule: str = "polar_express") -> torch.Tensor:
    """Approximate the orthogonal polar factor U V^T of G = U S V^T (G: (..., rows, cols)).

    Each step applies an odd polynomial X <- a X + b (X X^T) X + c (X X^T)^2 X, which maps every
    singular value s to a s + b s^3 + c s^5 and leaves the singular vectors alone. G is first scaled
    so its spectral norm is at most 1 (the Frobenius norm bounds it), the range the polynomials are
    designed for. Runs in bf16 on CUDA (fast and stable for these polynomials), fp32 elsewhere
    (bf16 matmuls are slow on CPUs); returns G's dtype.
    """
    if schedule == "quintic":
        coeffs = [QUINTIC_COEFFS] * steps
        scale = 1.0
    elif schedule == "polar_express":
        if steps > len(POLAR_EXPRESS_COEFFS):
            raise ValueError(f"steps: Polar Express has coefficients for at most {len(POLAR_EXPRESS_COEFFS)} steps")
        coeffs = POLAR_EXPRESS_COEFFS[:steps]
        scale = 1.01  # the coefficients assume a small safety margin below 1
    else:
        raise ValueError(f"schedule: unknown orthogonalisation schedule {schedule!r} (polar_express or quintic)")
    X = G.bfloat16() if G.is_cuda else G.float()
    # work on the wide orientation so that X X^T is the smaller Gram matrix
    tall = X.size(-2) > X.size(-1)
    if tall:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) * scale + 1e-7)
    for a, b, c in coeffs:
        A = X @ X.mT
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    if tall:
        X = X.mT
    return X.to(G.dtype)


class Muon(torch.optim.Optimizer):
    """MomentUm Orthogonalized by Newton-Schulz, for 2-D weight matrices only.

    Per matrix W (rows x cols) with gradient g:
        buf <- m * buf + (1 - m) * g;  u <- orthogonalize((1 - m) * g + m * buf)   (Nesterov)
        u <- u * max(1, rows/cols)^0.5
        W <- W - lr * wd * W * [mask]  - lr * u
    where mask = (u * W >= 0) for cautious weight decay, all ones for decoupled weight decay.
    The trainer drives group['lr'], group['momentum'] and group['weight_decay'] from its schedules.
    """

    def __init__(self, params, lr: float = 0.02, momentum: float = 0.95, ns_steps: int = 5,
                 schedule: str = "polar_express", weight_decay: float = 0.0, wd_mode: str = "cautious"):
        if wd_mode not in ("cautious", "decoupled"):
            raise ValueError(f"wd_mode: expected cautious or decoupled, got {wd_mode!r}")
        defaults = dict(lr=lr, momentum=momentum, ns_steps=ns_steps, schedule=schedule,
                        weight_decay=weight_decay, wd_mode=wd_mode)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon takes 2-D matrices only, got a parameter of shape {tuple(p.shape)}")

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, m, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - m)
                g = p.grad.lerp(buf, m)
                u = orthogonalize(g, group["ns_steps"], group["schedule"])
                u.mul_(max(1.0, p.size(0) / p.size(1)) ** 0.5)
                if wd != 0:
                    if group["wd_mode"] == "cautious":
                        p.sub_(p * (u * p >= 0), alpha=lr * wd)
                    else:
                        p.mul_(1 - lr * wd)
                p.add_(u, alpha=-lr)


ADAMW_BETAS = (0.8, 0.95)
ADAMW_EPS = 1e-10


def build_optimizers(model, cfg, world_size: int = 1) -> list[torch.optim.Optimizer]:
    """The optimizers of a GPT for a TrainConfig: [AdamW, Muon] (optimizer "muon") or [AdamW].

    Every param group records 'initial_lr' (the schedule multiplies it) and 'initial_wd' (the
    weight decay the schedule decays to 0), and a 'name' for logs. `world_size` does not change the
    update: DDP all-reduces gradients and each rank steps the full model (no sharding).
    """
    del world_size  # replicated updates (see module docstring)
    groups = model.param_groups()
    dmodel_scale = (cfg.model.n_embd / 768) ** -0.5
    adam = [
        dict(name="embedding", params=groups["embedding"], lr=cfg.embedding_lr * dmodel_scale),
        dict(name="value_embeds", params=groups["value_embeds"], lr=cfg.embedding_lr * dmodel_scale),
        dict(name="lm_head", params=groups["lm_head"], lr=cfg.unembedding_lr * dmodel_scale),
        dict(name="resid_lambdas", params=groups["resid_lambdas"], lr=cfg.scalar_lr * 0.01),
        # x0 lambdas use a longer first-moment memory, as nanochat does
        dict(name="x0_lambdas", params=groups["x0_lambdas"], lr=cfg.scalar_lr, betas=(0.96, 0.95)),
    ]
    for g in adam:
        g["weight_decay"] = 0.0
    if cfg.optimizer == "adamw":
        # control arm: the hidden matrices join AdamW at their own (unscaled) lr, with the weight decay
        # Muon would have had, decoupled
        adam.append(dict(name="matrix", params=groups["matrix"], lr=cfg.adamw_matrix_lr,
                         weight_decay=cfg.weight_decay))
    adam = [g for g in adam if g["params"]]  # e.g. a 1-layer model may have no value embeddings
    # fused AdamW on CUDA saves kernel launches; the CPU path stays the plain, deterministic loop
    on_cuda = groups["embedding"][0].is_cuda
    optimizers = [torch.optim.AdamW(adam, betas=ADAMW_BETAS, eps=ADAMW_EPS, weight_decay=0.0,
                                    fused=True if on_cuda else None)]
    if cfg.optimizer == "muon":
        muon = Muon([dict(name="matrix", params=groups["matrix"])], lr=cfg.matrix_lr,
                    momentum=cfg.muon_momentum, schedule=cfg.ns_schedule, weight_decay=cfg.weight_decay)
        optimizers.append(muon)
    for opt in optimizers:
        for g in opt.param_groups:
            g["initial_lr"] = g["lr"]
            g["initial_wd"] = g["weight_decay"]
    return optimizers
