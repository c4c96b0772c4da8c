"""Downstream evaluation: CORE on the base model, ChatCORE after supervised fine-tuning."""
