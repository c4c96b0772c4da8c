"""
A registered check of a scale level (xsa/studies/scale.py: RateCheck; the first, scale-check, checks x4,
results/scale-check/preregistration.md): each arm of the level also trained at the other arm's
selected matrix LR, on the level's first pairs. What it reports, in results/estimates/scale.json under
keys that start with its prefix (`check_` for scale-check):

- its four paired estimates (both arms at XSA's rate; the baseline's two rates; both at the
  baseline's rate; XSA's two rates), Holm-adjusted over the four;
- each arm's SD between seeds at each rate (the spread that motivated the check);
- the x4 level on its registered first eight seeds (the check's), before its precision rule added more;
- the effect with each arm at whichever of its two rates has the lower mean on these seeds: selected
  and estimated on the same seeds, so optimistic, and labelled so;
- the conditions of a sensitivity fit of the scale model with the x4 level's pairs at the common rate
  (XSA's) in place of the tuned ones (check_conditions; xsa/books/scale.py fits it).

    book = check_book(results, check)     # {key: Estimate}, for each check of CHECKS
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from xsa.studies.rules import final_bpb
from xsa.studies.predict import condition, model_conditions
from xsa.books.estimates import Estimate, fact, slug
from xsa.base.stats import holm, mean_ci, relative_differences, t_pvalue
from xsa.studies.registry import get_study
from xsa.studies.scale import RateCheck

ESTIMATES = ("common_xsa_rate", "base_rates", "common_base_rate", "xsa_rates")  # in the order of its comparisons
# a level whose arms have one rate is its own check (xsa/studies/scale.py: RateCheck): nothing else to compare
ONE_RATE = "both arms of the level have one rate: its own pair is the check, with no other rate to compare"


def keys(check: RateCheck) -> dict[str, str]:
    """{comparison name: book key} of a check's four paired estimates."""
    return {name: f"{check.key}_{e}" for name, e in zip(check.order, ESTIMATES)}


def family(check: RateCheck) -> str:
    return f"check (registered after the {check.label} records)"


def _bpb(results: Path, arm, seeds) -> dict:
    """{seed: final val bpb} of the arm's check seeds with a finished record."""
    return {s: v for s in seeds if (v := final_bpb(results, arm.run(s))) is not None}


def _paired(key: str, results: Path, a, b, definition: str, check: RateCheck) -> Estimate:
    """b minus a, relative to a, paired by seed over the check's seeds."""
    da, db = _bpb(results, a, check.seeds), _bpb(results, b, check.seeds)
    d = relative_differences(da, db)
    st = mean_ci(d.values())
    runs = tuple(r.run_id for s in sorted(d) for r in (a.run(s), b.run(s)))
    return Estimate(key, st["mean"], st["ci"].lo, st["ci"].hi, st["n"], st["sd"], t_pvalue(st["mean"], st["sd"], st["n"]),
                    family=family(check), definition=definition, runs=runs, reason="" if d else "not run",
                    declared=len(check.seeds))


def _arms(study) -> dict:
    """The check's four arms: each arm at its own selected rate and at the other arm's (at one rate, its two)."""
    if not study.comparisons:
        return {"base_own": study.main[0].a, "xsa_own": study.main[0].b}
    common_xsa, base_rates, common_base, _ = (*study.main, *study.comparisons)
    return {"base_own": base_rates.a, "base_other": common_xsa.a, "xsa_own": common_xsa.b, "xsa_other": common_base.b}


def _not_declared(check: RateCheck) -> dict[str, Estimate]:
    why, k = f"not declared yet (the {check.label} bracket has not selected)", check.key
    return {**{e: Estimate(e, None, family=family(check), reason=why) for e in (*keys(check).values(), f"{k}_better_rates")},
            f"{k}_runs_declared": fact(f"{k}_runs_declared", 0, "runs", "runs the check trains"),
            f"{k}_runs_done": fact(f"{k}_runs_done", 0, "runs", "the check's runs with a finished record")}


def _span(check: RateCheck) -> str:
    return f"{check.seeds.start}-{check.seeds.stop - 1}"


