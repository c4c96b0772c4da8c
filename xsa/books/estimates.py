"""
The paper's estimates, computed once from the run records and written to
results/estimates/<study>.json (and .csv): every number the text, the main tables and the claims
use, under a key, with its interval, n, p, Holm p, definition and the run ids it was computed from.

    est = study_estimates(study, runs, every, tp)        # {key: Estimate}
    write_estimates(est, results_dir / "estimates", "default")

A relative estimate is a fraction of each seed's baseline (-0.0061 is -0.61%), paired by seed; an
absolute one is in the metric's unit (xsa/checks/metrics.py says which a metric is). An estimate
with no value says why in `reason` (not recorded, not run, fewer than two pairs).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from xsa.base.records import atomic_write_text, read_json
from xsa.checks import metrics as M
from xsa.checks.records import metric as metric_of, per_seed
from xsa.base.stats import Interval, contrast, differences, holm, mean_ci, relative_differences, t_pvalue


@dataclass(frozen=True)
class Estimate:
    key: str
    value: float | None
    lo: float | None = None
    hi: float | None = None
    n: int = 0
    sd: float | None = None
    p: float | None = None
    p_holm: float | None = None
    unit: str = "relative"  # relative (fraction of the baseline), absolute (the metric's unit), or a count's unit
    metric: str = "val_bpb"
    family: str = ""  # primary, secondary (Holm-corrected), post hoc, descriptive, setup, cost
    definition: str = ""
    runs: tuple[str, ...] = ()
    reason: str = ""  # why there is no value
    seed_paper: float | None = None  # the seed paper's effect in the same unit, where one exists
    expect: str = ""  # a seed-paper claim: the direction it reports (lower, higher)
    threshold: float = 0.0
    declared: int = 0  # the pairs its study declares (an interim estimate has n below it)
    verdict: str = ""  # a verdict's outcome: the sentence the text says (xsa/books/verdicts.py)

    @property
    def ci(self) -> Interval:
        return Interval(self.lo, self.hi)

    @property
    def rel(self):
        return self.value

    @property
    def decided(self) -> bool:
        """Whether its direction is established: its interval excludes zero, and for a member of a
        Holm-corrected family (one with a Holm p) also its adjusted p is below 5%."""
        if self.p_holm is not None and self.p_holm >= 0.05:
            return False
        return self.ci.defined and self.ci.excludes(0.0)

    @property
    def status(self) -> str:
        """Its records against its declared pairs, as a table says it (records_status), or why it has none."""
        return records_status(self.n, self.declared, self.reason or "not run")


def records_status(n: int, declared: int, none: str = "not run", count_none: bool = False) -> str:
    """The one status word of an estimate's records: "complete" where it has pairs and no fewer than
    its study declares, "interim n/declared" where it has fewer, and `none` where it has none (why:
    "not run", or its reason). With `count_none` a declared estimate with no pairs yet is "interim
    0/declared" too (the robustness table's rows: "not run" is for a step its rule has not declared)."""
    if n and n >= declared:
        return "complete"
    if n or (count_none and declared):
        return f"interim {n}/{declared}"
    return none


