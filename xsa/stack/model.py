"""
A nanochat GPT with Exclusive Self-Attention (XSA).

The stack is karpathy/nanochat's, one commit at a time (the recipe's fields of GPTConfig; see
xsa/stack/config.py RECIPES and the README's parity table): token embedding, RMSNorm without weights, an
optional smear of the previous token's embedding into each position, rotary embeddings applied to q
and k before QK-norm and a q/k scale, ReLU^2 MLP of width 4x, value embeddings on alternating layers
(the last always included) mixed into v by a per-KV-head gate scale*sigmoid(Linear(x[..., :C])),
per-layer residual and x0 scalars, an optional backout of the mid-depth residual before the final
norm, untied lm_head, soft-capped logits, no biases, zero-initialised output projections.
Not taken from nanochat (on purpose, see the README): sliding-window attention, fp8, FA3, bf16
master copies of the embeddings.

XSA (Zhai, 2026) removes from each head's attention output y_i its component along the token's own
value v_i, before the output projection:

    z_i = y_i - alpha * (<y_i, v_i> / (||v_i||^2 + eps)) * v_i
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from xsa.stack.config import ConfigError, GPTConfig
from xsa.stack.kvcache import KVCache
from xsa.stack.loss import chunked_softcap_cross_entropy

XSA_EPS = 1e-6
SMEAR_CHANNELS = 24  # the smear gate reads the first 24 channels of the current token's embedding
BACKOUT_INIT = 0.2  # nanochat's initial backout lambda


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
        # a learnable strength per head, initialised at alpha (AdamW group "xsa_gate"; init_weights)
        self.xsa_gate = (nn.Parameter(torch.full((self.n_head,), self.xsa_alpha))
                         if config.xsa_gate and self.xsa_alpha is not None else None)
        # the sink study's arms (config.attn_gate, attn_sink): a per-head output gate read off the same
        # channels as the value-embedding gate, zero-initialised (2 * sigmoid(0) = 1: neutral at step 0),
        # and a per-head sink logit, initialised at 0 (init_weights)
        self.attn_gate = nn.Linear(self.ve_channels, self.n_head, bias=False) if config.attn_gate else None
        self.attn_sink = nn.Parameter(torch.zeros(self.n_head)) if config.attn_sink else None
        # Diagnostics: set to a dict to receive this layer's q, k, v, y, z on the next forward
        self.capture: dict | None = None

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


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        self.attn = CausalSelfAttention(config, layer_idx)
        self.mlp = MLP(config)

    def forward(self, x, ve, cos_sin, kv_cache):
        x = x + self.attn(norm(x), ve, cos_sin, kv_cache)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        kv_dim = config.n_kv_head * config.head_dim
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = nn.ModuleList([Block(config, i) for i in range(config.n_layer)])
        self.value_embeds = nn.ModuleDict({
            str(i): nn.Embedding(config.vocab_size, kv_dim)
            for i in range(config.n_layer) if has_value_embedding(i, config.n_layer)})
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # x <- resid_lambdas[i] * x + x0_lambdas[i] * x0 before every block
        self.resid_lambdas = nn.Parameter(torch.ones(config.n_layer))
        self.x0_lambdas = nn.Parameter(torch.zeros(config.n_layer))
        # smear: x_t <- x_t + smear_lambda * sigmoid(smear_gate(x_t[:24])) * x_{t-1} (cheap bigram
        # information); backout: x <- x - backout_lambda * x_mid before the final norm. Named as
        # nanochat names them, so its weights load by name.
        if config.smear:
            self.smear_gate = nn.Linear(SMEAR_CHANNELS, 1, bias=False)
            self.smear_lambda = nn.Parameter(torch.zeros(1))
        if config.backout:
            self.backout_lambda = nn.Parameter(torch.full((1,), BACKOUT_INIT))
        # rotary tables for 10x the training length, so decoding past it is possible but bounded
        self.rotary_len = config.sequence_len * 10
        cos, sin = self._rotary_tables()
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def _rotary_tables(self, device=None):
        c = self.config
        inv_freq = 1.0 / (c.rope_base ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32, device=device) / c.head_dim))
        freqs = torch.outer(torch.arange(self.rotary_len, dtype=torch.float32, device=device), inv_freq)
        cos, sin = freqs.cos(), freqs.sin()
        if c.rotary_bf16:  # the values of bf16 tables, kept in fp32
            cos, sin = cos.bfloat16().float(), sin.bfloat16().float()
        return cos, sin

    @torch.no_grad()
    def init_weights(self):
        """The recipe's initialisation: uniform input projections (c_fc at init_fc_scale of the
        bound), zero output projections, a small lm_head, the per-layer scalars linear in depth."""
        c = self.config
        s = 3 ** 0.5 * c.n_embd ** -0.5  # uniform(-s, s) has std n_embd^-0.5
        nn.init.normal_(self.wte.weight, std=c.init_wte_std)
        nn.init.normal_(self.lm_head.weight, std=0.001)
        for block in self.blocks:
            attn, mlp = block.attn, block.mlp
            for lin in (attn.c_q, attn.c_k, attn.c_v):
                nn.init.uniform_(lin.weight, -s, s)
            nn.init.zeros_(attn.c_proj.weight)
            nn.init.uniform_(mlp.c_fc.weight, -s * c.init_fc_scale, s * c.init_fc_scale)
            nn.init.zeros_(mlp.c_proj.weight)
        frac = torch.arange(c.n_layer, dtype=torch.float32) / max(c.n_layer - 1, 1)
        (r0, r1), (x0, x1) = c.init_resid_lambdas, c.init_x0_lambdas
        self.resid_lambdas.copy_(r0 - (r0 - r1) * frac)
        self.x0_lambdas.copy_(x0 - (x0 - x1) * frac)
        if c.smear:
            nn.init.zeros_(self.smear_lambda)
            nn.init.uniform_(self.smear_gate.weight, 0.0, c.init_gate_max)
        if c.backout:
            nn.init.constant_(self.backout_lambda, BACKOUT_INIT)
        for ve in self.value_embeds.values():
            nn.init.uniform_(ve.weight, -s, s)
        for block in self.blocks:
            if block.attn.ve_gate is not None:
                nn.init.uniform_(block.attn.ve_gate.weight, 0.0, c.init_gate_max)
            if block.attn.xsa_gate is not None:
                nn.init.constant_(block.attn.xsa_gate, block.attn.xsa_alpha)
            if block.attn.attn_gate is not None:
                nn.init.zeros_(block.attn.attn_gate.weight)
            if block.attn.attn_sink is not None:
                nn.init.zeros_(block.attn.attn_sink)
        cos, sin = self._rotary_tables(self.cos.device)
        self.cos.copy_(cos)
        self.sin.copy_(sin)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by optimizer role: Muon takes 'matrix' (every block matrix, value-embedding
        gates included, as nanochat), AdamW the rest (see xsa/stack/optim.py)."""
        smear = [getattr(self, n) for n in ("smear_gate", "smear_lambda", "backout_lambda") if hasattr(self, n)]
        groups = {
            "matrix": [p for p in self.blocks.parameters() if p.ndim == 2],
            "embedding": [self.wte.weight],
            "value_embeds": list(self.value_embeds.parameters()),
            "lm_head": [self.lm_head.weight],
            "resid_lambdas": [self.resid_lambdas],
            "x0_lambdas": [self.x0_lambdas],
            "smear": [p.weight if isinstance(p, nn.Linear) else p for p in smear],
            "xsa_gate": [b.attn.xsa_gate for b in self.blocks if b.attn.xsa_gate is not None],
            "attn_sink": [b.attn.attn_sink for b in self.blocks if b.attn.attn_sink is not None],
        }
        assert sum(len(g) for g in groups.values()) == len(list(self.parameters()))
        return groups

    def learned_gates(self) -> list[list[float] | None] | None:
        """The learned XSA strength of every layer and head (None for a layer without XSA), or None
        for a model without the gate: the summary records it, since git keeps no weights."""
        if not any(b.attn.xsa_gate is not None for b in self.blocks):
            return None
        return [None if b.attn.xsa_gate is None else [round(float(v), 6) for v in b.attn.xsa_gate.detach().cpu()]
                for b in self.blocks]

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def num_matmul_params(self) -> int:
        """Parameters that multiply the token stream (every Linear weight, as nanochat counts them);
        embeddings are lookups and the scalars do no matmul work."""
        return sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))

    def estimate_flops(self) -> float:
        """FLOPs per token for forward + backward: 6 per matmul weight, plus the attention scores."""
        c = self.config
        attn = 12 * c.n_layer * c.n_embd * c.sequence_len  # QK^T and AV, forward + backward
        return 6 * self.num_matmul_params() + attn

    def _smear(self, x: torch.Tensor, prev: torch.Tensor | None) -> torch.Tensor:
        """Add to each position the gated embedding of the position before it (for the chunk's first
        position, `prev`, the cached last token when decoding; none at the start of a sequence)."""
        before = x[:, :-1] if prev is None else torch.cat([prev, x[:, :-1]], dim=1)
        cur = x[:, 1:] if prev is None else x
        gate = self.smear_lambda * torch.sigmoid(self.smear_gate(cur[..., :SMEAR_CHANNELS]))
        out = cur + gate * before
        return torch.cat([x[:, :1], out], dim=1) if prev is None else out

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                kv_cache: KVCache | None = None, loss_reduction: str = "mean", loss_chunk: int = 0,
                last_only: bool = False):
        """Logits (B, T, V) without targets (last_only: the last position's, (B, 1, V), all that
        decoding reads, without a batch of prompts' B x T x V); with them the loss (mean over
        targets != -1, or (B, T) for loss_reduction "none"). loss_chunk > 0 (mean only) computes
        head, softcap and loss in chunks of that many rows of the B*T without the full logits (xsa.stack.loss)."""
        B, T = idx.shape
        c = self.config
        t0 = 0 if kv_cache is None else kv_cache.pos
        if t0 + T > self.rotary_len:
            raise ConfigError(f"sequence_len: {t0 + T} tokens exceed the rotary cache ({self.rotary_len})")
        cos, sin = self.cos[None, t0:t0 + T, None, :], self.sin[None, t0:t0 + T, None, :]
        x = norm(self.wte(idx))
        if kv_cache is not None and kv_cache.pad is not None:
            # a padded row sits pad positions later, which rotary embeddings do not see (they encode
            # distances); its padding is embedded as zero, so the smear adds nothing from it
            x = x * (torch.arange(t0, t0 + T, device=x.device) >= kv_cache.pad[:, None]).unsqueeze(-1).to(x.dtype)
        if c.smear:
            prev = None if kv_cache is None else kv_cache.prev_embedding
            if kv_cache is not None:
                kv_cache.prev_embedding = x[:, -1:]
            if prev is not None or T > 1:
                x = self._smear(x, prev)
        x0, x_mid, mid = x, None, c.n_layer // 2
        for i, block in enumerate(self.blocks):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](idx) if str(i) in self.value_embeds else None
            x = block(x, ve, (cos.to(x.dtype), sin.to(x.dtype)), kv_cache)
            if i == mid:
                x_mid = x
        if kv_cache is not None:
            kv_cache.advance(T)
        if c.backout and x_mid is not None:  # remove low-level features before the logits
            x = x - self.backout_lambda * x_mid
        if loss_chunk and targets is not None:
            if loss_reduction != "mean":
                raise ValueError(f"loss_chunk: the chunked loss is the mean only, not {loss_reduction!r}")
            return chunked_softcap_cross_entropy(norm(x).flatten(0, 1), self.lm_head.weight, targets.reshape(-1),
                                                 c.logit_softcap, loss_chunk)
        if last_only and targets is None:
            x = x[:, -1:]
        logits = self.lm_head(norm(x)).float()
        logits = c.logit_softcap * torch.tanh(logits / c.logit_softcap)
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1),
                               ignore_index=-1, reduction=loss_reduction)
        return loss.view(B, T) if loss_reduction == "none" else loss

    @torch.inference_mode()
    def generate(self, tokens: list[int], max_tokens: int, temperature: float = 0.0,
                 top_k: int | None = None, seed: int = 42):
        """Yield up to max_tokens new token ids after `tokens`, decoding with a KV cache.

        temperature 0 is greedy (deterministic); otherwise sampling from a seeded generator.
        """
        device = self.wte.weight.device
        c = self.config
        cache = KVCache(c.n_layer, 1, c.n_kv_head, c.head_dim, len(tokens) + max_tokens,
                        device=device, dtype=self.wte.weight.dtype)
        rng = torch.Generator(device=device).manual_seed(seed)
        ids = torch.tensor([tokens], dtype=torch.long, device=device)
        for _ in range(max_tokens):
            logits = self.forward(ids, kv_cache=cache, last_only=True)[:, -1, :]
            if temperature == 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits = logits.masked_fill(logits < v[:, [-1]], -float("inf"))
                probs = F.softmax(logits / temperature, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=rng)
            ids = nxt
            yield int(nxt.item())


