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

The attention layer, XSA's projection among its output transforms, is xsa/stack/attention.py.
"""

from __future__ import annotations

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from xsa.stack.attention import LEARNED, CausalSelfAttention, has_value_embedding, norm
from xsa.stack.config import ConfigError, GPTConfig
from xsa.stack.kvcache import KVCache
from xsa.stack.loss import chunked_softcap_cross_entropy

SMEAR_CHANNELS = 24  # the smear gate reads the first 24 channels of the current token's embedding
BACKOUT_INIT = 0.2  # nanochat's initial backout lambda


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
            block.attn.init_learned()  # the XSA gate and the attention arms (attention.LEARNED)
        cos, sin = self._rotary_tables(self.cos.device)
        self.cos.copy_(cos)
        self.sin.copy_(sin)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by optimizer role: Muon takes 'matrix' (every block matrix, value-embedding
        gates included, as nanochat), AdamW the rest (see xsa/stack/optim.py)."""
        smear = [getattr(self, n) for n in ("smear_gate", "smear_lambda", "backout_lambda") if hasattr(self, n)]
        learned = [b.attn.learned() for b in self.blocks]
        groups = {
            "matrix": [p for p in self.blocks.parameters() if p.ndim == 2],
            "embedding": [self.wte.weight],
            "value_embeds": list(self.value_embeds.parameters()),
            "lm_head": [self.lm_head.weight],
            "resid_lambdas": [self.resid_lambdas],
            "x0_lambdas": [self.x0_lambdas],
            "smear": [p.weight if isinstance(p, nn.Linear) else p for p in smear],
            # the attention's learned vectors, a group each (its matrices are in "matrix" above)
            **{name: [ps[name] for ps in learned if name in ps]
               for name, what in LEARNED.items() if what.scalar_lr is not None},
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
