"""
One JSON Schema per kind of record the paper reads, checked with the `jsonschema` library.

The integrity checks (integrity.py) ask whether a record set is whole and of one study; these ask
whether each value in a record is of its kind: a negative CPU time, a 300-digit wall time, a string
val bpb, a p above 1 would otherwise be printed in a table as it is (or end the build in a raw
TypeError). The schemas are data, written from the committed records and the code that writes them
(xsa/train.py, xsa/base/records.py, xsa/throughput.py, xsa/against.py, xsa/books/estimates.py, xsa/evaluate/,
xsa/diagnostics.py, xsa/gpu/parts.py, xsa/archive.py):

- summary:     a run's summary.json
- provenance:  a run's provenance.json (and the provenance inside every other record)
- throughput:  results/throughput/*.json (the overhead measurement and the comparison with nanochat)
- estimates:   results/estimates/<study>.json
- eval:        a run's eval.json (CORE and ChatCORE, xsa/evaluate/run.py; results/chat_check/*.json too)
- diagnostics: a run's diagnostics.json (xsa/diagnostics.py)
- gpu_check:   the GPU quick check's record (results/gpu/quick-*.json, xsa/gpu_check.py, xsa/gpu/parts.py)
- archive:     one line of the archive manifest (xsa/archive.sha256, read whole by manifest_problems)
- config:      a run's config.json (xsa/checks/run_schemas.py, with the parts in xsa/checks/schema_parts.py)
- metrics:     one line of a run's metrics.jsonl (run_schemas.py; a file of them read by check_lines)

Every schema allows fields it does not name (records gain fields over time) and a field that is
absent (a record older than the field). Each problem names the file and the field:

    results/runs/X/summary.json: cpu_time_s: -3.0 is less than the minimum of 0
    results/runs/X/metrics.jsonl:12: train_loss: -0.5 is less than the minimum of 0

JSON Schema compares a value with constants only, so what relates two values of a record is checked
beside it (`interval_problems`, xsa/checks/relations.py): an interval's lo <= hi, a CORE score that is
the mean of its tasks, a layer's diagnostic that is the mean of its heads. It also lets NaN pass every
bound (NaN < 0 is false), hence the `finite` keyword.
"""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import ValidationError

from xsa.archive import MANIFEST
from xsa.checks import run_schemas
from xsa.checks.relations import RELATIONS
from xsa.checks.schema_parts import (ARCHIVED_PATH, BOOL, BPB, CENTERED, COSINE, COUNT, DIAGNOSTIC, HEX16, HEX40,
                                     HEX64, ISO_DATE, MARGIN_BPB, NATS, PATTERNS, POSITIVE, RATIO, SECONDS, SHARE,
                                     Validator, array, integer, nullable, number, obj, pair, text)
from xsa.stack.config import ARM_LABELS

SUMMARY = {
    "type": "object",
    "required": ["val_bpb", "complete"],  # what every reader needs; the rest is checked where present
    "properties": {
        "val_bpb": number(exclusiveMinimum=0, exclusiveMaximum=20),  # bits per byte: 8 is a uniform byte
        "train_loss_final": nullable(number(minimum=0)),  # None when no log step was reached
        "steps": COUNT, "num_iterations": COUNT, "tokens": COUNT, "flops_per_token": COUNT,
        "complete": BOOL, "xsa_gate": BOOL,
        "seed": integer(),
        "world_size": integer(minimum=1),
        "cpu_time_s": SECONDS, "wall_time_s": SECONDS,
        "tok_per_s": nullable(number(minimum=0)),  # None without timed steps
        "mfu": nullable(number(minimum=0)),  # None without a peak
        "peak_flops": nullable(number(exclusiveMinimum=0)),
        "xsa_alpha": number(),
        "learned_gates": nullable(array(array(number()))),  # None without xsa_gate
        "config_hash": HEX16, "final_weights_sha256": HEX64,
        **{k: text() for k in ("preset", "optimizer", "device", "arm", "xsa_layers", "xsa_value", "xsa_variant")},
        "overrides": {"type": "object"},
    },
}