def slug(name: str) -> str:
    """A comparison's name as a key: 'cpu-w64-d4 tuned T=256' -> 'cpu_w64_d4_tuned_t256'."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower().replace("t=", "t")).strip("_")


def _ids(runs, arms, seeds) -> tuple[str, ...]:
    names = {a.name for a in arms}
    return tuple(sorted(r["id"] for r in runs if r["arm"] in names and r["spec"].seed in seeds))


def _seeds(s) -> str:
    s = sorted(s)
    return "none" if not s else (f"{s[0]}-{s[-1]}" if s == list(range(s[0], s[-1] + 1)) and len(s) > 2
                                 else ", ".join(map(str, s)))


def _arm_text(arm) -> str:
    return f"{arm.name} (matrix LR {arm.get('matrix_lr'):g})"


def from_values(key, values, *, unit, metric, family, definition, runs=(), reason="", **extra) -> Estimate:
    """An estimate of the mean of per-seed values with its t-interval and two-sided p."""
    st = mean_ci(values)
    ci = st["ci"]
    why = reason or ("" if st["n"] else M.NOT_RECORDED + ": no paired seeds have this metric")
    return Estimate(key, st["mean"], ci.lo, ci.hi, st["n"], st["sd"], t_pvalue(st["mean"], st["sd"], st["n"]), None,
                    unit, metric, family, definition, tuple(runs), why, **extra)


def summarised(key, d: dict, family: str, definition: str, *, unit="relative", metric="val_bpb", runs=(),
               declared: int = 0) -> Estimate:
    """An estimate of a study analysis's summary ({value, lo, hi, n, sd, p, p_holm}, as the factorial, sink
    and optimizer analyses write them); without a value it says why."""
    return Estimate(key, d.get("value"), d.get("lo"), d.get("hi"), d.get("n") or 0, d.get("sd"), d.get("p"),
                    d.get("p_holm"), unit, metric, family, definition, tuple(runs),
                    "" if d.get("value") is not None else "fewer than two pairs", declared=declared)


def paired(key, runs, a, b, metric="val_bpb", seeds=None, family="", absolute=False, **extra) -> Estimate:
    """b minus a per seed in `metric` (relative to a where the metric table says so, unless `absolute`)."""
    pa, pb = per_seed(runs, a, metric, seeds), per_seed(runs, b, metric, seeds)
    rel = M.relative(metric) and not absolute
    d = relative_differences(pa, pb) if rel else differences(pa, pb)
    what = "relative to each seed's" if rel else "minus"
    definition = (f"{M.label(metric)}: {_arm_text(b)} minus {_arm_text(a)}, {what} baseline, paired by seed "
                  f"(seeds {_seeds(d)})") if rel else (f"{M.label(metric)}: {_arm_text(b)} minus {_arm_text(a)}, "
                                                      f"paired by seed (seeds {_seeds(d)})")
    return from_values(key, d.values(), unit="relative" if rel else "absolute", metric=metric, family=family,
                       definition=definition, runs=_ids(runs, (a, b), d), reason="" if d else _why(runs, (a, b), metric),
                       **extra)


def _why(runs, arms, metric) -> str:
    """Why a pair has no paired value of `metric`: the reason of a run of its arms that lacks it, or none run."""
    names = {a.name for a in arms}
    mine = [r for r in runs if r["arm"] in names]
    lacking = next((r for r in mine if metric_of(r, metric) is None), None)
    return M.missing_reason(lacking, metric) if lacking else "not run (no records of these arms)"


def contrasted(key, runs, c, metric="val_bpb", family="", absolute=False, **extra) -> Estimate:
    """(c.second's effect) minus (c.first's), per seed (each relative where the metric table says so,
    unless `absolute`)."""
    rel = M.relative(metric) and not absolute
    diff = relative_differences if rel else differences
    first = diff(per_seed(runs, c.first.a, metric), per_seed(runs, c.first.b, metric))
    second = diff(per_seed(runs, c.second.a, metric), per_seed(runs, c.second.b, metric))
    seeds = first.keys() & second.keys()
    st = contrast(first, second)
    return from_values(key, [second[s] - first[s] for s in sorted(seeds)], unit="relative" if rel else "absolute",
                       metric=metric, family=family, runs=_ids(runs, c.arms(), seeds),
                       definition=f"{M.label(metric)}: XSA's effect in '{c.second.name}' minus its effect in "
                                  f"'{c.first.name}', per seed (seeds {_seeds(seeds)}); n = {st['n']}", **extra)


SEQ_LENS = (256, 512, 1024)  # the slope's sequence lengths: T = 512 is the robust primary's


def per_seed_slopes(per_pair: list[dict], xs) -> tuple[list[int], list[float]]:
    """Per seed that every level has, the least-squares slope of its effects ({seed: effect} per level)
    against xs (one x a level): (seeds, slopes)."""
    x0 = sum(xs) / len(xs)
    seeds = sorted(set.intersection(*(set(d) for d in per_pair)))
    return seeds, [sum((x - x0) * d[s] for x, d in zip(xs, per_pair)) / sum((x - x0) ** 2 for x in xs) for s in seeds]


def slope(key, runs, pairs, family="secondary") -> Estimate:
    """Per seed, the least-squares slope of XSA's relative effect on val bpb against log2 T over SEQ_LENS
    (per doubling of T); its mean over the seeds that have all three."""
    per_pair = [relative_differences(per_seed(runs, p.a, "val_bpb"), per_seed(runs, p.b, "val_bpb")) for p in pairs]
    seeds, slopes = per_seed_slopes(per_pair, [math.log2(t) for t in SEQ_LENS])
    return from_values(key, slopes, unit="relative", metric="val_bpb", family=family,
                       runs=_ids(runs, [a for p in pairs for a in p.arms()], set(seeds)),
                       definition="per seed, the least-squares slope of XSA's relative effect on val bpb against "
                                  f"log2 T over T = {', '.join(map(str, SEQ_LENS))} (per doubling of T); "
                                  f"seeds {_seeds(seeds)}")


def fact(key, value, unit, definition, family="setup", runs=()) -> Estimate:
    """A number that is not an effect (a count, a selected LR, a cost, a parameter count)."""
    return Estimate(key, value, n=len(runs), unit=unit, metric="", family=family, definition=definition,
                    runs=tuple(runs))


def not_run(key, why, family="secondary") -> Estimate:
    return Estimate(key, None, family=family, reason=f"not declared yet ({why})",
                    definition="a step of the study whose rule has not declared its runs yet")


def with_holm(est: dict, keys) -> None:
    """Holm's adjustment over the family `keys` (in place); a member not run counts as p = 1."""
    for k, adjusted in zip(keys, holm([est[k].p for k in keys])):
        est[k] = replace(est[k], p_holm=adjusted)


