"""
One JSON Schema per kind of record the paper reads, checked with the `jsonschema` library.

The integrity checks (integrity.py) ask whether a record set is whole and of one study; these ask
whether each value in a record is of its kind: a negative CPU time, a 300-digit wall time, a string
val bpb, a p above 1 would otherwise be printed in a table as it is (or end the build in a raw
TypeError). The schemas are data, written from the committed records and the code that writes them
(xsa/train.py, xsa/records.py, xsa/throughput.py, xsa/against.py, xsa/report/estimates.py):

- summary:    a run's summary.json
- provenance: a run's provenance.json (and the provenance inside a throughput record)
- throughput: results/throughput/*.json (the overhead measurement and the comparison with nanochat)
- estimates:  results/estimates/<study>.json

Every schema allows fields it does not name (records gain fields over time) and a field that is
absent (a record older than the field). Each problem names the file and the field:

    results/runs/X/summary.json: cpu_time_s: -3.0 is less than the minimum of 0

JSON Schema compares a value with constants only, so the intervals (lo <= hi) are checked beside it
(`interval_problems`); it also lets NaN pass every bound (NaN < 0 is false), hence the `finite` keyword.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from jsonschema import Draft202012Validator, ValidationError, validators

MAX_SECONDS = 1e8  # three years: a longer time is a damaged record, not a slow run


def _finite(validator, wanted, instance, schema):
    # a JSON file may hold NaN and Infinity (the records are written with allow_nan)
    if wanted and isinstance(instance, float) and not math.isfinite(instance):
        yield ValidationError(f"{instance!r} is not finite")


Validator = validators.extend(Draft202012Validator, {"finite": _finite})


def number(**bounds) -> dict:
    """A finite number (a bool is not one) within `bounds` (minimum=0, exclusiveMaximum=20, ...)."""
    return {"type": "number", "finite": True, **bounds}


def integer(**bounds) -> dict:
    return {"type": "integer", **bounds}


def text(**more) -> dict:
    return {"type": "string", **more}


def array(items: dict, **more) -> dict:
    return {"type": "array", "items": items, **more}


def nullable(schema: dict) -> dict:
    """`schema` or null (a value the writer leaves out where it has none: JSON null)."""
    return {**schema, "type": [schema["type"], "null"]}


def pair(items: dict) -> dict:
    """An interval [lo, hi] (lo <= hi is interval_problems' check)."""
    return array(items, minItems=2, maxItems=2)


# the patterns by what a message calls them (a regular expression is no help to the reader of one)
PATTERNS = {"^[0-9a-f]{16}$": "a 16-hex config hash", "^[0-9a-f]{40}$": "a 40-hex git commit",
            "^[0-9a-f]{64}$": "a 64-hex sha256",
            r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])(T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?"
            r"(Z|[+-]\d{2}:\d{2})?)?$": "an ISO date (2026-12-02 or 2026-12-02T07:55:27+00:00)"}
HEX16, HEX40, HEX64, ISO_DATE = (text(pattern=p) for p in PATTERNS)

SECONDS = number(minimum=0, maximum=MAX_SECONDS)
COUNT = integer(minimum=0)
BOOL = {"type": "boolean"}
RATIO = number(exclusiveMinimum=-1)  # a time ratio less 1 (an overhead): negative when XSA is faster, never -100%

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
        "git_dirty": nullable(BOOL), "git_dirty_end": nullable(BOOL),
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

ESTIMATE = {  # one xsa.report.estimates.Estimate
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
        **{k: text() for k in ("unit", "metric", "family", "definition", "reason", "expect")},
    },
}

ESTIMATES = {"type": "object", "required": ["estimates"],
             "properties": {"study": text(), "estimates": array(ESTIMATE)}}

SCHEMAS = {"summary": SUMMARY, "provenance": PROVENANCE, "throughput": THROUGHPUT, "estimates": ESTIMATES}
VALIDATORS = {kind: Validator(schema) for kind, schema in SCHEMAS.items()}


def _real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _reversed(lo, hi) -> bool:
    return _real(lo) and _real(hi) and lo > hi  # a value of the wrong kind is the schema's problem


def interval_problems(kind: str, record) -> list[tuple[str, str]]:
    """(field, what is wrong) for each interval of the record whose lower end is above its upper."""
    out = []
    if kind == "throughput" and isinstance(record, dict):
        for key, v in record.items():
            if key.endswith(("_ci95", "_quartiles")) and isinstance(v, list) and len(v) == 2 and _reversed(*v):
                out.append((key, f"{v!r} is reversed: its lower end is above its upper"))
        arms = record.get("arms") if isinstance(record.get("arms"), dict) else {}
        for name, arm in arms.items():
            if isinstance(arm, dict) and _reversed(arm.get("step_time_min_s"), arm.get("step_time_max_s")):
                out.append((f"arms.{name}", f"step_time_min_s {arm['step_time_min_s']!r} is above "
                                            f"step_time_max_s {arm['step_time_max_s']!r}"))
    if kind == "estimates" and isinstance(record, dict) and isinstance(record.get("estimates"), list):
        for i, e in enumerate(record["estimates"]):
            if isinstance(e, dict) and _reversed(e.get("lo"), e.get("hi")):
                out.append((f"estimates.{i}", f"lo {e['lo']!r} is above hi {e['hi']!r} (of {e.get('key')!r})"))
    return out


def _short(message: str, limit: int = 200) -> str:
    """A message about a huge value, cut in the middle (its end says which bound it breaks)."""
    return message if len(message) <= limit else f"{message[:80]} ... {message[-100:]}"


def _message(error: ValidationError) -> str:
    if error.validator == "pattern" and error.validator_value in PATTERNS:
        return f"{error.instance!r} is not {PATTERNS[error.validator_value]}"
    return error.message


def problems(kind: str, record, path) -> list[str]:
    """Each way `record` (a JSON value read from `path`) is not a record of `kind`: '<path>: <field>: <why>'."""
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