PROVENANCE = {
    "type": "object",
    "required": ["config_hash"],  # the rest is checked where present
    "properties": {
        # None outside a git checkout; *_end where a resumed run ended at another commit
        "git_commit": nullable(HEX40), "git_commit_end": nullable(HEX40),
        "git_dirty": nullable(BOOL), "git_dirty_end": nullable(BOOL), "git_diff": nullable(text()),
        "date": ISO_DATE,
        "wall_time_s": nullable(SECONDS),  # None where nothing was timed
        "cpu_time_s": nullable(SECONDS),
        "seed": nullable(integer()),
        "config_hash": HEX16, "xsa_config_hash": HEX16,
        "data_sha256": nullable(HEX64),
        "num_threads": integer(minimum=1), "world_size": integer(minimum=1), "device_batch_size": integer(minimum=1),
        "cpu_identity": nullable({"type": "object"}),
        **{k: nullable(text()) for k in ("torch_version", "numpy_version", "tiktoken_version", "python_version",
                                         "device", "cpu_model", "hostname_kind", "ld_preload", "command", "data_dir")},
    },
}

ARM = {  # one arm of a throughput record (xsa.throughput.arm_summary)
    "type": "object",
    "properties": {
        **{f"step_time_{k}_s": SECONDS for k in ("median", "iqr", "min", "max")},
        "step_times_s": array(SECONDS), "step_cpu_times_s": nullable(array(SECONDS)),  # CPU times on CPU only
        "tok_per_s": number(minimum=0),
        "mfu": nullable(number(minimum=0)), "mfu_datasheet": nullable(number(minimum=0)),
        "peak_step_mem_bytes": nullable(integer(minimum=0)),  # on GPUs only
        "flops_per_token": COUNT,
    },
}

THROUGHPUT = {
    "type": "object",
    "required": ["preset"],
    "properties": {
        "preset": text(), "complete": BOOL, "compiled": BOOL, "device": text(), "device_type": text(),
        **{k: RATIO for k in ("overhead_ratio", "cpu_time_overhead_ratio", "paired_ratio_median",
                              "cpu_time_paired_ratio_median")},
        **{k: pair(RATIO) for k in ("overhead_ci95", "cpu_time_overhead_ci95", "paired_ratio_quartiles",
                                    "cpu_time_paired_ratio_quartiles")},
        **{k: COUNT for k in ("measured_steps", "warmup_steps", "tokens_per_step", "seq_len", "threads",
                              "device_batch_size", "grad_accum", "train_steps_extra", "pairs")},
        "peak_mem_bytes": nullable(integer(minimum=0)),
        "matmul_peak_flops": number(exclusiveMinimum=0), "datasheet_peak_flops": nullable(number(exclusiveMinimum=0)),
        "arms": {"type": "object", "additionalProperties": ARM},
        "loss_curves": {"type": "object", "additionalProperties": array(number())},
        "bootstrap": {"type": "object", "properties": {"resamples": integer(minimum=1), "seed": integer()}},
        "cpu_time_bootstrap": {"type": "object", "properties": {"resamples": integer(minimum=1), "seed": integer()}},
        # xsa.against: our step time over nanochat's (a ratio, not less 1)
        "ours_step_s": SECONDS, "nanochat_step_s": SECONDS,
        "ratio_median": number(exclusiveMinimum=0), "ratio_quartiles": pair(number(exclusiveMinimum=0)),
        "compile_and_warmup_s": {"type": "object", "additionalProperties": SECONDS},
        "provenance": PROVENANCE,
    },
    "patternProperties": {  # the two arms' headline values, copied beside the arms
        "^(baseline|xsa)_step_time_median_s$": SECONDS,
        "^(baseline|xsa)_tok_per_s$": number(minimum=0),
        "^(baseline|xsa)_mfu(_datasheet)?$": nullable(number(minimum=0)),
    },
}

ESTIMATE = {  # one xsa.books.estimates.Estimate
    "type": "object",
    "required": ["key", "value", "runs"],
    "properties": {
        "key": text(),
        "value": nullable(number()), "lo": nullable(number()), "hi": nullable(number()),
        "seed_paper": nullable(number()), "threshold": number(),
        "sd": nullable(number(minimum=0)),
        "p": nullable(number(minimum=0, maximum=1)), "p_holm": nullable(number(minimum=0, maximum=1)),
        "n": COUNT, "declared": COUNT,
        "runs": array(text()),
        **{k: text() for k in ("unit", "metric", "family", "definition", "reason", "expect", "verdict")},
    },
    "additionalProperties": False,  # every field is one of an Estimate's, so the file reads back as Estimates
    # a verdict (xsa/books/verdicts.py) names the sentence it decides
    "if": {"properties": {"family": {"const": "verdict"}}, "required": ["family"]},
    "then": {"properties": {"verdict": text(minLength=1)}, "required": ["verdict"]},
}

