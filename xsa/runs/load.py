"""
Loading a trained run folder back for evaluation and diagnostics: its model, its config and the
tokenizer of the data it trained on (the run folder's side; the checkpoint files themselves are
xsa.stack.checkpoint's).
"""

from __future__ import annotations

from pathlib import Path

from xsa.data import data_dir as default_data_dir
from xsa.data.tokenizer import Tokenizer
from xsa.base.records import read_json
from xsa.stack.checkpoint import load_checked, model_path
from xsa.base.common import autodetect_device
from xsa.stack.config import ConfigError, TrainConfig
from xsa.stack.model import GPT


def run_data_dir(saved_data_dir, subset: str) -> Path:
    """The data folder a run trained on (as its config.json records it), or, where that folder is
    gone (another machine, a fresh clone), the default folder of the same subset."""
    if saved_data_dir and (Path(saved_data_dir) / "tokenizer").exists():
        return Path(saved_data_dir)
    return default_data_dir(subset)


def checked_tokenizer(data_dir, cfg: TrainConfig, whose: str) -> Tokenizer:
    """The tokenizer of a data folder, whose vocabulary must be the one of `cfg` (`whose` config:
    the one check of training and of loading a trained model)."""
    tokenizer = Tokenizer.from_data_dir(data_dir)
    if tokenizer.vocab_size != cfg.model.vocab_size:
        raise ConfigError(f"vocab_size: the tokenizer in {data_dir} has {tokenizer.vocab_size} tokens, "
                          f"{whose} has {cfg.model.vocab_size}")
    return tokenizer


def load_model(run_dir, device=None):
    """(model, tokenizer, train_config) of a finished run folder, model in eval mode on `device`.

    Reads RUN_DIR/config.json, RUN_DIR/ckpt/model.pt and the tokenizer of the data dir the run
    trained on (config.json's data_dir; if that path is gone, the default dir of the same subset).
    """

    run_dir = Path(run_dir)
    record = read_json(run_dir / "config.json")
    saved_data_dir = record.pop("data_dir", None)
    try:
        cfg = TrainConfig.from_dict(record, str(run_dir / "config.json"))
    except ConfigError as e:
        raise ValueError(str(e)) from None
    path = model_path(run_dir)
    ckpt = load_checked(path)
    if TrainConfig.from_dict(ckpt.get("config") or {}, str(path)) != cfg:
        raise ConfigError(f"config: {path} does not belong to {run_dir / 'config.json'}")

    tokenizer = checked_tokenizer(run_data_dir(saved_data_dir, cfg.data), cfg, f"the checkpoint {path}")

    device = autodetect_device(device)
    model = GPT(cfg.model)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise ValueError(f"{path}: weights do not fit the model of its config ({e})") from None
    return model.to(device).eval(), tokenizer, cfg