def check_book(results: Path, check: RateCheck) -> dict[str, Estimate]:
    """The check's estimates as the paper's text reads them (keys <check.key>_*)."""
    results, k = Path(results), check.key
    study = get_study(check.name, results)
    if not study.main:
        return _not_declared(check)
    book, named = {}, keys(check)
    for c in (*study.main, *study.comparisons):
        book[named[c.name]] = _paired(named[c.name], results, c.a, c.b, f"{c.name}: `{c.b.name}` minus `{c.a.name}` "
                                      f"in final val bpb, relative, paired by seed (seeds {_span(check)})", check)
    for key, adjusted in zip(list(book), holm([e.p for e in book.values()])):  # over those it has
        book[key] = replace(book[key], p_holm=adjusted)
    book.update({e: Estimate(e, None, family=family(check), reason=ONE_RATE) for e in named.values() if e not in book})
    arms = _arms(study)
    for name, arm in arms.items():
        bpb = _bpb(results, arm, check.seeds)
        st = mean_ci(bpb.values())
        book[f"{k}_sd_{name}"] = Estimate(
            f"{k}_sd_{name}", st["sd"], n=st["n"], unit="val bpb", metric="val_bpb", family="descriptive",
            runs=tuple(arm.run(s).run_id for s in bpb), reason="" if st["sd"] is not None else "not run",
            definition=f"`{arm.name}`: the SD of final val bpb between the check's seeds ({_span(check)})")
    book[f"{k}_better_rates"] = (better_rates(results, arms, check) if study.comparisons else
                                 Estimate(f"{k}_better_rates", None, family="descriptive", reason=ONE_RATE))
    level = get_study("scale", results).comparison(check.level)  # its registered first pairs are the check's
    registered = f"{k}_{slug(check.label)}_registered"
    book[registered] = replace(_paired(
        registered, results, level.a, level.b, f"{check.level} at each arm's selected rate on its registered first "
        f"{len(check.seeds)} seeds ({_span(check)}), before its precision rule added seeds: relative, paired by seed",
        check), family="registered")
    done = [r.run_id for r in study.runs if final_bpb(results, r) is not None]
    book[f"{k}_runs_declared"] = fact(f"{k}_runs_declared", len(study.runs), "runs", "runs the check trains")
    book[f"{k}_runs_done"] = fact(f"{k}_runs_done", len(done), "runs", "the check's runs with a finished record",
                                  runs=done)
    return book


def better_rates(results: Path, arms: dict, check: RateCheck) -> Estimate:
    """XSA minus baseline with each arm at whichever of its two rates has the lower mean over the seeds
    where all four arms have records: the rates are chosen on the seeds they are estimated on."""
    key = f"{check.key}_better_rates"
    bpb = {k: _bpb(results, a, check.seeds) for k, a in arms.items()}
    seeds = set.intersection(*(set(v) for v in bpb.values()))
    if len(seeds) < 2:
        return Estimate(key, None, family="descriptive", reason="fewer than two seeds with all four arms")
    pick = {side: min((f"{side}_own", f"{side}_other"), key=lambda k: sum(bpb[k][s] for s in seeds))
            for side in ("base", "xsa")}
    e = _paired(key, results, arms[pick["base"]], arms[pick["xsa"]],
                f"XSA at {arms[pick['xsa']].get('matrix_lr'):g} minus the baseline at "
                f"{arms[pick['base']].get('matrix_lr'):g}: each arm at the rate with the lower mean over seeds "
                f"{_span(check)}, chosen on the seeds it is estimated on (optimistic), relative, paired by seed", check)
    return replace(e, family="descriptive", p=None)


def check_conditions(results: Path, check: RateCheck) -> list | None:
    """The scale model's conditions with the level's pairs at the common rate (XSA's) in place of the
    tuned ones; None while the check has fewer than two such pairs."""
    study = get_study(check.name, results)
    if not study.main:
        return None
    common = condition(results, study.main[0], check.seeds)
    if common.n < 2:
        return None
    return [replace(common, name=check.level) if c.name == check.level else c for c in model_conditions(results)]