ESTIMATES = {"type": "object", "required": ["estimates"],
             "properties": {"study": text(), "estimates": array(ESTIMATE)}}

# -- the records of the evaluation, diagnostics and GPU check stages, and the archive's manifest

TASK = obj({"n": POSITIVE, "accuracy": SHARE, "centered": CENTERED,  # one CORE or ChatCORE task
            "correct_bpb": nullable(BPB), "margin_bpb": nullable(MARGIN_BPB)}, "n", "accuracy", "centered")
SCORED = {  # what binds a score to its run (xsa.evaluate.run.scored, trained_state)
    "run": text(), "weights_sha256": HEX64, "provenance": PROVENANCE, "max_per_task": nullable(POSITIVE),
    "missing": array(text()),
    "trained": obj({"step": nullable(COUNT), "num_iterations": nullable(COUNT), "complete": BOOL})}
SFT = obj({  # xsa.evaluate.sft.ensure_sft, its data aside
    **{k: POSITIVE for k in ("steps", "batch_rows", "seq_len", "max_conversations", "micro_batch_rows",
                             "micro_batch_tokens", "rows_per_epoch")},
    **{k: COUNT for k in ("warmup_steps", "heldout_conversations", "assistant_tokens_per_epoch")},
    **{k: NATS for k in ("heldout_loss_before", "heldout_loss_after", "loss_first", "loss_last", "loss_last10_mean")},
    "lr_scale": number(exclusiveMinimum=0), "row_fill": SHARE, "epochs": number(minimum=0), "wall_time_s": SECONDS,
    "source": text(), "packing": text()})
SFT_DATA = obj({  # xsa.evaluate.sft_data: the registry's conversations or nanochat's mixture
    **{k: COUNT for k in ("conversations_in_file", "conversations_sampled", "conversations_used",
                          "dropped_contaminated", "conversations_heldout", "conversations_trained")},
    "conversations_per_source": {"type": "object", "additionalProperties": COUNT},
    "sha256": HEX64, "files": array(text()), **{k: text() for k in ("source", "file", "licence", "decontamination")}})

EVAL = obj({
    "core": CENTERED, "chatcore": CENTERED, "core_complete": BOOL, "missing": array(text()),
    "core_bpb": nullable(BPB), "core_margin_bpb": nullable(MARGIN_BPB),  # None where no task has them
    "tasks": {"type": "object", "additionalProperties": TASK},
    "chat_tasks": {"type": "object", "additionalProperties": TASK},
    "core_detail": obj({**SCORED, "bundle": text(), "max_len": POSITIVE}, "provenance"),
    "chat_detail": obj({**SCORED, "gen_tokens": POSITIVE, "gen_batch": POSITIVE}, "provenance"),
    "sft": SFT, "sft_data": SFT_DATA},
    anyOf=[{"required": ["core"]}, {"required": ["chatcore"]}],  # CORE, ChatCORE or both (merged in one file)
    dependentRequired={"core": ["core_complete", "tasks", "missing", "core_detail"],
                       "chatcore": ["chat_tasks", "chat_detail"]})

EXTRA = {"attn_logit_max": number(), "sink_mass": SHARE, "gate_mean": number(minimum=0, maximum=2)}
LAYER = obj({"layer": COUNT, "xsa_alpha": SHARE, **DIAGNOSTIC, **EXTRA,  # EXTRA: xsa.diagnostics.EXTRA_METRICS
             "heads": obj({m: array(v, minItems=1) for m, v in {**DIAGNOSTIC, **EXTRA}.items()})},
            "layer", "cos_y_v", "cos_z_v", "diag_mass", "entropy")
DIAGNOSTICS = obj({
    "layers": array(LAYER, minItems=1), "provenance": PROVENANCE,
    "run": text(), "run_dir": text(), "weights_sha256": HEX64, "preset": text(), "arm": text(),
    "overrides": {"type": "object"}, "xsa_alpha": SHARE, "xsa_gate": BOOL,
    **{k: BOOL for k in ARM_LABELS},  # the attention arms' switches (spec.arm_record)
    **{k: text() for k in ("xsa_layers", "xsa_value", "xsa_variant")},
    "batch": obj({**{k: POSITIVE for k in ("batch_size", "batches", "rows", "seq_len")}, "tokens_sha256": HEX64,
                  **{k: text() for k in ("split", "data_dir", "data", "which")}}),
    "definitions": {"type": "object", "additionalProperties": text()}}, "layers", "provenance")


