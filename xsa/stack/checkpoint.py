"""
Checkpoints of a run folder (loading a trained run folder back for evaluation is xsa.runs.load).

RUN_DIR/ckpt/state.pt   everything needed to continue bit-exactly: model and optimizer states (every
                        rank's share of Muon's state, gathered to rank 0 under torchrun), the
                        step (the data loader is a pure function of it), the loop's running values
                        (loss EMA, timers, last val bpb) and every RNG state (python, numpy, torch, cuda).
RUN_DIR/ckpt/model.pt   the model weights alone, with the config, for evaluation and diagnostics.
Both are written atomically (xsa.base.records), so a killed run leaves the previous checkpoint intact.
"""

from __future__ import annotations

import hashlib
import random
import zipfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from xsa.stack.config import ConfigError, TrainConfig
from xsa.base.records import atomic_torch_save


def state_path(run_dir) -> Path:
    """A run's resumable training state (RUN_DIR/ckpt/state.pt): never committed."""
    return Path(run_dir) / "ckpt" / "state.pt"


def model_path(run_dir) -> Path:
    """A run's final weights (RUN_DIR/ckpt/model.pt): written by training, never committed."""
    return Path(run_dir) / "ckpt" / "model.pt"


def weights_sha256(state_dict: dict) -> str:
    """sha256 over the names and raw bytes of every tensor, in sorted name order (device-independent)."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous().reshape(-1)
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def load_checked(path) -> dict:
    """torch.load of a checkpoint after checking every record of it against its stored CRC-32.

    torch.save writes a zip archive with a CRC-32 per record, but torch.load never checks them: a
    flipped bit in the weights would load silently. Reading the archive once with zipfile's
    testzip() catches any damaged record (about 1 GB/s), before a wrong weight can reach training.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: checkpoint not found")
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise ValueError(f"{path}: corrupt or truncated checkpoint, not a readable archive ({e})") from None
    if bad is not None:
        raise ValueError(f"{path}: corrupt checkpoint: record {bad} does not match its stored CRC-32")
    try:
        # weights_only: a checkpoint is data, never code to run
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for truncated or garbled files
        raise ValueError(f"{path}: corrupt or unreadable checkpoint ({type(e).__name__}: {e})") from None


# -----------------------------------------------------------------------------
# RNG states (numpy's key array stored as a tensor so that loading needs no pickled objects)

def _rng_state() -> dict:
    np_state = np.random.get_state(legacy=False)
    np_state["state"]["key"] = torch.from_numpy(np_state["state"]["key"].astype(np.int64))
    state = {"python": random.getstate(), "numpy": np_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np_state = dict(state["numpy"])
    np_state["state"] = dict(np_state["state"], key=np_state["state"]["key"].numpy().astype(np.uint32))
    np.random.set_state(np_state)
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# -----------------------------------------------------------------------------
# Training state

def optimizer_states(optimizers) -> list[dict]:
    """Every optimizer's complete state: a collective under torch.distributed (every rank calls it),
    complete on rank 0. Muon's per-matrix state lives on each matrix's owner rank and is gathered
    (Muon.full_state_dict); AdamW's is the same on every rank."""
    return [opt.full_state_dict() if hasattr(opt, "full_state_dict") else opt.state_dict() for opt in optimizers]


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def save_training_state(run_dir, *, model, optimizers, step: int, loop_state: dict, config: TrainConfig) -> Path:
    """Write RUN_DIR/ckpt/state.pt. Under torch.distributed every rank calls this (the optimizer
    state is gathered from all of them) and rank 0 writes the file, with the world size it ran on."""
    path = state_path(run_dir)
    optimizers = optimizer_states(optimizers)
    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return path
    atomic_torch_save(path, {
        "step": step,
        "model": model.state_dict(),
        "optimizers": optimizers,
        "optimizer_state": "complete",  # every rank's share (older files hold rank 0's alone)
        "world_size": _world_size(),
        "loop_state": loop_state,
        "rng": _rng_state(),
        "config": config.to_dict(),
    })
    return path


def _check_complete(path, state: dict, optimizers) -> None:
    """Refuse a checkpoint whose Muon state misses matrices: one written by rank 0 alone under
    torchrun before the state was gathered (rank 0 held only the matrices it owns)."""
    if state.get("optimizer_state") == "complete" or state.get("step", 0) == 0:
        return
    for opt, opt_state in zip(optimizers, state["optimizers"]):
        if hasattr(opt, "full_state_dict"):
            n = sum(len(g["params"]) for g in opt.param_groups)
            if len(opt_state["state"]) < n:
                raise ValueError(f"{path}: holds the Muon state of {len(opt_state['state'])} of {n} matrices "
                                 "(written under torchrun by rank 0 alone, before every rank's state was "
                                 "saved); resuming it would restart the others from zero, so train the run "
                                 "again (--overwrite)")


def load_training_state(run_dir, *, model, optimizers, config: TrainConfig) -> tuple[int, dict]:
    """Restore model, optimizers and RNGs in place; return (step, loop_state). Every rank loads the
    whole file; Muon keeps the state of the matrices the rank owns at the current world size, so a
    checkpoint of any world size resumes on any other."""
    path = state_path(run_dir)
    state = load_checked(path)
    if TrainConfig.from_dict(state.get("config") or {}, str(path)) != config:  # by value, as config.json
        raise ConfigError(f"config: {path} was written by a different training config")
    _check_complete(path, state, optimizers)
    try:
        model.load_state_dict(state["model"])
        for opt, opt_state in zip(optimizers, state["optimizers"], strict=True):
            opt.load_state_dict(opt_state)
    except (RuntimeError, ValueError, KeyError) as e:
        raise ValueError(f"{path}: does not fit this model/optimizer ({e})") from None
    _set_rng_state(state["rng"])
    return state["step"], state["loop_state"]


def save_model(run_dir, *, model, config: TrainConfig, step: int) -> Path:
    path = model_path(run_dir)
    atomic_torch_save(path, {"model": model.state_dict(), "config": config.to_dict(), "step": step})
    return path

