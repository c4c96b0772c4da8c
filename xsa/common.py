"""Small helpers shared by every stage: device detection, distributed info, printing."""

from __future__ import annotations

import os

import torch


def autodetect_device(requested: str | None = None) -> torch.device:
    """cuda if present, then mps, then cpu; `requested` ("cpu", "cuda", "cuda:1", ...) wins."""
    if requested and requested != "auto":
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    """A human-readable name of the device, for run records."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        import platform
        return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return device.type


def dist_info() -> tuple[bool, int, int, int]:
    """(is_ddp, rank, local_rank, world_size) from torchrun's environment."""
    if all(k in os.environ for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")):
        return True, int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    return False, 0, 0, 1


def print0(*args, **kwargs):
    """print on rank 0 only."""
    if dist_info()[1] == 0:
        print(*args, **kwargs)


def cache_dir() -> "os.PathLike":
    """Root of everything downloaded or built (data, tokenizers, eval bundle): $XSA_CACHE or ~/.cache/xsa."""
    from pathlib import Path
    return Path(os.environ.get("XSA_CACHE", Path.home() / ".cache" / "xsa")).expanduser()
