"""The model and how it trains: every config field and the recipes (config), the presets (presets),
one run's spec (spec), the GPT with its XSA projection (model), the optimizers (optim), the one
training step and its precision policy (step), the loss (loss), bits per byte (bpb), checkpoints
(checkpoint) and the devices (common)."""
