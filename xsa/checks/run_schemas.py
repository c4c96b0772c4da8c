"""
The schemas of a run's own records, beside the others in xsa/checks/schemas.py's registry:

- config:  a run's config.json, as xsa/train.py writes it: TrainConfig.to_dict() (xsa/stack/config.py) and
           the data folder. The types and ranges are the config's own checks (a positive integer for a
           size, alpha in [0, 1], a learning rate above 0, a name of its choices); the fields without a
           default are required, every other one may be absent (a record older than the field), and
           a field the code no longer has passes (the archived runs' warmup_ratio). Whether the config
           is the run's is integrity.py's check (TrainConfig.from_dict, read by value).
- metrics: one line of a run's metrics.jsonl (xsa/train.py): the step, and on a logged step the
           train loss, its EMA, the LR multiplier, tokens per second and the MFU against the measured
           peak (and the datasheet's, None off a GPU); on an evaluation step the val bpb and the
           attention diagnostics per layer (xsa.diagnostics.diagnostics_snapshot). Step 0 carries
           only the evaluation.
"""

from __future__ import annotations

import dataclasses

from xsa.stack.config import (_LAYER_SPEC, ADAM_GROUPS, DATA_SUBSETS, NS_SCHEDULES, OPTIMIZERS, RECIPES, RECORD_EXTRAS,
                        ROW_PACKINGS, WD_SCHEDULES, XSA_VALUE_MODES, XSA_VARIANTS, GPTConfig, TrainConfig)
from xsa.checks.schema_parts import (BOOL, BPB, COUNT, DIAGNOSTIC, NATS, PATTERNS, POSITIVE, accepts, array, integer,
                                     nullable, number, obj, pair, text)

UNIT = number(minimum=0, maximum=1)  # a beta, a momentum, a fraction of the run, alpha
PLUS = number(exclusiveMinimum=0)  # a learning rate, a scale the model divides or multiplies by
LAYERS = text(pattern=_LAYER_SPEC.pattern)
PATTERNS[_LAYER_SPEC.pattern] = "a layer spec (all, none, last:K, first:K or a comma list of layer indices)"


def one_of(choices) -> dict:
    return {"enum": list(choices)}


def groups(value: dict) -> dict:
    """A value per AdamW parameter group (xsa.stack.config.ADAM_GROUPS; a record may predate a group)."""
    return {"type": "object", "propertyNames": one_of(ADAM_GROUPS), "additionalProperties": value}


def required(cls) -> list[str]:
    """The fields of a config dataclass without a default: every record of it holds them."""
    return [f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


MODEL = obj({  # xsa.stack.config.GPTConfig
    **{k: POSITIVE for k in ("sequence_len", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd",
                             "ve_gate_channels")},
    "xsa_alpha": UNIT, "xsa_layers": LAYERS, "xsa_value": one_of(XSA_VALUE_MODES),
    "xsa_variant": one_of(XSA_VARIANTS),
    **{f.name: BOOL for f in dataclasses.fields(GPTConfig) if f.type == "bool"},  # the switches, arms included
    **{k: PLUS for k in ("rope_base", "qk_scale", "logit_softcap", "ve_gate_scale", "init_wte_std", "init_fc_scale")},
    "init_gate_max": number(minimum=0),
    "init_resid_lambdas": pair(number()), "init_x0_lambdas": pair(number())},
    *required(GPTConfig))

CONFIG = obj({  # xsa.stack.config.TrainConfig, and the data folder it trained on
    "preset": text(minLength=1), "model": MODEL, "data": one_of(DATA_SUBSETS), "recipe": one_of(RECIPES),
    **{k: POSITIVE for k in ("device_batch_size", "total_batch_size", "num_tokens", "eval_every", "eval_tokens",
                             "log_every", "checkpoint_every", "diag_every")},
    **{k: COUNT for k in ("warmup_steps", "muon_momentum_warmup_steps", "loss_chunk")},  # 0: none, whole batch
    "seed": integer(minimum=0, exclusiveMaximum=2**63),
    "param_data_ratio": nullable(PLUS),
    **{k: UNIT for k in ("warmdown_ratio", "final_lr_frac", "muon_momentum_start", "muon_momentum")},
    **{k: nullable(UNIT) for k in ("muon_momentum_final", "normuon_beta2")},  # None: stays, plain Muon
    **{k: PLUS for k in ("matrix_lr", "embedding_lr", "unembedding_lr", "scalar_lr", "smear_lr", "adamw_matrix_lr",
                         "ns_scale")},
    **{k: number(minimum=0) for k in ("value_embed_lr_scale", "weight_decay")},
    "optimizer": one_of(OPTIMIZERS), "ns_schedule": one_of(NS_SCHEDULES),
    "weight_decay_schedule": one_of(WD_SCHEDULES), "row_packing": one_of(ROW_PACKINGS),
    **{k: BOOL for k in ("batch_lr_scaling", "weight_decay_scaling", "muon_eq", "muon_plus", "muon_stacked",
                         "gpu_path", "cpu_compile")},
    "adamw_matrix_betas": pair(UNIT), "adam_betas": groups(pair(UNIT)), "adam_weight_decay": groups(number(minimum=0)),
    **{k: text() for k in RECORD_EXTRAS}},  # data_dir
    *required(TrainConfig))

METRICS = obj({  # one line of metrics.jsonl
    "step": COUNT,  # optimizer updates done: 0 is the initial model's evaluation
    "train_loss": NATS, "train_loss_ema": NATS,
    "lr_mult": UNIT,  # the schedule's multiplier: warm-up, 1, warm-down to final_lr_frac
    "tok_per_s": number(minimum=0),
    "mfu": nullable(number(minimum=0)), "mfu_datasheet": nullable(number(minimum=0)),  # None without a peak
    "val_bpb": BPB,
    "diag": obj({**{m: array(v, minItems=1) for m, v in DIAGNOSTIC.items()},  # a value per layer
                 # where logged (xsa.diagnostics.EXTRA_METRICS): the largest attention logit, the sink's
                 # weight, the output gate's mean per layer; the output logits' RMS before the softcap
                 "attn_logit_max": array(number(), minItems=1), "sink_mass": array(UNIT, minItems=1),
                 "gate_mean": array(number(minimum=0, maximum=2), minItems=1), "logit_rms": number(minimum=0)})},
    "step",
    anyOf=[{"required": ["train_loss"]}, {"required": ["val_bpb"]}],  # a line is a log step, an evaluation or both
    dependentRequired={"train_loss": ["train_loss_ema", "lr_mult", "tok_per_s"], "diag": ["val_bpb"]})

SCHEMAS = {"config": CONFIG, "metrics": METRICS}
QUICK = {kind: accepts(schema) for kind, schema in SCHEMAS.items()}  # metrics: 100,000 lines a paper
