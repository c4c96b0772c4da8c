"""The rows per micro-batch are how an update is computed, not which update: a run trained or
resumed at another device batch keeps its config and id, records the rows in its provenance, and
trains the same steps to rounding; each rank reads only its own validation batches."""

import json

import pytest
import torch

from conftest import QUIET
from xsa.stack.config import ConfigError
from xsa.stack.presets import make_config
from xsa.data.loader import val_batches
from xsa.train import main, train


def losses(run_dir) -> list[float]:
    return [r["train_loss"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
            if "train_loss" in r]


def test_resume_at_another_device_batch_is_the_same_run(smoke_data, tmp_path):
    cfg = make_config("smoke", **QUIET)  # 4 rows a micro-batch, one micro-batch a step
    full = train(cfg, tmp_path / "full", data_dir=smoke_data, max_steps=6, progress=False)
    train(cfg, tmp_path / "part", data_dir=smoke_data, max_steps=3, progress=False)
    part = train(cfg, tmp_path / "part", data_dir=smoke_data, max_steps=6, progress=False, resume=True,
                 device_batch_size=2)  # two micro-batches of 2 rows from here on
    assert part["config_hash"] == full["config_hash"] == cfg.config_hash()
    assert json.loads((tmp_path / "part" / "config.json").read_text())["device_batch_size"] == 4
    assert json.loads((tmp_path / "part" / "provenance.json").read_text())["device_batch_size"] == 2
    a, b = losses(tmp_path / "full"), losses(tmp_path / "part")
    assert a[:3] == b[:3]  # the same process up to the checkpoint
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4 and part["val_bpb"] == pytest.approx(full["val_bpb"], abs=1e-4)


def test_device_batch_that_does_not_divide_the_batch_is_refused(smoke_data, tmp_path):
    with pytest.raises(ConfigError, match="device_batch_size"):
        train(make_config("smoke"), tmp_path / "r", data_dir=smoke_data, device_batch_size=3, progress=False)
    with pytest.raises(ConfigError, match="device_batch_size"):
        train(make_config("smoke"), tmp_path / "r", data_dir=smoke_data, device_batch_size=0, progress=False)


def test_cli_device_batch_keeps_the_run_id(smoke_data, tmp_path, monkeypatch):
    import xsa.train as t
    seen = {}
    monkeypatch.setattr(t, "train", lambda cfg, out, **kw: seen.update(cfg=cfg, out=out, **kw) or
                        {"val_bpb": 0.0, "steps": 0, "tok_per_s": None})
    main(["--preset", "d24-nanochat", "--device-batch-size", "8", "--no-progress"])
    assert seen["out"].name == "d24-nanochat_base_s0" and seen["device_batch_size"] == 8
    assert seen["cfg"].device_batch_size == 16  # the preset's, the run's identity


def test_each_rank_reads_its_own_validation_batches(smoke_data):
    every = list(val_batches(smoke_data, batch_size=4, seq_len=64, max_tokens=4 * 64 * 5))
    parts = [list(val_batches(smoke_data, batch_size=4, seq_len=64, max_tokens=4 * 64 * 5, rank=r, world_size=2))
             for r in (0, 1)]
    assert [len(p) for p in parts] == [3, 2]
    for b, (x, _) in enumerate(every):
        assert torch.equal(parts[b % 2][b // 2][0], x)
