"""
Every knob of the study in one place: the model config, the training config, and the presets
as plain data. Nothing else in the package hard-codes a size, a learning rate or a horizon.

Presets:
- smoke:   a whole train-and-eval in seconds; used by the tests and `make paper STUDY=smoke`.
- cpu-d4:  the smaller CPU-scale model (4 layers, 256 wide). NOT d12: a CPU-scale stand-in.
- cpu-d8:  the larger CPU-scale model (8 layers), the same 2:1 depth ratio as d12 -> d24.
- d12/d24: the seed paper's two depths (Zhai, 2026), for GPU servers on ClimbMix.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field


class ConfigError(ValueError):
    """A bad configuration value. The message always names the offending field."""


# -----------------------------------------------------------------------------
# Model

XSA_VALUE_MODES = ("mixed", "plain")
_LAYER_SPEC = re.compile(r"^(all|none|last:\d+|first:\d+|\d+(,\d+)*)$")


@dataclass(frozen=True)
class GPTConfig:
    # nanochat's field names, so a nanochat reader finds their way around
    sequence_len: int = 1024
    vocab_size: int = 32768
    n_layer: int = 12
    n_head: int = 6
    n_kv_head: int = 6
    n_embd: int = 768
    # Exclusive Self-Attention: z = y - alpha * (<y,v> / (||v||^2 + eps)) * v, per head and token
    xsa_alpha: float = 0.0
    # Layers where the XSA formula runs: all | none | last:K | first:K | comma list of indices.
    # "none" is the baseline (standard attention). A layer listed here runs the formula even at
    # alpha = 0, which makes "alpha = 0" a real control for the XSA code path.
    xsa_layers: str = "none"
    xsa_value: str = "mixed"  # mixed: the v attention aggregates (value embedding included); plain: c_v(x)

    def __post_init__(self):
        for name in ("sequence_len", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head != 0:
            raise ConfigError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if (self.n_embd // self.n_head) % 2 != 0:
            raise ConfigError(f"head dim n_embd/n_head ({self.n_embd // self.n_head}) must be even for rotary embeddings")
        if self.n_kv_head > self.n_head or self.n_head % self.n_kv_head != 0:
            raise ConfigError(f"n_kv_head ({self.n_kv_head}) must divide n_head ({self.n_head})")
        alpha = self.xsa_alpha
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not (0.0 <= float(alpha) <= 1.0):
            raise ConfigError(f"xsa_alpha must be a number in [0, 1], got {alpha!r}")
        object.__setattr__(self, "xsa_alpha", float(alpha))  # 1 and 1.0 are one config (one hash)
        if self.xsa_value not in XSA_VALUE_MODES:
            raise ConfigError(f"xsa_value must be one of {XSA_VALUE_MODES}, got {self.xsa_value!r}")
        # one spelling per layer set, so that equal configs hash equally: no spaces, a comma list
        # sorted and without repeats ("0,0,1" and " 1, 0" are "0,1")
        spec = str(self.xsa_layers).replace(" ", "")
        if re.fullmatch(r"\d+(,\d+)*", spec):
            spec = ",".join(str(i) for i in sorted({int(i) for i in spec.split(",")}))
        object.__setattr__(self, "xsa_layers", spec)
        if not self.xsa_layer_set():
            if self.xsa_alpha > 0:
                raise ConfigError(f"xsa_alpha is {self.xsa_alpha} but xsa_layers is {self.xsa_layers!r}: "
                                  "no layer would use it (set xsa_layers, e.g. all)")
            if self.xsa_value != "mixed":
                raise ConfigError(f"xsa_value is {self.xsa_value!r} but xsa_layers is {self.xsa_layers!r}: "
                                  "no layer would use it (set xsa_layers, e.g. all)")

    def xsa_layer_set(self) -> frozenset[int]:
        """The layer indices where the XSA formula runs (empty for 'none')."""
        spec = str(self.xsa_layers).replace(" ", "")
        if not _LAYER_SPEC.match(spec):
            raise ConfigError(
                f"xsa_layers: unknown layer spec {self.xsa_layers!r} "
                "(expected all, none, last:K, first:K or a comma list of layer indices)")
        n = self.n_layer
        if spec == "all":
            layers = set(range(n))
        elif spec == "none":
            layers = set()
        elif spec.startswith(("last:", "first:")):
            k = int(spec.split(":")[1])
            if not 0 < k <= n:
                raise ConfigError(f"xsa_layers: {spec!r} needs 0 < K <= n_layer ({n})")
            layers = set(range(n - k, n)) if spec.startswith("last:") else set(range(k))
        else:
            layers = {int(i) for i in spec.split(",")}
            bad = sorted(i for i in layers if i >= n)
            if bad:
                raise ConfigError(f"xsa_layers: layer index {bad[0]} >= n_layer ({n})")
        return frozenset(layers)


# -----------------------------------------------------------------------------
# Data subsets: which corpus a preset trains on and its tokenizer's vocabulary size.
# The sources themselves (package, version, sha256, where the text sits) live in xsa/data/sources.py.

DATA_SUBSETS = {
    "smoke": dict(vocab_size=2048),     # one or two small registry sources: tests and smoke runs
    "default": dict(vocab_size=8192),   # the embedded offline corpus (registry packages)
    "climbmix": dict(vocab_size=32768), # nanochat's ClimbMix-400B shards, for GPU servers
}


# -----------------------------------------------------------------------------
# Training

OPTIMIZERS = ("muon", "adamw")
NS_SCHEDULES = ("polar_express", "quintic")


@dataclass(frozen=True)
class TrainConfig:
    preset: str
    model: GPTConfig
    data: str  # a key of DATA_SUBSETS
    device_batch_size: int  # sequences per forward/backward on one device
    total_batch_size: int  # tokens per optimizer update, summed over ranks and accumulation
    num_tokens: int  # training horizon in tokens (num_iterations = num_tokens // total_batch_size)
    # LR schedule as nanochat: linear warm-up, constant, linear warm-down to final_lr_frac
    warmup_ratio: float = 0.0
    warmdown_ratio: float = 0.4
    final_lr_frac: float = 0.0
    # optimizer: Muon for hidden matrices + AdamW for the rest, or AdamW for everything (control arm)
    optimizer: str = "muon"
    matrix_lr: float = 0.02
    embedding_lr: float = 0.2
    unembedding_lr: float = 0.004
    scalar_lr: float = 0.5
    adamw_matrix_lr: float = 0.004  # matrix LR of the AdamW-only control arm
    weight_decay: float = 0.0  # Muon weight decay (cautious), linearly decayed to 0 like nanochat
    muon_momentum: float = 0.95
    muon_momentum_warmup_steps: int = 300  # momentum warms from 0.85 to muon_momentum
    ns_schedule: str = "polar_express"
    # evaluation and logging, in optimizer steps
    eval_every: int = 50
    eval_tokens: int = 2**20  # fixed validation token budget for bpb
    log_every: int = 1  # the logged loss is the only host sync of a step: GPU presets log every 10
    checkpoint_every: int = 50
    seed: int = 0

    def __post_init__(self):
        if self.data not in DATA_SUBSETS:
            raise ConfigError(f"data must be one of {sorted(DATA_SUBSETS)}, got {self.data!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.ns_schedule not in NS_SCHEDULES:
            raise ConfigError(f"ns_schedule must be one of {NS_SCHEDULES}, got {self.ns_schedule!r}")
        rows = self.device_batch_size * self.model.sequence_len
        if self.total_batch_size % rows != 0:
            raise ConfigError(
                f"total_batch_size ({self.total_batch_size}) must be a multiple of "
                f"device_batch_size * sequence_len ({rows})")
        if self.num_tokens < self.total_batch_size:
            raise ConfigError(f"num_tokens ({self.num_tokens}) is smaller than one step ({self.total_batch_size})")
        if self.model.vocab_size != DATA_SUBSETS[self.data]["vocab_size"]:
            raise ConfigError(
                f"model.vocab_size ({self.model.vocab_size}) does not match the {self.data!r} "
                f"tokenizer ({DATA_SUBSETS[self.data]['vocab_size']})")
        for name in ("warmup_ratio", "warmdown_ratio", "final_lr_frac"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")

    @property
    def num_iterations(self) -> int:
        return self.num_tokens // self.total_batch_size

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        d["model"] = GPTConfig(**d["model"])
        return cls(**d)

    def config_hash(self) -> str:
        """A short stable hash of every field: two runs with the same hash trained the same way."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# -----------------------------------------------------------------------------
