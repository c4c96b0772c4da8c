"""Evaluate a run folder and record the results in its eval.json (used by the CLI and notebook)."""

from __future__ import annotations

import time
from pathlib import Path

from filelock import FileLock

from xsa.common import autodetect_device, device_name
from xsa.records import atomic_write_json, provenance, read_json


def merge_json(path, update: dict) -> dict:
    """Merge `update` into the JSON object at `path` (created if absent), atomically and under a
    lock, so the core and chat results of one run can come from separate processes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        current = read_json(path) if path.exists() else {}
        current.update(update)
        atomic_write_json(path, current)
    return current


def _load(run_dir, device):
    from xsa.checkpoint import load_model
    model, tokenizer, config = load_model(run_dir, device)
    return model.eval(), tokenizer, config


def _provenance(config, device, t0):
    return provenance(config_hash=config.config_hash(), seed=config.seed, device=device_name(device),
                      wall_time_s=time.time() - t0)


def evaluate_run_core(run_dir, bundle=None, max_per_task: int | None = None, out=None, device=None,
                      batch_tokens: int = 16384) -> dict:
    """CORE of a run's final model -> merged into out (default RUN_DIR/eval.json); returns the update."""
    from xsa.evaluate.bundle import load_bundle, resolve_bundle
    from xsa.evaluate.core import evaluate_core, model_scorer

    device = autodetect_device(device)
    model, tokenizer, config = _load(run_dir, device)
    t0 = time.time()
    res = evaluate_core(load_bundle(resolve_bundle(bundle)), tokenizer, model_scorer(model),
                        config.model.sequence_len, device, max_per_task=max_per_task,
                        max_batch_tokens=batch_tokens)
    update = {"core": res.pop("core"), "tasks": res.pop("tasks"), "missing": res.pop("missing"),
              "core_detail": {**res, "provenance": _provenance(config, device, t0)}}
    merge_json(out or Path(run_dir) / "eval.json", update)
    return update


def evaluate_run_chat(run_dir, bundle=None, max_per_task: int | None = None, out=None, device=None,
                      sft_steps: int = 300, sft_data: str = "auto") -> dict:
    """SFT (cached in RUN_DIR/sft/), then ChatCORE -> merged into out (default RUN_DIR/eval.json)."""
    from xsa.evaluate.bundle import resolve_bundle
    from xsa.evaluate.chat import evaluate_chatcore
    from xsa.evaluate.sft import ensure_sft

    device = autodetect_device(device)
    model, tokenizer, config = _load(run_dir, device)
    bundle = resolve_bundle(bundle)
    t0 = time.time()
    sft_info = ensure_sft(model, tokenizer, config, Path(run_dir) / "sft", steps=sft_steps,
                          source=sft_data, device=device, bundle=bundle)
    res = evaluate_chatcore(model, tokenizer, bundle, config.model.sequence_len, device, max_per_task)
    update = {"chatcore": res.pop("chatcore"), "chat_tasks": res.pop("tasks"),
              "chat_detail": {**res, "provenance": _provenance(config, device, t0)},
              "sft": {k: v for k, v in sft_info.items() if k != "data"}, "sft_data": sft_info["data"]}
    merge_json(out or Path(run_dir) / "eval.json", update)
    return update


def task_rows(record: dict, run: str = "") -> list[dict]:
    """One row per task of an eval.json record (CORE tasks, then chat tasks, then missing)."""
    rows = []
    for suite, key in (("CORE", "tasks"), ("ChatCORE", "chat_tasks")):
        for label, r in record.get(key, {}).items():
            rows.append({"run": run, "suite": suite, "task": label, "n": r["n"],
                         "accuracy": r["accuracy"], "centered": r["centered"]})
    for label in record.get("missing", []):
        rows.append({"run": run, "suite": "CORE", "task": label, "n": 0, "accuracy": None, "centered": None})
    return rows
