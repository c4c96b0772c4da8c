"""
Every metric the paper reports, defined once: its name in the records, how a sentence and a table
header name it, its unit, whether its change is judged relative to the baseline or in absolute
points, and where a run records it. Tables, figures, the estimates and the text select from here.

A new metric is one entry below (and the stage that writes it): a metric recorded as a plain number
in a run's summary.json or eval.json is read from `recorded` without further code, becomes a row of
the effects table and an estimate of every main comparison.

A record may predate a metric (written before the stage recorded it), or a study may not score it
on an arm: such a value is *not recorded*, and `missing_reason` says why, in words a table can print.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str  # the key a record keeps it under (and that records.metric reads)
    label: str  # in a sentence: "val bpb"
    header: str  # in a table header: "val bpb"
    unit: str  # "bits per byte", "centered accuracy", ...
    relative: bool  # True: its change is judged relative to the seed's baseline (a positive quantity
    # far from zero); False: in absolute points (CORE sits near zero at small scale)
    recorded: str  # "<file>:<key>": where a run records it (summary.json, eval.json, diagnostics.json,
    # metrics.jsonl's last diagnostic evaluation)
    effects: bool = True  # a row of the effects table and an estimate of each main comparison
    main: int = 0  # its place among the main table's columns (its mean, interval and paired change); 0: none

    @property
    def file(self) -> str:
        return self.recorded.split(":")[0]

    @property
    def key(self) -> str:
        return self.recorded.split(":", 1)[1]


METRICS = {m.name: m for m in (
    Metric("val_bpb", "val bpb", "val bpb", "bits per byte", True, "summary.json:val_bpb", main=1),
    Metric("core_bpb", "CORE likelihood: bits/byte of the correct continuation", "CORE bpb", "bits per byte",
           True, "eval.json:core_bpb", main=3),
    Metric("core_margin_bpb", "CORE likelihood: margin over the best wrong option (bits/byte)", "CORE margin",
           "bits per byte", False, "eval.json:core_margin_bpb"),
    Metric("core", "CORE (centered accuracy)", "CORE", "centered accuracy", False, "eval.json:core", main=2),
    Metric("chatcore", "ChatCORE", "ChatCORE", "centered accuracy", False, "eval.json:chatcore", effects=False),
    Metric("diag_mass", "diagonal attention mass a_ii (mean over layers)", "a_ii", "attention weight", True,
           "diagnostics.json:diag_mass"),
    Metric("log:diag_mass", "diagonal attention mass a_ii (training log, mean over layers)", "a_ii (log)",
           "attention weight", True, "metrics.jsonl:diag_mass", effects=False),
)}

NOT_RECORDED = "not recorded"


def get(name: str) -> Metric:
    if name not in METRICS:
        raise KeyError(f"metric: {name!r} is not in the metric table (xsa/checks/metrics.py)")
    return METRICS[name]


def effect_metrics() -> tuple[str, ...]:
    """The metrics every main comparison reports an effect on, in the table's order."""
    return tuple(n for n, m in METRICS.items() if m.effects)


def main_metrics() -> tuple[str, ...]:
    """The metrics the main table shows as columns, in their order."""
    return tuple(sorted((n for n, m in METRICS.items() if m.main), key=lambda n: METRICS[n].main))


def relative(name: str) -> bool:
    """Whether a metric's change is judged relative (unknown names, e.g. per-task ones, are not)."""
    return METRICS[name].relative if name in METRICS else name.startswith("task_bpb:")


def label(name: str) -> str:
    return METRICS[name].label if name in METRICS else name


def read_plain(run: dict, name: str):
    """A metric that a run records as a plain number in summary.json or eval.json (None where absent)."""
    m = METRICS[name]
    record = {"summary.json": run.get("summary"), "eval.json": run.get("eval")}.get(m.file) or {}
    value = record.get(m.key)
    return value.get(m.key) if isinstance(value, dict) else value


def missing_reason(run: dict, name: str, scored: bool = True) -> str:
    """Why a run has no value of a metric, in words: the study does not score it on the run's arm, the
    stage has not written its file, or the record predates the metric."""
    if not scored:
        return f"{NOT_RECORDED}: the study does not score {label(name)} on this arm"
    m = METRICS.get(name)
    if m is None:
        return NOT_RECORDED
    if m.file == "summary.json":
        return f"{NOT_RECORDED}: the run has not finished" if not run.get("summary") else \
            f"{NOT_RECORDED}: summary.json predates {m.key}"
    record = {"eval.json": run.get("eval"), "diagnostics.json": run.get("diagnostics")}.get(m.file)
    if m.file == "metrics.jsonl":
        return f"{NOT_RECORDED}: the training log predates per-evaluation diagnostics"
    if not record:
        return f"{NOT_RECORDED}: no {m.file} (its stage has not run on this run)"
    return f"{NOT_RECORDED}: {m.file} predates {m.key}"