# Presets, as data. Each fixes model shape, batch, sequence, vocabulary, schedule and horizon.
# The CPU pair was sized by measurement on a 2-core machine (see README, "Choosing the CPU presets").

PRESETS: dict[str, dict] = {
    "smoke": dict(
        model=dict(sequence_len=64, vocab_size=2048, n_layer=2, n_head=2, n_kv_head=2, n_embd=64),
        data="smoke", device_batch_size=4, total_batch_size=4 * 64, num_tokens=30 * 4 * 64,
        eval_every=10, eval_tokens=4096, checkpoint_every=10, muon_momentum_warmup_steps=10,
    ),
    "cpu-d4": dict(
        model=dict(sequence_len=512, vocab_size=8192, n_layer=4, n_head=4, n_kv_head=4, n_embd=256),
        data="default", device_batch_size=8, total_batch_size=8 * 512, num_tokens=2**19,
        eval_every=32, eval_tokens=2**16, checkpoint_every=32, muon_momentum_warmup_steps=40,
    ),
    "cpu-d8": dict(
        model=dict(sequence_len=512, vocab_size=8192, n_layer=8, n_head=6, n_kv_head=6, n_embd=384),
        data="default", device_batch_size=8, total_batch_size=8 * 512, num_tokens=2**19,
        eval_every=32, eval_tokens=2**16, checkpoint_every=32, muon_momentum_warmup_steps=40,
    ),
    # GPU presets: the seed paper's depths. Horizon at nanochat's tokens:params ratio of 20
    # (about 20 * 135M ~ 2.7B tokens at d12; 20 * 370M ~ 7.4B at d24, rounded to whole batches).
    "d12": dict(
        model=dict(sequence_len=2048, vocab_size=32768, n_layer=12, n_head=12, n_kv_head=12, n_embd=768),
        data="climbmix", device_batch_size=32, total_batch_size=2**19, num_tokens=5120 * 2**19,
        eval_every=250, eval_tokens=10 * 2**19, checkpoint_every=500, log_every=10,
    ),
    "d24": dict(
        model=dict(sequence_len=2048, vocab_size=32768, n_layer=24, n_head=16, n_kv_head=16, n_embd=1024),
        data="climbmix", device_batch_size=16, total_batch_size=2**19, num_tokens=14000 * 2**19,
        eval_every=250, eval_tokens=10 * 2**19, checkpoint_every=500, log_every=10,
    ),
}