def part(properties: dict) -> dict:
    """One part of the GPU quick check: ok and its seconds, or an error where it failed."""
    return obj({"ok": BOOL, "seconds": SECONDS, "error": text(), "traceback": text(), **properties}, "ok", "seconds")


def judged(**bounds) -> dict:
    """A value the GPU check judges (a loss, a cosine, a spread): NaN or infinity there is what it found
    (the part's ok is false), not a damaged record; a finite value is within `bounds`."""
    return {"type": "number", **bounds}


ARMS = "^(baseline|xsa)_"
GPU_PARTS = {  # xsa.gpu.parts.PARTS
    "versions": part({**{k: text() for k in ("python", "torch", "device", "device_type", "matmul_peak_dtype")},
                      "cuda": nullable(text()), "triton": nullable(text()), "gpu_memory_bytes": POSITIVE,
                      "capability": text(pattern=r"^\d+\.\d+$"), "matmul_peak_flops": number(exclusiveMinimum=0),
                      "datasheet_peak_flops": nullable(number(exclusiveMinimum=0))}),
    "compile": part({"first_step_s": SECONDS, "next_step_s": SECONDS, "loss": judged(minimum=0),
                     "graphs_compiled": nullable(COUNT), "params": POSITIVE, "tokens_per_step": POSITIVE}),
    "steps": part({"lr_mults": array(number(minimum=0)), "losses": array(judged(minimum=0)),
                   "new_graphs": nullable(COUNT)}),
    "precision": part({**{k: judged(minimum=0) for k in ("loss_fp32", "loss_bf16", "loss_diff")},
                       "loss_tol": number(exclusiveMinimum=0), "grad_cos_bound": COSINE, "grad_cos_min_matrix": text(),
                       "grad_cos_min": judged(minimum=-1, maximum=1),
                       "per_matrix": {"type": "object", "additionalProperties": judged(minimum=-1, maximum=1)}}),
    "sdpa": part({"backend": text(), "operators": array(text())}),
    "timing": {**part({**{k: POSITIVE for k in ("rows", "micro_batches", "tokens_per_step", "rounds")},
                       "order": text(), "timer": text(), "overhead_ratio": RATIO,
                       "compiled": {"type": "object", "additionalProperties": BOOL},
                       "step_times_s": {"type": "object", "additionalProperties": array(SECONDS)}}),
               "patternProperties": {ARMS + "(step|optimizer)_s$": SECONDS, ARMS + "optimizer_share$": SHARE,
                                     ARMS + "tok_per_s$": number(minimum=0),
                                     ARMS + "mfu(_datasheet)?$": nullable(number(minimum=0))}},
    "xsa_cos": part({"z_dtype": text(), "mean_bound": number(exclusiveMinimum=0),
                     **{f"{k}_abs_cos_per_layer": array(judged(minimum=0, maximum=1)) for k in ("mean", "max")}}),
    "resume": part({"steps": POSITIVE, "bitwise_equal": BOOL,  # spreads relative to how far each tensor moved
                    **{k: judged(minimum=0) for k in ("max_abs_diff", "moved", "diff", "noise_floor", "tolerance",
                                                      "lost_state_diff")}}),
    "memory": part({"note": text(),  # bytes per "<preset>@<rows>", or "out of memory"; null off CUDA
                    "peak_mem_bytes": {"type": ["object", "null"], "additionalProperties": {
                        "type": ["integer", "string"], "minimum": 0,
                        "pattern": "^out of memory$"}}}),
    "decode": part({"preset": text(), "autocast": text(),
                    **{k: POSITIVE for k in ("questions", "tokens_each", "gen_batch")},
                    **{k: number(minimum=0) for k in ("tokens_per_s_alone", "tokens_per_s_batched", "speedup")},
                    "replies_agree": SHARE}),
}
GPU_CHECK = obj({"kind": {"const": "gpu quick check"}, "dry": BOOL, "preset": text(), "batch": POSITIVE,
                 "compiled": BOOL, "autocast": text(), "complete": BOOL, "ok": BOOL, "elapsed_s": SECONDS,
                 "parts": obj(GPU_PARTS), "provenance": PROVENANCE}, "kind", "parts", "complete")

ARCHIVED = obj({"sha256": HEX64, "path": ARCHIVED_PATH}, "sha256", "path")  # '<sha256>  <path>' (sha256sum)

