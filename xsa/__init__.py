"""Exclusive Self-Attention (XSA) under Muon: a reproducible study as a package."""

__version__ = "0.1.0"
