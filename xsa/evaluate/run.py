"""Evaluate a run folder and record the results in its eval.json (used by the CLI and notebook)."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

from filelock import FileLock

from xsa.runs.load import load_model
from xsa.stack.checkpoint import weights_sha256
from xsa.base.common import autodetect_device, device_name
from xsa.data.bundle import load_bundle, resolve_bundle
from xsa.evaluate.chat import evaluate_chatcore
from xsa.evaluate.core import check_max_per_task, default_batch_tokens, evaluate_core, model_scorer
from xsa.evaluate.sft import check_args, ensure_sft
from xsa.base.records import atomic_write_json, check_out, provenance, read_json
from xsa.base.runlock import own_run
from xsa.stack.step import Precision


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


def check_merge_target(out) -> Path:
    """check_out, and the file, if there, must hold a JSON object to merge into: found before the
    evaluation runs, not after every task was scored."""
    out = check_out(out, "eval")
    if out.exists():
        current = read_json(out)  # corrupt JSON: a ValueError naming the file
        if not isinstance(current, dict):
            raise ValueError(f"out: {out} holds a JSON {type(current).__name__}, not an object the results "
                             "can be merged into; choose another --out or move it away")
    return out


def items_path(out: Path) -> Path:
    """Where a CORE evaluation's per-item values go: core_items.json beside a run's eval.json, and
    <stem>.core_items.json beside any other --out, so two evaluations into one folder keep theirs."""
    return out.with_name("core_items.json" if out.name == "eval.json" else f"{out.stem}.core_items.json")


def trained_state(run_dir) -> dict:
    """Which model is scored: the step of the run and whether it reached its horizon (a run stopped
    early, or still training, is labelled so in the record and warned about)."""
    summary = Path(run_dir) / "summary.json"
    s = read_json(summary) if summary.exists() else {}
    state = {"step": s.get("steps"), "num_iterations": s.get("num_iterations"), "complete": s.get("complete") is True}
    if not state["complete"]:
        where = f"step {state['step']} of {state['num_iterations']}" if s else "no summary.json"
        warnings.warn(f"{run_dir} is not trained to its horizon ({where}); its scores are recorded "
                      "with trained.complete = false", stacklevel=2)
    return state


def _load(run_dir, device):
    model, tokenizer, config = load_model(run_dir, device)
    return model.eval(), tokenizer, config


def scored(run_dir, model) -> dict:
    """What binds a record to its run: the run id and the sha256 of the weights scored (the summary's
    final_weights_sha256 of the run that trained them), checked by the paper's record check."""
    return {"run": Path(run_dir).name, "weights_sha256": weights_sha256(model.state_dict())}


def _provenance(config, device, t0, c0):
    """Who scored what, and what it cost: wall time since t0, this process's CPU time since c0."""
    return provenance(config_hash=config.config_hash(), seed=config.seed, device=device_name(device),
                      wall_time_s=time.time() - t0, extra={"cpu_time_s": time.process_time() - c0})


def evaluate_run_core(run_dir, bundle=None, max_per_task: int | None = None, out=None, device=None,
                      batch_tokens: int | None = None) -> dict:
    """CORE of a run's final model -> merged into out (default RUN_DIR/eval.json); returns the update.

    Per task: accuracy, centered accuracy and the mean likelihood measures (xsa.evaluate.core); the
    per-item values go beside it (items_path: core_items.json beside eval.json), so that arms can be
    paired item by item.
    Scored in the precision policy of training (bf16 autocast on CUDA, fp32 elsewhere).
    """

    check_max_per_task(max_per_task)
    if batch_tokens is not None and (not isinstance(batch_tokens, int) or batch_tokens < 1):
        raise ValueError(f"batch_tokens must be a positive integer, got {batch_tokens!r}")
    out = check_merge_target(out or Path(run_dir) / "eval.json")
    items_out = check_out(items_path(out), "core items")
    core_bundle = load_bundle(resolve_bundle(bundle))  # a bad bundle fails before the model loads
    device = autodetect_device(device)
    batch_tokens = default_batch_tokens(device) if batch_tokens is None else batch_tokens
    with own_run(run_dir, "CORE evaluation", shared=True):  # never beside a training of the folder
        trained = trained_state(run_dir)
        model, tokenizer, config = _load(run_dir, device)
        t0, c0 = time.time(), time.process_time()
        with Precision.of(device, config).context():
            res = evaluate_core(core_bundle, tokenizer, model_scorer(model), config.model.sequence_len, device,
                                max_per_task=max_per_task, max_batch_tokens=batch_tokens)
        items = {label: t.pop("items") for label, t in res["tasks"].items()}
        atomic_write_json(items_out, {"max_per_task": max_per_task, "tasks": items})
        # every result of evaluate_core goes in as it is (a new metric there needs nothing here),
        # the settings it ran with under core_detail
        detail = {k: res.pop(k) for k in ("max_per_task", "max_len", "bundle")}
        update = {**res, "core_detail": {**detail, **scored(run_dir, model), "trained": trained,
                                         "provenance": _provenance(config, device, t0, c0)}}
        merge_json(out, update)
    return update


def evaluate_run_chat(run_dir, bundle=None, max_per_task: int | None = None, out=None, device=None,
                      sft_steps: int = 300, sft_data: str = "auto", sft_batch_rows: int | None = None,
                      sft_micro_batch_tokens: int | None = None) -> dict:
    """SFT (cached in RUN_DIR/sft/), then ChatCORE -> merged into out (default RUN_DIR/eval.json).

    The SFT update is sft_batch_rows packed rows (default: the run's device_batch_size) in
    micro-batches of at most sft_micro_batch_tokens tokens (default: one pre-training micro-batch).
    Every argument is checked (a ValueError naming it) before the model is loaded."""

    check_max_per_task(max_per_task)
    check_args(sft_steps, sft_batch_rows, sft_micro_batch_tokens, source=sft_data)
    out = check_merge_target(out or Path(run_dir) / "eval.json")
    bundle = resolve_bundle(bundle)
    device = autodetect_device(device)
    with own_run(run_dir, "chat evaluation", shared=True):
        return _chat(run_dir, out, bundle, device, max_per_task, sft_steps, sft_data, sft_batch_rows,
                     sft_micro_batch_tokens)


def _chat(run_dir, out, bundle, device, max_per_task, sft_steps, sft_data, sft_batch_rows, sft_micro_batch_tokens):
    trained = trained_state(run_dir)
    model, tokenizer, config = _load(run_dir, device)
    t0, c0 = time.time(), time.process_time()
    bound = scored(run_dir, model)  # before SFT changes the weights
    sft_info = ensure_sft(model, tokenizer, config, Path(run_dir) / "sft", steps=sft_steps, source=sft_data,
                          device=device, bundle=bundle, batch_rows=sft_batch_rows,
                          micro_batch_tokens=sft_micro_batch_tokens)
    with Precision.of(device, config).context():  # bf16 autocast on CUDA, as training; fp32 elsewhere
        res = evaluate_chatcore(model, tokenizer, bundle, config.model.sequence_len, device, max_per_task)
    update = {"chatcore": res.pop("chatcore"), "chat_tasks": res.pop("tasks"),
              "chat_detail": {**res, **bound, "trained": trained, "provenance": _provenance(config, device, t0, c0)},
              "sft": {k: v for k, v in sft_info.items() if k != "data"}, "sft_data": sft_info["data"]}
    merge_json(out, update)
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
