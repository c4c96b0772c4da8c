"""
The presets, as data, and make_config, which layers a recipe, a preset and a run's overrides into a
TrainConfig.

A config is built in three layers (make_config): a recipe (one nanochat commit's model, optimizer
and base_train defaults), then a preset (shape, batch, data, horizon, and for the CPU presets their
own learning rates and schedule), then the overrides of one run. Each piece of a recipe is a field,
so a recipe is a set of values and an ablation is one override. The fields themselves, their
defaults, their checks and the recipes are in xsa/stack/config.py.

Recipes (xsa.stack.config.RECIPES):
- nanochat-92d63d4: nanochat as of commit 92d63d4, the default of every preset.
- nanochat-324e69c: nanochat as of commit 324e69c (March 2026), the seed paper's era.

Presets (PRESETS):
- smoke:         a whole train-and-eval in seconds; the tests and `make paper STUDY=smoke`.
- cpu-*:         CPU-scale stand-ins for this 2-core machine. NOT d12/d24.
- d12, d24:      the seed paper's two depths as it states them (768 and 1024 wide, 64-dim heads).
- d12-nanochat, d24-nanochat: nanochat's own shapes at those depths (128-dim heads, width 64 x depth).
"""

from __future__ import annotations

import dataclasses

from xsa.stack.config import (DATA_SUBSETS, DEFAULT_RECIPE, RECIPES, ConfigError, GPTConfig, TrainConfig, optional_fields,
                              scaling_params)

# -----------------------------------------------------------------------------
# Presets, as data. Each fixes model shape, batch, data and horizon; the CPU presets also state
# their own learning rates and schedule (nanochat's batch rule is tuned near a 2^19 batch; at a
# 4,096-token batch it sets the LRs 11x lower, measured worse, so they keep nanochat's base LRs
# unscaled), sized by measurement on a 2-core machine (see README, "Presets").

def _cpu(*, n_layer, n_embd, n_head, seq, batch_rows, num_tokens, data="default", **train):
    """A CPU preset: the 92d63d4 model and optimizer with nanochat's base learning rates unscaled,
    weight decay unscaled, and its schedule at the same fractions of the run as at d12 (LR warm-up
    1.6% of the steps, momentum warm-up 16%; nanochat's d12 has about 2,500 steps)."""
    steps = num_tokens // (batch_rows * seq)
    vocab = DATA_SUBSETS[data]["vocab_size"]
    return dict(
        model=dict(sequence_len=seq, vocab_size=vocab, n_layer=n_layer, n_head=n_head, n_kv_head=n_head, n_embd=n_embd),
        data=data, device_batch_size=batch_rows, total_batch_size=batch_rows * seq, num_tokens=num_tokens,
        matrix_lr=0.02, embedding_lr=0.3, unembedding_lr=0.008, scalar_lr=0.5, weight_decay=0.28,
        batch_lr_scaling=False, weight_decay_scaling=False,
        warmup_steps=max(1, round(0.016 * steps)), muon_momentum_warmup_steps=max(1, round(0.16 * steps)),
        **train)


def _study(*, n_layer, n_embd, n_head, steps, eval_every=48):
    """A preset of the CPU studies: 8 rows of 512 tokens a step on the 4,096-token corpus, validation
    on a fixed 2^17-token stream, a checkpoint every 48 steps; shapes and lengths differ."""
    return _cpu(n_layer=n_layer, n_embd=n_embd, n_head=n_head, seq=512, batch_rows=8, num_tokens=steps * 8 * 512,
                data="default-4k", eval_every=eval_every, eval_tokens=2**17, checkpoint_every=48)


def _gpu(*, n_layer, n_embd, n_head, batch, device_batch):
    """A GPU preset on ClimbMix: the recipe's optimizer and schedule as base_train runs them, Muon
    stacked by shape and rows best-fit packed, as nanochat runs them on a GPU."""
    return dict(
        model=dict(sequence_len=2048, vocab_size=32768, n_layer=n_layer, n_head=n_head, n_kv_head=n_head,
                   n_embd=n_embd),
        data="climbmix", device_batch_size=device_batch, total_batch_size=batch,
        eval_every=250, eval_tokens=80 * 2**19, checkpoint_every=500, log_every=10, muon_stacked=True,
        row_packing="bestfit")


