"""
Every field of a run's configuration in one place: the model config (GPTConfig), the training
config (TrainConfig), the data subsets, the nanochat recipes (RECIPES: sets of these fields' values),
and the checks that name a bad value. The presets and make_config, which layer a recipe, a preset
and a run's overrides into a config, are data in xsa/stack/presets.py.

The rule for every field: **a new field's default reproduces the old behaviour.** A run record
written before a field existed reads back (TrainConfig.from_dict, the one reader of recorded
configs: config.json, checkpoints, the pipeline's jobs) with the field at its default, and is then
the same run it was; a field whose default would change what a run computes is a new preset or
recipe value, not a new default.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field


class ConfigError(ValueError):
    """A bad configuration value. The message always names the offending field."""


def _float_fields(obj) -> None:
    """Store every float-typed field as a float (1 and 1.0 are one config, with one hash)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.type in ("float", "float | None") and isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(obj, f.name, float(value))


def _bool_fields(obj) -> None:
    """Refuse a non-bool in every bool-typed field (a 1 or "yes" is not a switch), naming the field."""
    for f in dataclasses.fields(obj):
        if f.type == "bool":
            _check(f.name, isinstance(getattr(obj, f.name), bool), "true or false", getattr(obj, f.name))


def _check(name: str, ok: bool, expected: str, value) -> None:
    if not ok:
        raise ConfigError(f"{name} must be {expected}, got {value!r}")


def _positive_int(name, value):
    _check(name, isinstance(value, int) and not isinstance(value, bool) and value > 0, "a positive integer", value)


def _number(name, value, lo=-math.inf, hi=math.inf, what=None):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and lo <= value <= hi
    _check(name, ok, what or f"a number in [{lo}, {hi}]", value)


# -----------------------------------------------------------------------------
# Model