SCHEMAS = {"summary": SUMMARY, "provenance": PROVENANCE, "throughput": THROUGHPUT, "estimates": ESTIMATES,
           "eval": EVAL, "diagnostics": DIAGNOSTICS, "gpu_check": GPU_CHECK, "archive": ARCHIVED,
           **run_schemas.SCHEMAS}  # config, metrics
VALIDATORS = {kind: Validator(schema) for kind, schema in SCHEMAS.items()}


def interval_problems(kind: str, record) -> list[tuple[str, str]]:
    """(field, what is wrong) for each relation between values of the record that does not hold
    (xsa/checks/relations.py): an interval whose lower end is above its upper, a mean that is not
    the mean of what it averages."""
    return list(RELATIONS[kind](record)) if kind in RELATIONS and isinstance(record, dict) else []


def _short(message: str, limit: int = 200) -> str:
    """A message about a huge value, cut in the middle (its end says which bound it breaks)."""
    return message if len(message) <= limit else f"{message[:80]} ... {message[-100:]}"


def _message(error: ValidationError) -> str:
    if error.validator == "pattern" and error.validator_value in PATTERNS:
        return f"{error.instance!r} is not {PATTERNS[error.validator_value]}"
    if error.validator == "anyOf" and all(set(s) == {"required"} for s in error.validator_value):
        return "holds none of " + " and ".join(repr(k) for s in error.validator_value for k in s["required"])
    if error.validator == "pattern" and error.validator_value == "^out of memory$":
        return f"{error.instance!r} is neither a byte count nor 'out of memory'"
    return error.message


def problems(kind: str, record, path) -> list[str]:
    """Each way `record` (a JSON value read from `path`) is not a record of `kind`: '<path>: <field>: <why>'."""
    quick = run_schemas.QUICK.get(kind)  # a shortcut where it passes the record (schema_parts.accepts)
    if quick is not None and kind not in RELATIONS and quick(record):
        return []
    found = [(".".join(map(str, e.absolute_path)), _message(e)) for e in VALIDATORS[kind].iter_errors(record)]
    found += interval_problems(kind, record)
    return [f"{path}: {field + ': ' if field else ''}{_short(why)}" for field, why in sorted(found)]


def check_file(kind: str, path) -> list[str]:
    """problems() of the JSON file at `path`; a file that is missing or not JSON is one problem."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [f"{path}: missing"]
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:  # ValueError: JSONDecodeError, a 5000-digit int
        return [f"{path}: not a JSON file ({_short(str(e))})"]
    return problems(kind, record, path)


def check_lines(kind: str, path) -> list[str]:
    """problems() of each line of the JSON-lines file at `path` (a run's metrics.jsonl), each named
    '<path>:<line>: <field>: <why>'; a line that is not JSON (garbled) and a last line without its
    newline (torn: a killed writer) are each one problem naming the line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except FileNotFoundError:
        return [f"{path}: missing"]
    except (OSError, UnicodeDecodeError) as e:
        return [f"{path}: not a text file ({_short(str(e))})"]
    out = [] if lines[-1] == "" else [f"{path}:{len(lines)}: torn last line (no newline: a killed writer)"]
    lines.pop()  # the empty string after the last newline, or the torn line
    if not lines and not out:
        return [f"{path}: empty (no line)"]
    for i, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, a 5000-digit int
            out.append(f"{path}:{i}: not a JSON line ({_short(str(e))})")
            continue
        out += problems(kind, record, f"{path}:{i}")
    return out


def manifest_problems(path=MANIFEST) -> list[str]:
    """Each way the archive manifest (sha256sum's format, '<sha256>  <commit>/runs/<run id>/<file>' a
    line) is not one, naming its line: '<path>:<line>: <field>: <why>'; a path listed twice too."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return [f"{path}: missing"]
    except (OSError, UnicodeDecodeError) as e:
        return [f"{path}: not a text file ({_short(str(e))})"]
    out, seen = [] if lines else [f"{path}: empty (it declares no archive)"], {}
    for i, line in enumerate(lines, 1):
        digest, _, rel = line.partition("  ")
        out += problems("archive", {"sha256": digest, "path": rel}, f"{path}:{i}")
        if rel in seen:
            out.append(f"{path}:{i}: path: {_short(repr(rel))} is listed twice (first on line {seen[rel]})")
        seen.setdefault(rel, i)
    return out