def make_config(preset: str, **overrides) -> TrainConfig:
    """Build a TrainConfig from a preset name plus overrides.

    Model fields (xsa_alpha, xsa_layers, xsa_value, n_layer, ...) and training fields (seed,
    optimizer, num_tokens, ...) may be mixed in `overrides`; each is routed to its dataclass.
    None values are ignored. XSA runs at the layers of xsa_layers with strength xsa_alpha; given
    alone, xsa_alpha applies to every layer (xsa_alpha=0 alone is the zero-strength formula on every
    layer, a control of the XSA code path, not the baseline) and xsa_layers alone means alpha 1.
    The baseline is xsa_layers "none", the default.
    """
    if preset not in PRESETS:
        raise ConfigError(f"preset: unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
    base = dict(PRESETS[preset])
    model = dict(base.pop("model"))
    model_fields = {f.name for f in dataclasses.fields(GPTConfig)}
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    if overrides.get("xsa_alpha") is not None and overrides.get("xsa_layers") is None:
        overrides = {**overrides, "xsa_layers": "all"}
    if overrides.get("xsa_layers") not in (None, "none") and overrides.get("xsa_alpha") is None:
        overrides = {**overrides, "xsa_alpha": 1.0}
    for key, value in overrides.items():
        if value is None:
            continue
        if key in model_fields:
            model[key] = value
        elif key in train_fields and key not in ("model", "preset"):
            base[key] = value
        else:
            raise ConfigError(f"{key}: not a config field")
    return TrainConfig(preset=preset, model=GPTConfig(**model), **base)
