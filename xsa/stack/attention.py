"""
Attention of the GPT (xsa/stack/model.py): the causal self-attention layer with its rotary embeddings
and QK-norm, the value-embedding gate, and the ways a head may change what it attends to or outputs,
each off by default: Exclusive Self-Attention and its registered variants (XSA_VARIANTS), the sink
study's learned sink logit (sink_attention) and per-head output gate.

XSA (Zhai, 2026) removes from each head's attention output y_i its component along the token's own
value v_i, before the output projection:

    z_i = y_i - alpha * (<y_i, v_i> / (||v_i||^2 + eps)) * v_i
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from xsa.stack.config import GPTConfig
from xsa.stack.kvcache import KVCache

XSA_EPS = 1e-6


def norm(x: torch.Tensor) -> torch.Tensor:
    # RMSNorm with no learnable weight
    return F.rms_norm(x, (x.size(-1),))


def has_value_embedding(layer_idx: int, n_layer: int) -> bool:
    # alternating layers, always including the last one
    return layer_idx % 2 == (n_layer - 1) % 2


def apply_rotary_emb(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (B, T, H, D); rotate the two halves of the head dimension as pairs
    d = x.size(-1) // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


def xsa_project(y: torch.Tensor, v: torch.Tensor, alpha, eps: float = XSA_EPS) -> torch.Tensor:
    """Exclusive self-attention: remove from y its component along the token's own value v.

    y: (B, T, H, D) attention output per query head.
    v: (B, T, Hkv, D) the value of the same token per KV head; H must be a multiple of Hkv.
    alpha: a number, or a tensor (H,) of per-head strengths (the learnable gate, config.xsa_gate).
    Under grouped-query attention each query head uses its KV head's value: the group dimension is
    split off y as a view and v is broadcast over it, so nothing is copied or repeated. Any strides
    work (the model passes transposed views of the attention layout).

    The dot product, the squared norm and the subtraction run in fp32 even when y and v are bf16
    (and autocast is on, which would otherwise run the reductions in bf16): the coefficient
    <y,v>/||v||^2 is a ratio of two reductions over D that bf16 rounds badly, and z is what is left
    after cancelling most of y. Only the result is rounded back to y's dtype.
    """
    H, Hkv = y.size(2), v.size(2)
    yg = y.unflatten(2, (Hkv, H // Hkv))  # (B, T, Hkv, G, D), a view
    vg = v.unsqueeze(3)  # (B, T, Hkv, 1, D), broadcast over the group
    with torch.autocast(y.device.type, enabled=False):
        yf, vf = yg.float(), vg.float()  # no copies in fp32
        dot = torch.linalg.vecdot(yf, vf).unsqueeze(-1)  # (B, T, Hkv, G, 1)
        sq = torch.linalg.vecdot(vf, vf).unsqueeze(-1)  # (B, T, Hkv, 1, 1)
        if isinstance(alpha, torch.Tensor):  # a learned gate per query head, (H,) -> (Hkv, G, 1)
            z = yf - (alpha.float().view(Hkv, H // Hkv, 1) * (dot / (sq + eps))) * vf
        else:  # z = y - alpha * coef * v, as one fused multiply-add
            z = torch.addcmul(yf, dot / (sq + eps), vf, value=-alpha)
    return z.to(y.dtype).flatten(2, 3)


# The output transforms of config.XSA_VARIANTS, by name: (y, v, alpha) -> z, shapes as xsa_project.
# The contract: z_i depends on the token's own y_i and v_i (and alpha) only, never on another
# position. Training runs every position at once, but KV-cache decoding (ChatCORE's generative tasks)
# passes a layer only the new tokens, so a variant that reads other tokens (XSA against the running
# mean of the values, say) trains as intended and decodes something else. The validation stage
# decodes with the cache and compares with the full forward for every registered variant
# (xsa.validation.check_kv_cache); a variant that needs other tokens must bring its own cache state.
XSA_VARIANTS = {"xsa": xsa_project}


def sink_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sink: torch.Tensor,
                   mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with a learned sink logit per head in each softmax's denominator and a zero value
    (config.attn_sink): softmax over [scores, sink], the sink's column dropped before the values, so a
    query may put weight on nothing. Written out (no fused kernel takes an extra logit): the scores are
    materialised, which costs T x T memory a head, fine at the CPU study's T.

    q: (B, H, T, D); k, v: (B, Hkv, Tk, D); sink: (H,); mask: which keys each query sees, bool
    broadcastable to (B, H, T, Tk), or None for causal attention over a chunk that starts at key 0.
    Returns (y (B, H, T, D), the sink's weight (B, H, T)). The softmax runs in fp32 under autocast."""
    B, H, T, D = q.shape
    if k.size(1) != H:  # grouped-query attention: each query head reads its KV head
        k, v = k.repeat_interleave(H // k.size(1), dim=1), v.repeat_interleave(H // v.size(1), dim=1)
    scores = (q @ k.transpose(-1, -2)).float() * D ** -0.5  # SDPA's default scale
    if mask is None:
        mask = torch.ones(T, k.size(2), dtype=torch.bool, device=q.device).tril(diagonal=k.size(2) - T)
    scores = scores.masked_fill(~mask, float("-inf"))
    logits = torch.cat([scores, sink.float().view(1, H, 1, 1).expand(B, H, T, 1)], dim=-1)
    p = torch.softmax(logits, dim=-1)
    return p[..., :-1].to(v.dtype) @ v, p[..., -1]


@dataclass(frozen=True)
class Learned:
    """A learned parameter of the layer beyond its projections, present where its config field is on: the
    layer's attribute of the same name is then a Parameter, or a Linear whose weight it is."""
    init: float | str  # its value from GPT.init_weights: a number, or the layer's attribute that holds it
    neutral: float | None  # a value at which it changes nothing (validation.check_attention_arms_off)
    # a vector's AdamW group (of its name, betas and decay in config.ADAM_GROUPS): its learning rate as this
    # multiple of cfg.scalar_lr, times the batch scale (optim.build_optimizers); None for a block matrix,
    # which Muon takes with the others (GPT.param_groups: p.ndim == 2)
    scalar_lr: float | None


# Every such parameter, so that the model's init, its parameter groups and the optimizers loop over this
# table and a new one is declared here alone. The order is the AdamW groups' (after smear): it decides
# the optimizer state's layout, which the committed runs fix. The inits draw nothing at random, so every
# other weight is drawn as in a model without them.
LEARNED = {
    # alpha per head (config.xsa_gate), a gate near 1: the residual scalars' small rate
    "xsa_gate": Learned(init="xsa_alpha", neutral=None, scalar_lr=0.01),
    # the sink study's output gate, zero-initialised: 2 * sigmoid(0) = 1, so neutral from step 0
    "attn_gate": Learned(init=0.0, neutral=0.0, scalar_lr=None),
    # the sink logit: of order 1 and it must move by several, the x0 scalars' rate; at -1e4 it weighs nothing
    "attn_sink": Learned(init=0.0, neutral=-1e4, scalar_lr=1.0),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_head, self.n_kv_head = config.n_head, config.n_kv_head
        self.head_dim = config.n_embd // config.n_head
        kv_dim = self.n_kv_head * self.head_dim
        self.c_q = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.c_k = nn.Linear(config.n_embd, kv_dim, bias=False)
        self.c_v = nn.Linear(config.n_embd, kv_dim, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.ve_channels, self.ve_scale = config.ve_gate_channels, config.ve_gate_scale
        self.ve_gate = (nn.Linear(self.ve_channels, self.n_kv_head, bias=False)
                        if has_value_embedding(layer_idx, config.n_layer) else None)
        self.qk_scale = config.qk_scale
        # XSA at this layer (None = standard attention), which transform, which value it projects against
        self.xsa_alpha = float(config.xsa_alpha) if layer_idx in config.xsa_layer_set() else None
        self.xsa_variant = config.xsa_variant
        self.xsa_plain = config.xsa_value == "plain"
        # the parameters of LEARNED (their init, group and rate are declared there): a learnable strength
        # per head, initialised at alpha; the sink study's arms, a per-head output gate read off the same
        # channels as the value-embedding gate, and a per-head sink logit
        self.xsa_gate = (nn.Parameter(torch.full((self.n_head,), self.xsa_alpha))
                         if config.xsa_gate and self.xsa_alpha is not None else None)
        self.attn_gate = nn.Linear(self.ve_channels, self.n_head, bias=False) if config.attn_gate else None
        self.attn_sink = nn.Parameter(torch.zeros(self.n_head)) if config.attn_sink else None
        # Diagnostics: set to a dict to receive this layer's q, k, v, y, z on the next forward
        self.capture: dict | None = None

    def learned(self) -> dict[str, nn.Parameter]:
        """This layer's parameters of LEARNED, those its config turned on, by name (a Linear's weight)."""
        modules = {name: getattr(self, name) for name in LEARNED}
        return {name: m.weight if isinstance(m, nn.Linear) else m for name, m in modules.items() if m is not None}

    @torch.no_grad()
    def init_learned(self, neutral: bool = False) -> None:
        """Set the parameters of LEARNED to their initial values (GPT.init_weights), or with `neutral` to
        the values at which they change nothing (those that have one)."""
        for name, p in self.learned().items():
            value = LEARNED[name].neutral if neutral else LEARNED[name].init
            if value is not None:
                p.fill_(getattr(self, value) if isinstance(value, str) else value)

    def forward(self, x, ve, cos_sin, kv_cache: KVCache | None):
        B, T, C = x.shape
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim)
        k = self.c_k(x).view(B, T, self.n_kv_head, self.head_dim)
        v_plain = self.c_v(x).view(B, T, self.n_kv_head, self.head_dim)
        v = v_plain
        if ve is not None:
            gate = self.ve_scale * torch.sigmoid(self.ve_gate(x[..., :self.ve_channels]))  # (B, T, Hkv)
            v = v + gate.unsqueeze(-1) * ve.view(B, T, self.n_kv_head, self.head_dim)
        cos, sin = cos_sin
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        q, k = norm(q), norm(k)
        if self.qk_scale != 1.0:  # sharper attention at init, the scale split between q and k
            q, k = q * self.qk_scale, k * self.qk_scale
        # (B, T, H, D) -> (B, H, T, D): heads become a batch dimension for attention
        q, k, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        gqa = self.n_head != self.n_kv_head
        mask, sink_weight, k_all, v_all = None, None, k, vt
        if kv_cache is not None:
            mask = kv_cache.mask(T, x.device)  # before insert: the cache's position is the chunk's start
            k_all, v_all = kv_cache.insert(self.layer_idx, k, vt)
        if self.attn_sink is not None:
            y, sink_weight = sink_attention(q, k_all, v_all, self.attn_sink, mask)
        elif kv_cache is None:
            y = F.scaled_dot_product_attention(q, k, vt, is_causal=True, enable_gqa=gqa)
        else:
            y = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, enable_gqa=gqa)
        # (B, T, H, D) in memory: the copy that c_proj's reshape would make anyway, made before XSA so
        # that y, v and z share one layout and XSA's elementwise ops run as flat loops
        y = y.transpose(1, 2).contiguous()
        # XSA projects against the token's own value: the new tokens' v, also when decoding
        v_self = v_plain if self.xsa_plain else v
        alpha = self.xsa_alpha if self.xsa_gate is None else self.xsa_gate
        z = y if self.xsa_alpha is None else XSA_VARIANTS[self.xsa_variant](y, v_self, alpha)
        gate = None
        if self.attn_gate is not None:  # per head and token; a scalar on z_i, so it commutes with XSA
            gate = 2 * torch.sigmoid(self.attn_gate(x[..., :self.ve_channels]))  # (B, T, H)
            z = z * gate.unsqueeze(-1).to(z.dtype)
        if self.capture is not None:
            self.capture.update(q=q.detach(), k=k.detach(), y=y.detach(), z=z.detach(),
                                v=v_self.detach().transpose(1, 2))
            if gate is not None:
                self.capture["gate"] = gate.detach()
            if sink_weight is not None:
                self.capture["sink_weight"] = sink_weight.detach()  # (B, H, T)
        return self.c_proj(z.view(B, T, C))
