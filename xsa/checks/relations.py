"""
What relates two values of one record, checked beside its JSON Schema (xsa/checks/schemas.py): JSON
Schema compares a value with constants only. Each function takes a record (a dict; a value of the
wrong kind in it is the schema's problem, passed over here) and yields (field, what is wrong):

- throughput, estimates: an interval whose lower end is above its upper;
- eval: CORE (ChatCORE) that is not the mean centered accuracy of its tasks (xsa/evaluate/core.py, chat.py);
- diagnostics: a layer's value that is not the mean of its heads' (the largest, for attn_logit_max; xsa.diagnostics.summarize_layers),
  an attention entropy above ln T, the most a row over T tokens holds;
- gpu_check: a layer's mean |cos(z, v)| above its maximum.
"""

from __future__ import annotations

import math


def _real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _reversed(lo, hi) -> bool:
    return _real(lo) and _real(hi) and lo > hi  # a value of the wrong kind is the schema's problem


def _throughput_pairs(record: dict):
    for key, v in record.items():
        if key.endswith(("_ci95", "_quartiles")) and isinstance(v, list) and len(v) == 2 and _reversed(*v):
            yield key, f"{v!r} is reversed: its lower end is above its upper"
    arms = record.get("arms") if isinstance(record.get("arms"), dict) else {}
    for name, arm in arms.items():
        if isinstance(arm, dict) and _reversed(arm.get("step_time_min_s"), arm.get("step_time_max_s")):
            yield (f"arms.{name}", f"step_time_min_s {arm['step_time_min_s']!r} is above "
                                   f"step_time_max_s {arm['step_time_max_s']!r}")


def _estimate_pairs(record: dict):
    for i, e in enumerate(record.get("estimates") if isinstance(record.get("estimates"), list) else []):
        if isinstance(e, dict) and _reversed(e.get("lo"), e.get("hi")):
            yield f"estimates.{i}", f"lo {e['lo']!r} is above hi {e['hi']!r} (of {e.get('key')!r})"


def _mean(values) -> float | None:
    """The mean of a non-empty list of real numbers, else None (a value of the wrong kind is the schema's)."""
    return sum(values) / len(values) if isinstance(values, list) and values and all(map(_real, values)) else None


def _not_mean(value, values) -> bool:
    mean = _mean(values)
    return _real(value) and mean is not None and abs(value - mean) > 1e-9 * max(1.0, abs(mean))


def _eval_means(record: dict):
    """CORE (ChatCORE) is the mean centered accuracy of the tasks scored (xsa.evaluate.core, .chat)."""
    for score, tasks in (("core", "tasks"), ("chatcore", "chat_tasks")):
        held = record.get(tasks) if isinstance(record.get(tasks), dict) else {}
        centered = [t.get("centered") if isinstance(t, dict) else None for t in held.values()]
        if _not_mean(record.get(score), centered):
            yield score, f"{record[score]!r} is not the mean centered accuracy of its {tasks} ({_mean(centered)!r})"


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _diagnostics_means(record: dict):
    """A layer's value is the mean of its heads' (xsa.diagnostics.summarize_layers); an attention row
    over at most T tokens holds at most ln T nats."""
    T = record["batch"].get("seq_len") if isinstance(record.get("batch"), dict) else None
    most = math.log(T) if isinstance(T, int) and not isinstance(T, bool) and T >= 1 else math.inf
    for i, layer in enumerate(_list(record.get("layers"))):
        if not isinstance(layer, dict):
            continue
        heads = layer["heads"] if isinstance(layer.get("heads"), dict) else {}
        for m, values in heads.items():
            if m == "attn_logit_max":  # the layer's largest logit is its largest head's, not their mean
                if _list(values) and all(isinstance(v, (int, float)) for v in values) and layer.get(m) != max(values):
                    yield f"layers.{i}.{m}", f"{layer.get(m)!r} is not the largest of its heads ({max(values)!r})"
            elif _not_mean(layer.get(m), values):
                yield f"layers.{i}.{m}", f"{layer[m]!r} is not the mean of its heads ({_mean(values)!r})"
        entropies = [(f"layers.{i}.entropy", layer.get("entropy"))]
        entropies += [(f"layers.{i}.heads.entropy.{j}", h) for j, h in enumerate(_list(heads.get("entropy")))]
        for where, h in entropies:
            if _real(h) and h > most + 1e-6:
                yield where, f"{h!r} nats is above ln {T} = {most:.6g}, the most attention over {T} tokens holds"


def _gpu_check_pairs(record: dict):
    cos = (record.get("parts") or {}).get("xsa_cos") if isinstance(record.get("parts"), dict) else None
    if isinstance(cos, dict) and isinstance(cos.get("mean_abs_cos_per_layer"), list) \
            and isinstance(cos.get("max_abs_cos_per_layer"), list):
        for i, (mean, top) in enumerate(zip(cos["mean_abs_cos_per_layer"], cos["max_abs_cos_per_layer"])):
            if _reversed(mean, top):
                yield f"parts.xsa_cos.mean_abs_cos_per_layer.{i}", f"{mean!r} is above the layer's maximum {top!r}"


RELATIONS = {"throughput": _throughput_pairs, "estimates": _estimate_pairs, "eval": _eval_means,
             "diagnostics": _diagnostics_means, "gpu_check": _gpu_check_pairs}
