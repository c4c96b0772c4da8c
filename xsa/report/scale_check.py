"""
The x4 check (study scale-check, registered after the x4 level's records and before its own runs:
results/scale-check/preregistration.md): each arm of the x4 level also trained at the other arm's
selected matrix LR, on seeds 210-217. What it reports, in results/estimates/scale.json under keys
that start with check_:

- its four paired estimates (both arms at XSA's rate; the baseline's two rates; both at the
  baseline's rate; XSA's two rates), Holm-adjusted over the four;
- each arm's SD between seeds at each rate (the spread that motivated the check);
- the x4 level on its registered first eight seeds (the check's), before its precision rule added more;
- the effect with each arm at whichever of its two rates has the lower mean on these seeds: selected
  and estimated on the same seeds, so optimistic, and labelled so;
- the conditions of a sensitivity fit of the scale model with the x4 level's pairs at the common rate
  (XSA's) in place of the tuned ones (check_conditions; xsa/report/scale.py fits it).

    book = check_book(results)     # {key: Estimate}
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from xsa.design import final_bpb
from xsa.predict import condition, model_conditions
from xsa.report.estimates import Estimate, fact
from xsa.stats import holm, mean_ci, relative_differences, t_pvalue
from xsa.studies import get_study
from xsa.study_scale import CHECK_ORDER, CHECK_SEEDS

KEYS = dict(zip(CHECK_ORDER, ("check_common_xsa_rate", "check_base_rates", "check_common_base_rate",
                              "check_xsa_rates")))
FAMILY = "check (registered after the x4 records)"
REPLACED = "length x4"  # the level whose pairs the sensitivity fit takes at the common rate


def _bpb(results: Path, arm) -> dict:
    """{seed: final val bpb} of the arm's check seeds with a finished record."""
    return {s: v for s in CHECK_SEEDS if (v := final_bpb(results, arm.run(s))) is not None}


def _paired(key: str, results: Path, a, b, definition: str) -> Estimate:
    """b minus a, relative to a, paired by seed over the check's seeds."""
    da, db = _bpb(results, a), _bpb(results, b)
    d = relative_differences(da, db)
    st = mean_ci(d.values())
    runs = tuple(r.run_id for s in sorted(d) for r in (a.run(s), b.run(s)))
    return Estimate(key, st["mean"], st["ci"].lo, st["ci"].hi, st["n"], st["sd"], t_pvalue(st["mean"], st["sd"], st["n"]),
                    family=FAMILY, definition=definition, runs=runs, reason="" if d else "not run",
                    declared=len(CHECK_SEEDS))


def _arms(study) -> dict:
    """The check's four arms: each arm at its own selected rate and at the other arm's."""
    common_xsa, base_rates, common_base, _ = (*study.main, *study.comparisons)
    return {"base_own": base_rates.a, "base_other": common_xsa.a, "xsa_own": common_xsa.b, "xsa_other": common_base.b}


def _not_declared() -> dict[str, Estimate]:
    why = "not declared yet (the x4 bracket has not selected)"
    return {**{k: Estimate(k, None, family=FAMILY, reason=why) for k in (*KEYS.values(), "check_better_rates")},
            "check_runs_declared": fact("check_runs_declared", 0, "runs", "runs the check trains"),
            "check_runs_done": fact("check_runs_done", 0, "runs", "the check's runs with a finished record")}


def check_book(results: Path) -> dict[str, Estimate]:
    """The check's estimates as the paper's text reads them (keys check_*)."""
    results = Path(results)
    study = get_study("scale-check", results)
    if not study.main:
        return _not_declared()
    book = {}
    for c in (*study.main, *study.comparisons):
        book[KEYS[c.name]] = _paired(KEYS[c.name], results, c.a, c.b, f"{c.name}: `{c.b.name}` minus `{c.a.name}` "
                                     "in final val bpb, relative, paired by seed (seeds 210-217)")
    for key, adjusted in zip(KEYS.values(), holm([book[k].p for k in KEYS.values()])):
        book[key] = replace(book[key], p_holm=adjusted)
    arms = _arms(study)
    for name, arm in arms.items():
        st = mean_ci(_bpb(results, arm).values())
        book[f"check_sd_{name}"] = Estimate(
            f"check_sd_{name}", st["sd"], n=st["n"], unit="val bpb", metric="val_bpb", family="descriptive",
            runs=tuple(arm.run(s).run_id for s in _bpb(results, arm)), reason="" if st["sd"] is not None else "not run",
            definition=f"`{arm.name}`: the SD of final val bpb between the check's seeds (210-217)")
    book["check_better_rates"] = better_rates(results, arms)
    x4 = get_study("scale", results).comparison(REPLACED)  # its registered first eight seeds are the check's
    book["check_x4_registered"] = replace(_paired(
        "check_x4_registered", results, x4.a, x4.b, "length x4 at each arm's selected rate on its registered first "
        "eight seeds (210-217), before its precision rule added seeds: relative, paired by seed"), family="registered")
    done = [r.run_id for r in study.runs if final_bpb(results, r) is not None]
    book["check_runs_declared"] = fact("check_runs_declared", len(study.runs), "runs", "runs the check trains")
    book["check_runs_done"] = fact("check_runs_done", len(done), "runs", "the check's runs with a finished record",
                                   runs=done)
    return book


def better_rates(results: Path, arms: dict) -> Estimate:
    """XSA minus baseline with each arm at whichever of its two rates has the lower mean over the seeds
    where all four arms have records: the rates are chosen on the seeds they are estimated on."""
    bpb = {k: _bpb(results, a) for k, a in arms.items()}
    seeds = set.intersection(*(set(v) for v in bpb.values()))
    if len(seeds) < 2:
        return Estimate("check_better_rates", None, family="descriptive", reason="fewer than two seeds with all four arms")
    pick = {side: min((f"{side}_own", f"{side}_other"), key=lambda k: sum(bpb[k][s] for s in seeds))
            for side in ("base", "xsa")}
    e = _paired("check_better_rates", results, arms[pick["base"]], arms[pick["xsa"]],
                f"XSA at {arms[pick['xsa']].get('matrix_lr'):g} minus the baseline at "
                f"{arms[pick['base']].get('matrix_lr'):g}: each arm at the rate with the lower mean over seeds "
                "210-217, chosen on the seeds it is estimated on (optimistic), relative, paired by seed")
    return replace(e, family="descriptive", p=None)


def check_conditions(results: Path) -> list | None:
    """The scale model's conditions with the x4 level's pairs at the common rate (XSA's) in place of the
    tuned ones; None while the check has fewer than two such pairs."""
    study = get_study("scale-check", results)
    if not study.main:
        return None
    common = condition(results, study.main[0], CHECK_SEEDS)
    if common.n < 2:
        return None
    return [replace(common, name=REPLACED) if c.name == REPLACED else c for c in model_conditions(results)]
