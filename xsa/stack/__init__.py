"""The model and how it trains: every config field and the recipes (config), the presets (presets),
one run's spec (spec), the GPT (model), its attention with the XSA projection (attention), the KV cache of
decoding (kvcache), the optimizers (optim), the one training step and its precision policy (step), the loop's
timers (timers), the loss (loss), bits per byte (bpb), checkpoints
(checkpoint) and the devices (common)."""