def build(config: GPTConfig, seed: int, device: torch.device, meta: bool | None = None) -> GPT:
    """A GPT initialised from `seed` on `device`.

    On CUDA (meta=None) it is built on the meta device and initialised on the GPU, as nanochat's
    base_train (92d63d4): no CPU copy of the weights, and every rank draws the same weights from
    the seed. Elsewhere it is built and initialised on the CPU, as the committed runs were (their
    weights depend on the random numbers GPT() draws before init_weights)."""
    check_fits(config, device)
    torch.manual_seed(seed)
    if not (device.type == "cuda" if meta is None else meta):
        model = GPT(config)
        model.init_weights()
        return model.to(device)
    with torch.device("meta"):
        model = GPT(config)
    model.to_empty(device=device)
    model.init_weights()  # writes every parameter and the rotary buffers
    return model


def check_fits(config: GPTConfig, device: torch.device) -> None:
    """Refuse, before any module is made, a model whose weights, gradients and optimizer state (at most 16
    bytes a parameter, over an upper count: block matrices, a vocabulary table a layer and two) exceed memory."""
    params = 12 * config.n_layer * config.n_embd ** 2 + (config.n_layer + 2) * config.vocab_size * config.n_embd
    if device.type == "cuda":
        have = torch.cuda.mem_get_info(device)[1]
    else:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 16 * params > have:
        raise ConfigError(f"model: n_layer={config.n_layer}, n_embd={config.n_embd}, vocab_size={config.vocab_size} "
                          f"is about {params:.3g} parameters, {16 * params / 2**30:,.0f} GiB to train, more than this "
                          f"{device.type} device's {have / 2**30:,.0f} GiB")
