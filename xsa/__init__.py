"""Exclusive Self-Attention (XSA) under Muon: a reproducible study as a package."""

import os

# As nanochat: let the CUDA caching allocator grow segments instead of fragmenting (set before torch
# is imported by any module of the package; a value the user set wins, and CPUs ignore it).
os.environ.setdefault("PYTORCH_ALLOC_CONF", "expandable_segments:True")

__version__ = "0.1.0"
