"""
The validation stage: numerical checks that the XSA path is what the paper says it is.

Each check builds its own small random inputs (fp32, fixed seed), measures one quantity and
compares it with a tolerance. The tests assert every check passes; notebooks/00_validation.ipynb
shows the same table, so a reader sees the measured numbers, not just a green tick.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from xsa.stack import config
from xsa.stack.config import GPTConfig
from xsa.stack.kvcache import KVCache
from xsa.stack.attention import sink_attention, xsa_project
from xsa.stack.model import GPT
from xsa.stack.optim import orthogonalize

TINY = dict(sequence_len=32, vocab_size=97, n_layer=3, n_head=4, n_kv_head=4, n_embd=64)
ARMS_ON = {field: True for field in config.ARM_LABELS}  # every attention arm beside XSA (the sink study's)


@dataclass
class Check:
    name: str
    measured: float
    tolerance: float
    detail: str

    @property
    def passed(self) -> bool:
        return self.measured <= self.tolerance

    def as_row(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def random_model(seed: int = 0, **overrides) -> GPT:
    """A GPT (tiny, unless the overrides give a shape) whose zero-initialised projections are perturbed,
    so every path carries signal."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**{**TINY, **overrides}))
    model.init_weights()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _random_yv(seed: int, n_head: int = 8, n_kv_head: int = 8, shape=(3, 17), d: int = 16):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(*shape, n_head, d, generator=g)
    v = torch.randn(*shape, n_kv_head, d, generator=g)
    return y, v


def _max_abs_cos(z: torch.Tensor, v: torch.Tensor) -> float:
    return F.cosine_similarity(z, v, dim=-1).abs().max().item()