XSA_VALUE_MODES = ("mixed", "plain")
# The output transforms that can run at the XSA layers (xsa/stack/attention.py holds their functions and the
# contract they keep: each token's output from its own value only; xsa/validation.py decodes every
# one with the KV cache against the full forward): "xsa" removes the component along the token's
# own value.
XSA_VARIANTS = ("xsa",)
# Other ways for a head to attend to nothing (the sink study's arms), each a bool field of GPTConfig off by
# default, and its word in the run id, after the XSA label in this order (base-attngate, xsa1-sink;
# spec.arm_name). What each adds to the model is declared in xsa/stack/attention.py (LEARNED).
ARM_LABELS = {"attn_gate": "attngate", "attn_sink": "sink"}
# the fields of the attention arm (what a run's records state beside its arm's name)
XSA_FIELDS = ("xsa_alpha", "xsa_layers", "xsa_value", "xsa_variant", "xsa_gate", *ARM_LABELS)
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
    xsa_variant: str = "xsa"  # which transform of XSA_VARIANTS runs at those layers
    xsa_gate: bool = False  # learn alpha per head and layer (initialised at xsa_alpha; AdamW group xsa_gate)
    # Two other ways for a head to attend to nothing (the sink study, xsa/studies/sink.py), each on every
    # layer and combinable with XSA; off, the model is the one without them, bit for bit.
    # attn_gate: each head's output times 2*sigmoid(Linear(x[..., :ve_gate_channels])) before the output
    # projection (a per-head output gate, Qiu et al. 2025), the Linear zero-initialised so the gate is 1 at
    # step 0, a block matrix as nanochat's value-embedding gate (Muon, or AdamW in the AdamW-only arm)
    attn_gate: bool = False
    # attn_sink: a learned logit per head in each softmax's denominator with a zero value (attention that
    # goes nowhere, as gpt-oss), initialised at 0 (AdamW group attn_sink)
    attn_sink: bool = False
    # --- the recipe's architecture (defaults: nanochat 92d63d4)
    rope_base: float = 100_000.0
    rotary_bf16: bool = False  # round the rotary tables to bf16 (324e69c kept them in bf16)
    qk_scale: float = 1.2  # q and k are multiplied by this after QK-norm
    logit_softcap: float = 15.0  # logits <- c * tanh(logits / c)
    ve_gate_channels: int = 12  # the value-embedding gate reads x[..., :channels]
    ve_gate_scale: float = 3.0  # gate = scale * sigmoid(Linear(x[..., :channels]))
    smear: bool = True  # mix the previous token's embedding into each position, gated (nanochat's smear)
    backout: bool = True  # subtract a learned multiple of the mid-depth residual before the final norm
    # --- the recipe's initialisation
    init_wte_std: float = 0.8
    init_fc_scale: float = 0.4  # c_fc at this multiple of the other input projections' bound
    init_resid_lambdas: tuple[float, float] = (1.15, 1.05)  # first layer -> last layer, linear
    init_x0_lambdas: tuple[float, float] = (0.20, 0.05)
    init_gate_max: float = 0.02  # value-embedding and smear gates uniform in [0, max] (0: zeros)

    def __post_init__(self):
        for name in ("sequence_len", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd", "ve_gate_channels"):
            _positive_int(name, getattr(self, name))
        if self.n_embd % self.n_head != 0:
            raise ConfigError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if (self.n_embd // self.n_head) % 2 != 0:
            raise ConfigError(f"head dim n_embd/n_head ({self.n_embd // self.n_head}) must be even for rotary embeddings")
        if self.n_kv_head > self.n_head or self.n_head % self.n_kv_head != 0:
            raise ConfigError(f"n_kv_head ({self.n_kv_head}) must divide n_head ({self.n_head})")
        if self.ve_gate_channels > self.n_embd:
            raise ConfigError(f"ve_gate_channels ({self.ve_gate_channels}) exceeds n_embd ({self.n_embd})")
        _number("xsa_alpha", self.xsa_alpha, 0.0, 1.0)
        for name in ("rope_base", "qk_scale", "logit_softcap", "ve_gate_scale", "init_wte_std", "init_fc_scale"):
            _number(name, getattr(self, name), 0.0, what="a positive number")
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive number, got {getattr(self, name)!r}")
        _number("init_gate_max", self.init_gate_max, 0.0)
        _bool_fields(self)
        for name in ("init_resid_lambdas", "init_x0_lambdas"):
            value = getattr(self, name)
            _check(name, isinstance(value, (list, tuple)) and len(value) == 2, "a pair (first layer, last layer)", value)
            for v in value:
                _number(name, v)
            object.__setattr__(self, name, (float(value[0]), float(value[1])))
        _float_fields(self)
        if self.xsa_value not in XSA_VALUE_MODES:
            raise ConfigError(f"xsa_value must be one of {XSA_VALUE_MODES}, got {self.xsa_value!r}")
        if self.xsa_variant not in XSA_VARIANTS:
            raise ConfigError(f"xsa_variant must be one of {XSA_VARIANTS}, got {self.xsa_variant!r}")
        # one spelling per layer set, so that equal configs hash equally: no spaces, a comma list
        # sorted and without repeats ("0,0,1" and " 1, 0" are "0,1")
        spec = str(self.xsa_layers).replace(" ", "")
        if re.fullmatch(r"\d+(,\d+)*", spec):
            spec = ",".join(str(i) for i in sorted({int(i) for i in spec.split(",")}))
        object.__setattr__(self, "xsa_layers", spec)
        if not self.xsa_layer_set():
            for name, default in (("xsa_alpha", 0.0), ("xsa_value", "mixed"), ("xsa_variant", "xsa"),
                                  ("xsa_gate", False)):
                if getattr(self, name) != default:
                    raise ConfigError(f"{name} is {getattr(self, name)!r} but xsa_layers is {self.xsa_layers!r}: "
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

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# -----------------------------------------------------------------------------
# Data subsets: which corpus a preset trains on and its tokenizer's vocabulary size.
# The sources themselves (package, version, sha256, where the text sits) live in xsa/data/sources.py.

DATA_SUBSETS = {
    "smoke": dict(corpus="smoke", vocab_size=2048),      # two small registry sources: tests and smoke runs
    "default": dict(corpus="default", vocab_size=8192),  # the embedded offline corpus (registry packages)
    "default-4k": dict(corpus="default", vocab_size=4096),  # the same corpus, a 4,096-token BPE (small widths)
    "climbmix": dict(corpus="climbmix", vocab_size=32768),  # nanochat's ClimbMix-400B shards, for GPU servers
}


# -----------------------------------------------------------------------------
# Training

OPTIMIZERS = ("muon", "adamw")
NS_SCHEDULES = ("polar_express", "quintic")
WD_SCHEDULES = ("cosine", "linear")
ROW_PACKINGS = ("bos", "bestfit")  # xsa/data/loader.py
# the AdamW parameter groups of a GPT (xsa.stack.model.GPT.param_groups), each with its betas and weight decay
ADAM_GROUPS = ("lm_head", "embedding", "value_embeds", "resid_lambdas", "x0_lambdas", "smear", "xsa_gate",
               "attn_sink")


@dataclass(frozen=True)
class TrainConfig:
    preset: str
    model: GPTConfig
    data: str  # a key of DATA_SUBSETS
    device_batch_size: int  # sequences per forward/backward on one device
    total_batch_size: int  # tokens per optimizer update, summed over ranks and accumulation
    num_tokens: int  # training horizon in tokens (num_iterations = num_tokens // total_batch_size)
    recipe: str = "nanochat-92d63d4"  # the RECIPES entry the other defaults came from (a record)
    param_data_ratio: float | None = None  # horizon as tokens per (matrix + lm_head) parameter, if set
    # --- LR schedule as nanochat: linear warm-up, constant, linear warm-down to final_lr_frac
    warmup_steps: int = 40
    warmdown_ratio: float = 0.65
    final_lr_frac: float = 0.05
    # --- learning rates; AdamW ones are scaled by (n_embd / 768)^-0.5, and with batch_lr_scaling
    # every one by (total_batch_size / 2^19)^0.5 (nanochat's rule, tuned near a 2^19 batch)
    optimizer: str = "muon"  # muon: Muon for the block matrices + AdamW for the rest; adamw: AdamW for all
    matrix_lr: float = 0.02
    embedding_lr: float = 0.3
    unembedding_lr: float = 0.008
    scalar_lr: float = 0.5
    value_embed_lr_scale: float = 0.5  # value embeddings at this multiple of embedding_lr
    smear_lr: float = 0.2  # smear gate, smear and backout lambdas (unscaled, as nanochat)
    batch_lr_scaling: bool = True
    adamw_matrix_lr: float = 0.004  # matrix LR of the AdamW-only control arm
    adamw_matrix_betas: tuple[float, float] = (0.8, 0.95)  # and its betas
    # --- AdamW: betas and decoupled weight decay per group (ADAM_GROUPS), eps 1e-10
    adam_betas: dict = field(default_factory=lambda: {
        "lm_head": (0.8, 0.96), "embedding": (0.8, 0.995), "value_embeds": (0.8, 0.995),
        "resid_lambdas": (0.8, 0.95), "x0_lambdas": (0.96, 0.95), "smear": (0.8, 0.95), "xsa_gate": (0.8, 0.95),
        "attn_sink": (0.8, 0.95)})
    adam_weight_decay: dict = field(default_factory=lambda: {
        "lm_head": 0.01, "embedding": 0.001, "value_embeds": 0.01, "resid_lambdas": 0.05,
        "x0_lambdas": 0.0, "smear": 0.0, "xsa_gate": 0.0, "attn_sink": 0.0})
    # --- Muon
    weight_decay: float = 0.28  # cautious weight decay of the Muon matrices (and AdamW-only matrices)
    weight_decay_schedule: str = "cosine"  # cosine or linear decay to 0 over training
    weight_decay_scaling: bool = True  # nanochat's rule: wd * sqrt(B / 2^19) * (D_d12 / D)
    muon_momentum_start: float = 0.85
    muon_momentum: float = 0.97  # reached after muon_momentum_warmup_steps
    muon_momentum_warmup_steps: int = 400
    muon_momentum_final: float | None = 0.90  # reached at the end of the LR warm-down (None: stays)
    normuon_beta2: float | None = 0.9  # NorMuon variance reduction (None: plain Muon)
    muon_eq: bool = True  # MuonEq row equilibration before orthogonalisation
    muon_plus: bool = True  # Muon+: Frobenius norm snapped to sqrt(min(rows, cols)) after it
    ns_schedule: str = "polar_express"
    ns_scale: float = 1.01  # Polar Express: G / (||G||_F * ns_scale) before the iteration
    # Muon's update of same-shape matrices as one stack per shape (compiled on the CUDA code path),
    # as nanochat on a GPU; the same update to rounding. Off by default, as the committed runs trained;
    # on in the GPU presets
    muon_stacked: bool = False
    # --- data: how training rows are made (xsa/data/loader.py): "bos", a row at every <|bos|> running
    # through the following documents (the committed runs); "bestfit", nanochat's BOS-aligned best-fit
    # packing, no token read twice within an epoch (the GPU presets)
    row_packing: str = "bos"
    # --- precision: on CUDA bf16 autocast + torch.compile always; gpu_path turns both on elsewhere,
    # so the CUDA code path runs (and is tested) on a CPU
    gpu_path: bool = False
    # CPU precision policy: fp32 everywhere; cpu_compile adds torch.compile (inductor) to training,
    # in-training evaluation, CORE and diagnostics. Off by default: the committed runs trained eager
    cpu_compile: bool = False
    # per-layer attention diagnostics in the training log at every diag_every-th evaluation (and the
    # last); 1, the default, is every evaluation, as the committed runs logged them
    diag_every: int = 1
    # the training loss's head, softcap and cross-entropy in chunks of this many rows of the B*T
    # (xsa/stack/loss.py: no full (B*T, V) fp32 logits); 0, the default, is the whole batch at once, as
    # the committed runs trained
    loss_chunk: int = 0
    # --- evaluation and logging, in optimizer steps
    eval_every: int = 50
    eval_tokens: int = 2**20  # fixed validation token budget for bpb
    log_every: int = 1  # the logged loss is the only host sync of a step: GPU presets log every 10
    checkpoint_every: int = 50
    seed: int = 0

    def __post_init__(self):
        if self.data not in DATA_SUBSETS:
            raise ConfigError(f"data must be one of {sorted(DATA_SUBSETS)}, got {self.data!r}")
        if self.recipe not in RECIPES:
            raise ConfigError(f"recipe must be one of {sorted(RECIPES)}, got {self.recipe!r}")
        for name, choices in (("optimizer", OPTIMIZERS), ("ns_schedule", NS_SCHEDULES),
                              ("weight_decay_schedule", WD_SCHEDULES), ("row_packing", ROW_PACKINGS)):
            if getattr(self, name) not in choices:
                raise ConfigError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        for name in ("device_batch_size", "total_batch_size", "num_tokens", "eval_every", "eval_tokens",
                     "log_every", "checkpoint_every", "diag_every"):
            _positive_int(name, getattr(self, name))
        _check("seed", isinstance(self.seed, int) and not isinstance(self.seed, bool) and 0 <= self.seed < 2**63,
               "an integer in [0, 2^63)", self.seed)
        for name in ("warmup_steps", "muon_momentum_warmup_steps"):
            value = getattr(self, name)  # a bool is an int to Python, never a step count
            _check(name, isinstance(value, int) and not isinstance(value, bool) and value >= 0, "an integer >= 0", value)
        _check("loss_chunk", isinstance(self.loss_chunk, int) and not isinstance(self.loss_chunk, bool)
               and self.loss_chunk >= 0, "an integer >= 0 (0: the whole batch at once)", self.loss_chunk)
        for name in ("warmdown_ratio", "final_lr_frac", "muon_momentum_start", "muon_momentum"):
            _number(name, getattr(self, name), 0.0, 1.0)
        for name in ("muon_momentum_final", "normuon_beta2"):
            if getattr(self, name) is not None:
                _number(name, getattr(self, name), 0.0, 1.0)
        for name in ("matrix_lr", "embedding_lr", "unembedding_lr", "scalar_lr", "value_embed_lr_scale",
                     "smear_lr", "adamw_matrix_lr", "weight_decay", "ns_scale"):
            _number(name, getattr(self, name), 0.0, what="a number >= 0")
        _bool_fields(self)
        for name in ("adam_betas", "adam_weight_decay"):
            value = getattr(self, name)
            if not isinstance(value, dict) or set(value) != set(ADAM_GROUPS):
                raise ConfigError(f"{name} must give every AdamW group {ADAM_GROUPS}, got {value!r}")
        for group, betas in self.adam_betas.items():
            ok = isinstance(betas, (list, tuple)) and len(betas) == 2
            _check(f"adam_betas.{group}", ok, "a pair (beta1, beta2)", betas)
            for b in betas:
                _number(f"adam_betas.{group}", b, 0.0, 1.0)
        for group, wd in self.adam_weight_decay.items():
            _number(f"adam_weight_decay.{group}", wd, 0.0, what="a number >= 0")
        betas = self.adamw_matrix_betas
        _check("adamw_matrix_betas", isinstance(betas, (list, tuple)) and len(betas) == 2, "a pair (beta1, beta2)", betas)
        object.__setattr__(self, "adamw_matrix_betas", (float(betas[0]), float(betas[1])))
        object.__setattr__(self, "adam_betas", {k: (float(b1), float(b2)) for k, (b1, b2) in self.adam_betas.items()})
        object.__setattr__(self, "adam_weight_decay", {k: float(v) for k, v in self.adam_weight_decay.items()})
        _float_fields(self)
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

    @property
    def num_iterations(self) -> int:
        return self.num_tokens // self.total_batch_size

    def to_dict(self) -> dict:
        """JSON-normal (tuples as lists): equal to what config.json reads back."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, record: dict, where: str = "config") -> "TrainConfig":
        """The one reader of a recorded config (a run's config.json, a checkpoint's config): every
        field the record predates takes its default, every AdamW group it predates the recipe's
        values, so a record stays the run it was when fields are added (the rule in the module
        docstring). Keys that are not fields (data_dir aside) are an error naming them: the record
        comes from code that knows more than this one, and its run cannot be rebuilt here."""
        if not isinstance(record, dict) or not isinstance(record.get("model"), dict):
            raise ConfigError(f"{where}: not a training config (no model section)")
        d = {k: v for k, v in record.items() if k not in RECORD_EXTRAS}
        unknown = sorted(set(d) - _field_names(cls)) + [f"model.{k}" for k in sorted(set(d["model"]) - _field_names(GPTConfig))]
        if unknown:
            raise ConfigError(f"{where}: {', '.join(unknown)}: not a config field of this code")
        recipe = RECIPES.get(d.get("recipe", DEFAULT_RECIPE), {}).get("train", {})
        for name in GROUP_FIELDS:
            if isinstance(d.get(name), dict):
                d[name] = {**(recipe.get(name) or cls.__dataclass_fields__[name].default_factory()), **d[name]}
        try:
            return cls(**{**d, "model": GPTConfig(**d["model"])})
        except TypeError as e:  # a field without a default is missing
            raise ConfigError(f"{where}: not a training config ({e})") from None

    def config_hash(self) -> str:
        """A short hash of every field: a cache of the config's identity (runs are compared by
        value, TrainConfig.from_dict(record) == config, so a record outlives new fields)."""
        return dict_hash(self.to_dict())


# keys config.json holds beside the fields; the per-group dicts that from_dict fills group by group
RECORD_EXTRAS = ("data_dir",)
GROUP_FIELDS = ("adam_betas", "adam_weight_decay")


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def optional_fields() -> frozenset[str]:
    """The fields whose value may be None, where None means something of its own (muon_momentum_final:
    the momentum stays; normuon_beta2: plain Muon): a null given for one of these is that value, and a
    null for any other field is an error, never "unset"."""
    return frozenset(f.name for cls in (GPTConfig, TrainConfig) for f in dataclasses.fields(cls)
                     if "None" in str(f.type))


def dict_hash(d: dict) -> str:
    """The config hash of a config's JSON form, as it was written (a record's integrity check)."""
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


# -----------------------------------------------------------------------------
# Recipes: one nanochat commit each (gpt.py, optim.py, scripts/base_train.py read at that commit;
# the README's parity table lists what matches and what differs on purpose), as the values of the
# fields above; xsa/stack/presets.py layers a recipe, a preset and a run's overrides into a config.

RECIPES: dict[str, dict] = {
    "nanochat-92d63d4": {"model": {}, "train": {}, "param_data_ratio": 12.0},  # the field defaults are this commit's
    "nanochat-324e69c": {
        "model": dict(rope_base=10_000.0, rotary_bf16=True, qk_scale=1.0, logit_softcap=20.0,
                      ve_gate_channels=32, ve_gate_scale=2.0, smear=False, backout=False,
                      init_wte_std=1.0, init_fc_scale=1.0, init_resid_lambdas=(1.0, 1.0),
                      init_x0_lambdas=(0.1, 0.1), init_gate_max=0.0),
        "train": dict(warmup_steps=0, warmdown_ratio=0.5, final_lr_frac=0.0,
                      embedding_lr=0.3, unembedding_lr=0.004, matrix_lr=0.02, scalar_lr=0.5, value_embed_lr_scale=1.0,
                      adam_betas={g: ((0.96, 0.95) if g == "x0_lambdas" else (0.8, 0.95)) for g in ADAM_GROUPS},
                      adam_weight_decay={g: 0.0 for g in ADAM_GROUPS},
                      weight_decay=0.2, weight_decay_schedule="linear", weight_decay_scaling=True,
                      muon_momentum=0.95, muon_momentum_warmup_steps=300, muon_momentum_final=None,
                      normuon_beta2=0.95, muon_eq=False, muon_plus=False, ns_scale=1.02),
        "param_data_ratio": 10.5,
    },
}
DEFAULT_RECIPE = "nanochat-92d63d4"


def scaling_params(model: GPTConfig) -> int:
    """nanochat's scaling parameters: the block matrices plus the lm_head (base_train's
    get_scaling_params), counted from the shapes."""
    d, hd, kv = model.n_embd, model.head_dim, model.n_kv_head
    per_layer = d * (model.n_head * hd) + 2 * d * (kv * hd) + d * d + 8 * d * d  # q, k, v, proj, mlp
    n_ve = sum(1 for i in range(model.n_layer) if i % 2 == (model.n_layer - 1) % 2)
    return model.n_layer * per_layer + n_ve * model.ve_gate_channels * kv + d * model.vocab_size