# -----------------------------------------------------------------------------
# Files

COLUMNS = ("key", "value", "lo", "hi", "n", "sd", "p", "p_holm", "unit", "metric", "family", "definition", "reason",
           "verdict", "seed_paper", "runs")


def _number(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else round(x, 10)


def as_dict(e: Estimate) -> dict:
    d = asdict(e)
    for k in ("value", "lo", "hi", "sd", "p", "p_holm", "seed_paper", "threshold"):
        d[k] = _number(d[k])
    d["runs"] = list(e.runs)
    return d


def write_estimates(est: dict, out_dir, name: str) -> None:
    """est -> OUT_DIR/NAME.json (every field, run ids included) and NAME.csv (run ids counted)."""
    out_dir = Path(out_dir)
    rows = [as_dict(e) for e in est.values()]
    atomic_write_text(out_dir / f"{name}.json", json.dumps({"study": name, "estimates": rows}, indent=1) + "\n")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({**{k: ("" if r[k] is None else r[k]) for k in COLUMNS}, "runs": len(r["runs"])})
    atomic_write_text(out_dir / f"{name}.csv", buf.getvalue())


def as_written(est: dict) -> dict:
    """The estimates as their file holds them (write_estimates: numbers to 10 decimals), without writing
    it: what a table built now reads is what read_estimates will read back."""
    return {k: Estimate(**{**as_dict(e), "runs": tuple(e.runs)}) for k, e in est.items()}


def read_estimates(path) -> dict:
    """{key: Estimate} of one estimates file; a file that is not one (corrupt, another shape, fields
    an Estimate lacks) is a ValueError naming it."""
    data = read_json(path)  # names the file if it is not JSON
    try:
        return {r["key"]: Estimate(**{**r, "runs": tuple(r["runs"])}) for r in data["estimates"]}
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not an estimates file ({type(e).__name__}: {e})") from None


@dataclass
class Book:
    """Estimates of several studies for the template: book.robust.primary is an Estimate; a study or
    key that is absent is None (the template says what is pending)."""
    studies: dict = field(default_factory=dict)

    def __getattr__(self, name):
        if name.startswith("_") or name == "studies":
            raise AttributeError(name)
        return _Study(name, self.studies[name]) if name in self.studies else None

    def __getitem__(self, name):
        return self.__getattr__(name)

    def get(self, key: str) -> Estimate:
        study, _, k = key.partition(".")
        if study not in self.studies or k not in self.studies[study]:
            raise KeyError(f"estimate {key!r}: no such key in results/estimates/{study}.json")
        return self.studies[study][k]


@dataclass
class _Study:
    name: str
    est: dict

    def __getattr__(self, key):
        if key in ("name", "est") or key.startswith("_"):
            raise AttributeError(key)
        if key not in self.est:
            raise KeyError(f"estimate '{self.name}.{key}': no such key in results/estimates/{self.name}.json")
        return self.est[key]

    def __getitem__(self, key):
        return self.__getattr__(key)