def check_alpha0_equals_standard(seed: int = 0) -> Check:
    """(a) alpha = 0 through the XSA formula equals standard attention: logits and gradients."""
    idx = torch.randint(0, TINY["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(seed))
    base = random_model(seed)
    xsa0 = GPT(GPTConfig(**TINY, xsa_alpha=0.0, xsa_layers="all"))
    xsa0.load_state_dict(base.state_dict())
    worst = (base(idx) - xsa0(idx)).abs().max().item()
    base(idx, idx).backward()
    xsa0(idx, idx).backward()
    for pa, pb in zip(base.parameters(), xsa0.parameters()):
        worst = max(worst, (pa.grad - pb.grad).abs().max().item())
    return Check("alpha=0 equals standard attention (logits, grads)", worst, 1e-6,
                 "max |difference| over logits and every parameter gradient, fp32")


def check_orthogonal(seed: int = 1) -> Check:
    """(b) at alpha = 1 the output is orthogonal to the token's own value, per head and token."""
    y, v = _random_yv(seed)
    worst = _max_abs_cos(xsa_project(y, v, 1.0), v)
    model = random_model(seed, xsa_alpha=1.0, xsa_layers="all")
    for block in model.blocks:
        block.attn.capture = {}
    model(torch.randint(0, TINY["vocab_size"], (2, 24)))
    for block in model.blocks:
        cap = block.attn.capture
        v_heads = cap["v"].transpose(1, 2).repeat_interleave(model.config.n_head // model.config.n_kv_head, 2)
        # position 0 attends only to itself: y_0 = v_0, so z_0 is ~0 and its direction is noise
        worst = max(worst, _max_abs_cos(cap["z"][:, 1:], v_heads[:, 1:]))
    return Check("alpha=1: |cos(z, v)| per head and token", worst, 1e-5,
                 "random y, v and every layer of a random model (positions >= 1)")


def check_idempotent(seed: int = 2) -> Check:
    """(b) projecting twice changes nothing."""
    y, v = _random_yv(seed)
    z = xsa_project(y, v, 1.0)
    return Check("alpha=1 projection is idempotent", (xsa_project(z, v, 1.0) - z).abs().max().item(), 1e-5,
                 "max |P(P(y)) - P(y)|")


def check_parallel_vanishes(seed: int = 3) -> Check:
    """(b) y parallel to v gives z = 0."""
    _, v = _random_yv(seed)
    y = 2.5 * v
    return Check("y parallel to v gives z = 0", xsa_project(y, v, 1.0).abs().max().item(), 1e-5,
                 "max |z| for y = 2.5 v (|y| ~ 10)")


def check_linear_in_alpha(seed: int = 4) -> Check:
    """(b) z is linear in alpha: z(a) = y + a (z(1) - y)."""
    y, v = _random_yv(seed)
    z1 = xsa_project(y, v, 1.0)
    worst = max((xsa_project(y, v, a) - (y + a * (z1 - y))).abs().max().item() for a in (0.0, 0.25, 0.5, 0.75))
    return Check("z is linear in alpha", worst, 1e-5, "alphas 0, 0.25, 0.5, 0.75 against the line through z(0), z(1)")


def check_gqa_broadcast(seed: int = 5) -> Check:
    """(c) under GQA, broadcasting the KV head's value equals repeating it per query head."""
    y, v = _random_yv(seed, n_head=8, n_kv_head=2)
    ref = xsa_project(y, v.repeat_interleave(4, dim=2), 0.7)
    return Check("GQA broadcast equals repeat_interleave", (xsa_project(y, v, 0.7) - ref).abs().max().item(), 1e-6,
                 "8 query heads over 2 KV heads, alpha 0.7")


def check_kv_cache(seed: int = 6, variant: str = "xsa") -> Check:
    """(d) decoding with a KV cache (a prefix chunk, then one token at a time) equals the full forward,
    for one attention variant: run_checks runs it for every registered one (attention.XSA_VARIANTS: a
    variant may read the token's own value only, which this check holds it to)."""
    model = random_model(seed, n_kv_head=2, xsa_alpha=1.0, xsa_layers="all", xsa_variant=variant)
    c = model.config
    idx = torch.randint(0, c.vocab_size, (2, 20), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full = model(idx)
        cache = KVCache(c.n_layer, 2, c.n_kv_head, c.n_embd // c.n_head, 20)
        parts = [model(idx[:, :12], kv_cache=cache)]
        parts += [model(idx[:, t:t + 1], kv_cache=cache) for t in range(12, 20)]
    return Check(f"KV-cache decoding equals full forward ({variant})", (torch.cat(parts, 1) - full).abs().max().item(),
                 1e-5, f"variant {variant}, GQA 4/2 heads, alpha 1, prefix of 12 then 8 single tokens, "
                 "max |logit difference|")


def check_attention_arms_off(seed: int = 8) -> Check:
    """(g) the attention arms (config.ARM_LABELS), each at the value where it should change nothing
    (attention.LEARNED: the output gate at its zero initialisation is exactly 1 = 2 * sigmoid(0); a sink
    at -1e4 weighs nothing), leave the model as it was: with every arm on and another model's weights, a
    model computes its logits. And sink attention with the sink at -inf is SDPA."""
    idx = torch.randint(0, TINY["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(seed))
    base = random_model(seed, xsa_alpha=1.0, xsa_layers="all")
    armed = GPT(GPTConfig(**TINY, xsa_alpha=1.0, xsa_layers="all", **ARMS_ON))
    missing = armed.load_state_dict(base.state_dict(), strict=False).missing_keys
    for block in armed.blocks:
        block.attn.init_learned(neutral=True)
    own = [p for block in armed.blocks for p in block.attn.learned().values()]
    arms = {name for name, p in armed.named_parameters() if any(p is q for q in own)}
    worst = (base(idx) - armed(idx)).abs().max().item() if set(missing) == arms else float("inf")
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 4, 17, 16, generator=g) for _ in range(3))
    y, w = sink_attention(q, k[:, :2], v[:, :2], torch.full((4,), -1e4), None)
    ref = F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], is_causal=True, enable_gqa=True)
    worst = max(worst, (y - ref).abs().max().item(), w.abs().max().item())
    return Check("attention gate at init and sink at -inf change nothing", worst, 1e-5,
                 "max |logit difference| of a model with every attention arm at its neutral value (the gate at "
                 "init, the sink at -1e4), and of sink attention at -inf against SDPA")


def check_sink_weight(seed: int = 9) -> Check:
    """(g) a sink's weight is a share: in [0, 1], and 1 minus what the keys take; the keys' weights
    plus the sink's sum to 1 in every row. Measured: the largest violation of either."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 4, 17, 16, generator=g), torch.randn(2, 4, 17, 16, generator=g)
    v = torch.eye(17).expand(2, 4, 17, 17)  # y_i = the row of key weights itself
    worst = 0.0
    for sink in (torch.full((4,), -30.0), torch.zeros(4), torch.tensor([-2.0, 0.0, 3.0, 30.0])):
        y, w = sink_attention(q, k, v, sink, None)
        outside = torch.relu(-w).max().item() + torch.relu(w - 1).max().item()
        worst = max(worst, outside, (y.sum(-1) + w - 1).abs().max().item())
    return Check("sink weight in [0, 1], keys and sink sum to 1", worst, 1e-5,
                 "sink logits -30, 0 and mixed up to 30; max violation over rows")


def check_orthogonal_with_arms(seed: int = 10) -> Check:
    """(g) XSA stays orthogonal with the gate and the sink on: the gate scales z_i, the sink scales y_i,
    and neither turns z_i towards v_i."""
    model = random_model(seed, xsa_alpha=1.0, xsa_layers="all", **ARMS_ON)
    for block in model.blocks:
        block.attn.capture = {}
    model(torch.randint(0, TINY["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(seed)))
    worst = 0.0
    for b in model.blocks:
        cap = b.attn.capture  # one KV head a query head here: v per query head as captured
        y, z, v = cap["y"][:, 1:], cap["z"][:, 1:], F.normalize(cap["v"].transpose(1, 2)[:, 1:], dim=-1)
        # what is left along v, relative to |y|: a sink can shrink y (and so z) to where cos(z, v) is noise
        worst = max(worst, ((z * v).sum(-1).abs() / y.norm(dim=-1)).max().item())
    return Check("alpha=1 with gate and sink: |<z, v>| / (|y| |v|)", worst, 1e-5,
                 "every layer of a random model with both arms on (positions >= 1)")


def check_muon_band(seed: int = 7) -> Check:
    """(f) after Muon's orthogonalisation (5 Polar Express steps) the singular values lie near 1."""
    G = torch.randn(64, 128, generator=torch.Generator().manual_seed(seed))
    s = torch.linalg.svdvals(orthogonalize(G, steps=5, schedule="polar_express"))
    return Check("Muon orthogonalisation: singular values in [0.855, 1.145]", (s - 1).abs().max().item(), 0.145,
                 "max |s - 1| of a Gaussian 64 x 128 gradient after 5 Polar Express steps")


CHECKS = (check_alpha0_equals_standard, check_orthogonal, check_idempotent, check_parallel_vanishes,
          check_linear_in_alpha, check_gqa_broadcast, check_kv_cache, check_attention_arms_off, check_sink_weight,
          check_orthogonal_with_arms, check_muon_band)


def run_checks() -> list[Check]:
    """Every check; the KV-cache check once per attention variant a config accepts."""
    return [c for check in CHECKS
            for c in ([check(variant=v) for v in config.XSA_VARIANTS] if check is check_kv_cache else [check()])]


if __name__ == "__main__":
    for c in run_checks():
        print(f"{'PASS' if c.passed else 'FAIL'}  {c.name}: {c.measured:.3g} (tolerance {c.tolerance:g})")