PRESETS: dict[str, dict] = {
    "smoke": _cpu(n_layer=2, n_embd=64, n_head=2, seq=64, batch_rows=4, num_tokens=30 * 4 * 64, data="smoke",
                  eval_every=10, eval_tokens=4096, checkpoint_every=10),
    # The CPU study's depth pair: 64 wide (one 64-dim head), 4 and 8 layers (2:1, as d12 -> d24), the
    # same 3 x 2^19 tokens (384 steps of 4,096): 8.0 and 4.0 tokens per non-embedding parameter. A
    # 4,096-token vocabulary keeps the head (262k parameters) from dwarfing the blocks; validation on
    # a fixed 2^17-token stream at 8 points of training.
    "cpu-w64-d4": _study(n_layer=4, n_embd=64, n_head=1, steps=384),
    "cpu-w64-d8": _study(n_layer=8, n_embd=64, n_head=1, steps=384),
    # The heads preset: 128 wide, two heads of 64 (the seed paper's d12 head size), 4 layers, the
    # primary preset's tokens, batch, sequence and evaluation: does XSA's effect depend on heads?
    "cpu-w128-d4": _study(n_layer=4, n_embd=128, n_head=2, steps=384),
    # The scale study's training lengths (xsa/studies/scale.py): cpu-w64-d4 at 128, 768 and 1,536 steps
    # (x1/3, x2, x4 of its 384), each with the schedule at the same fractions of its run; evaluation at
    # 4 points of the short run, every 96 steps of the long ones.
    "cpu-w64-d4-s128": _study(n_layer=4, n_embd=64, n_head=1, steps=128, eval_every=32),
    "cpu-w64-d4-s768": _study(n_layer=4, n_embd=64, n_head=1, steps=768, eval_every=96),
    "cpu-w64-d4-s1536": _study(n_layer=4, n_embd=64, n_head=1, steps=1536, eval_every=96),
    # The factorial study's long cells (xsa/studies/factorial/design.py): both shapes at 1,097 steps, which puts
    # cpu-w64-d4 at 9.8 tokens per scaling parameter (nanochat's d12: 10.5) and cpu-w128-d4 at 3.43, the
    # tokens per parameter of cpu-w64-d4 at its 384 steps.
    "cpu-w64-d4-s1097": _study(n_layer=4, n_embd=64, n_head=1, steps=1097, eval_every=96),
    "cpu-w128-d4-s1097": _study(n_layer=4, n_embd=128, n_head=2, steps=1097, eval_every=96),
    # The first CPU study's shape (archived, 30bc3ae) on today's stack: 256 wide, four heads of 64, 4
    # layers, at the primary's 384 steps and at that study's 128.
    "cpu-w256-d4": _study(n_layer=4, n_embd=256, n_head=4, steps=384),
    "cpu-w256-d4-s128": _study(n_layer=4, n_embd=256, n_head=4, steps=128, eval_every=32),
    # GPU presets. The horizon is the recipe's tokens:params ratio, the batch the one base_train's
    # auto rule picks for the shape (B = 2^19 (D / D_d12)^0.383, rounded to a power of 2: 2^19 at
    # d12, 2^20 at both readings of d24), evaluation as base_train (80 x 2^19 tokens every 250 steps).
    # d12, d24: the seed paper's depths as it states them (d24: 1024 wide, 16 heads of 64).
    "d12": _gpu(n_layer=12, n_embd=768, n_head=12, batch=2**19, device_batch=32),
    "d24": _gpu(n_layer=24, n_embd=1024, n_head=16, batch=2**20, device_batch=16),
    # nanochat's own shapes (base_train: width 64 x depth, rounded up to 128-dim heads)
    "d12-nanochat": _gpu(n_layer=12, n_embd=768, n_head=6, batch=2**19, device_batch=32),
    "d24-nanochat": _gpu(n_layer=24, n_embd=1536, n_head=12, batch=2**20, device_batch=16),
}


def make_config(preset: str, **overrides) -> TrainConfig:
    """Build a TrainConfig: the recipe (overrides' `recipe`, else the preset's, else the default),
    then the preset, then the overrides.

    Model fields (xsa_alpha, xsa_layers, n_layer, smear, ...) and training fields (seed, optimizer,
    num_tokens, ...) may be mixed in `overrides`; each is routed to its dataclass. None values are
    ignored. XSA runs at the layers of xsa_layers with strength xsa_alpha; given alone, xsa_alpha
    applies to every layer (xsa_alpha=0 alone is the zero-strength formula on every layer, a control
    of the XSA code path, not the baseline) and xsa_layers alone means alpha 1. The baseline is
    xsa_layers "none", the default. A preset without num_tokens trains for the recipe's
    param_data_ratio tokens per scaling parameter, in whole batches.
    """
    if preset not in PRESETS:
        raise ConfigError(f"preset: unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
    # None leaves a field at the preset's value, except where None is a value of the field itself
    overrides = {k: v for k, v in overrides.items() if v is not None or k in optional_fields()}
    spec = dict(PRESETS[preset])
    recipe_name = overrides.pop("recipe", spec.pop("recipe", DEFAULT_RECIPE))
    if recipe_name not in RECIPES:
        raise ConfigError(f"recipe: unknown recipe {recipe_name!r} (choose from {', '.join(RECIPES)})")
    recipe = RECIPES[recipe_name]
    model = {**recipe["model"], **spec.pop("model")}
    train = {**recipe["train"], **spec}
    model_fields = {f.name for f in dataclasses.fields(GPTConfig)}
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"model", "preset", "recipe"}
    if "xsa_alpha" in overrides and "xsa_layers" not in overrides:
        overrides["xsa_layers"] = "all"
    if overrides.get("xsa_layers") not in (None, "none") and "xsa_alpha" not in overrides:
        overrides["xsa_alpha"] = 1.0
    for key, value in overrides.items():
        if key in model_fields:
            model[key] = value
        elif key in train_fields:
            train[key] = value
        else:
            raise ConfigError(f"{key}: not a config field")
    gpt = GPTConfig(**model)
    if train.get("num_tokens") is None:
        ratio = train.get("param_data_ratio") or recipe["param_data_ratio"]
        train["param_data_ratio"] = ratio
        batch = train["total_batch_size"]
        train["num_tokens"] = max(1, int(ratio * scaling_params(gpt)) // batch) * batch
    return TrainConfig(preset=preset, model=gpt, recipe=recipe_name, **train)

