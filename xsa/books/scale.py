"""
The scale study's estimates, as its pre-registration states them (results/scale/preregistration.md):
each level's effect, the model's slopes and its predictions for d12 and d24 (xsa/studies/predict.py), the
secondary family with Holm's correction, the learned gate per layer and head (xsa/books/scale_gates.py),
the x4 check (xsa/books/scale_check.py), and the T = 512 level of the robust study's sequence-length
seeds. Every estimate says how many of its declared pairs have
records, so an interim report says so; a level whose rule has not declared it yet is "not run".

    est = scale_estimates(results)     # {key: estimate dict}, the keys below
    scale_book(results, est)           # the same as Estimates (results/estimates/scale.json), for the text

Its table and figure are drawn from the book by xsa/report/scale_section.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from xsa.studies.rules import final_bpb
from xsa.gpu.cost import GPUS, MFU, NODE_USD_PER_HOUR, run_hours, test_hours, untimed
from xsa.studies.predict import (ANCHORS, D12_HALF_WIDTH, GPU_PAIR_SD, TARGETS, Condition, condition, declared_seeds, fit, cochran_q,
                         model_conditions, pairs_to_test)
from xsa.stack.presets import make_config, scaling_params
from xsa.base.records import read_json
from xsa.books.estimates import Estimate, fact, per_seed_slopes, records_status, slug
from xsa.books.scale_check import check_book, check_conditions
from xsa.books.scale_gates import GATES, gate_facts, gate_map, gate_strength
from xsa.base.stats import holm, mean_ci, relative, relative_differences, t_pvalue, _t_two_sided
from xsa.books.published import PUBLISHED
from xsa.books.verdicts import ANCHOR_KEYS, registered, scale_verdicts
from xsa.studies.registry import get_study, seed_paper_effect
from xsa.studies.scale import (CHECKS, D12_RATE_FACTORS, D12_TEST, HEADS_LEVELS, LENGTH_LEVELS, LEVELS, PRECISION_X4,
                               SECONDARY, W256_LENGTH)

SLOPES = {1: "slope per doubling of heads", 2: "slope per doubling of tokens per parameter",
          3: "slope per doubling of sequence length"}
SEQ_SEEDS = range(100, 106)  # the robust study's sequence-length seeds
# Post hoc, not in the pre-registration: the heads levels at width 128 on their common seeds (heads 2 is
# the robust study's seeds 100-107, so it has none in common with them). Unlike the model's heads slope,
# which is fitted across widths and training lengths, it holds both fixed.
HEADS_SLOPE = "slope per doubling of heads at width 128 (post hoc)"
HEADS_SLOPE_LEVELS = (1, 4, 8)


def _estimate(name: str, c: Condition, declared: int, **more) -> dict:
    st = mean_ci(c.diffs)
    ci = st["ci"]
    return dict(key=name, value=st["mean"], lo=ci.lo, hi=ci.hi, n=c.n, declared=declared,
                p=t_pvalue(st["mean"], st["sd"], c.n), heads=c.heads, tokens_per_param=c.tokens_per_param,
                seq_len=c.seq_len, status=records_status(c.n, declared), **more)


def _used(results: Path, pair, seeds) -> list[str]:
    """The run ids of every seed in `seeds` where both runs of the pair have a finished record."""
    return [r.run_id for s in sorted(seeds) if final_bpb(results, pair.a.run(s)) is not None
            and final_bpb(results, pair.b.run(s)) is not None for r in (pair.a.run(s), pair.b.run(s))]


def level_estimates(results: Path, study) -> dict:
    """Each level's relative effect on final val bpb (b minus a, per pair), with its interval."""
    out = {}
    for name in LEVELS:
        try:
            pair = study.comparison(name)
        except KeyError:
            out[name] = dict(key=name, value=None, lo=None, hi=None, n=0, declared=0, p=None,
                             status="not declared yet")  # its learning-rate bracket has not selected
            continue
        seeds = declared_seeds(study, pair)
        out[name] = _estimate(name, condition(results, pair, seeds), len(seeds), runs=_used(results, pair, seeds))
    return out


def seq_len_levels(results: Path) -> dict:
    """T = 256, 512 and 1024 on the robust study's seeds 100-105 (T = 512 is its primary's arms)."""
    robust = get_study("robust", results)
    pairs = {256: robust.comparison("cpu-w64-d4 tuned T=256"), 512: robust.comparison(robust.primary),
             1024: robust.comparison("cpu-w64-d4 tuned T=1024")}
    return {f"T={t}": _estimate(f"T={t}", condition(results, p, SEQ_SEEDS), len(SEQ_SEEDS),
                                runs=_used(results, p, SEQ_SEEDS)) for t, p in pairs.items()}


def model_estimates(results: Path, sensitivity: bool = False, conditions=None, tag: str | None = None) -> dict:
    """The fit's slopes (with model t p-values), tau, sigma, and the predictions; {} before it can fit.
    With `conditions` (and a `tag` for its keys), the model fitted on those instead of the study's."""
    f = fit(conditions if conditions is not None else model_conditions(results, sensitivity))
    if f is None:
        return {}
    tag = tag if tag is not None else "sensitivity " if sensitivity else ""
    out = {f"{tag}fit": {"key": f"{tag}fit", "conditions": [c.name for c in f.conditions], "df": f.df,
                    "tau": math.sqrt(f.tau2), "sigma": math.sqrt(f.sigma2), "beta": [float(b) for b in f.beta]}}
    for axis, name in SLOPES.items():
        est, lo, hi = f.slope(axis)
        t = abs(est) / math.sqrt(f.cov[axis, axis]) if f.cov[axis, axis] > 0 else float("inf")
        out[tag + name] = dict(key=tag + name, value=est, lo=lo, hi=hi, df=f.df, p=1.0 - _t_two_sided(t, f.df))
    for target, where in TARGETS.items():
        mu, lo, hi = f.predict(**where)
        out[f"{tag}prediction {target}"] = dict(key=f"{tag}prediction {target}", value=mu, lo=lo, hi=hi, **where)
    out[f"{tag}heterogeneity"] = heterogeneity(f)
    return out


def heterogeneity(f) -> dict:
    """Cochran's Q of the fit's conditions about its fixed-effect (tau = 0) line, each condition's mean
    weighted by n / sigma^2 (the pooled seed variance the model assumes), chi-square at k - 4 degrees of
    freedom: whether the axes explain the conditions. Added after the study's registration (post hoc)."""
    return cochran_q(np.array([c.mean for c in f.conditions]), np.array([f.sigma2 / c.n for c in f.conditions]),
                     np.stack([c.x() for c in f.conditions]))


def _diffs(results: Path, pair, seeds) -> dict[int, float]:
    """{seed: relative difference} where both runs of the seed have finished records."""
    return relative_differences({s: final_bpb(results, pair.a.run(s)) for s in seeds},
                                {s: final_bpb(results, pair.b.run(s)) for s in seeds})


def _contrast(results: Path, study, name: str) -> dict:
    """(second's effect) minus (first's), per seed: does the short run change XSA's effect?"""
    c = study.comparison(name)
    seeds = declared_seeds(study, c.first) & declared_seeds(study, c.second)
    first, second = _diffs(results, c.first, seeds), _diffs(results, c.second, seeds)
    both = sorted(first.keys() & second.keys())
    cfg = c.second.b.config()
    return _estimate(name, Condition(name, cfg.model.n_head, float("nan"), cfg.model.sequence_len,
                                     tuple(second[s] - first[s] for s in both)), len(seeds),
                     runs=_used(results, c.first, both) + _used(results, c.second, both))


def heads_slope(results: Path, study) -> dict:
    """Post hoc: per seed, the least-squares slope of XSA's effect against log2 heads over the heads levels
    1, 4 and 8 at width 128 (per doubling of heads); its mean and interval over the seeds with all three."""
    try:
        pairs = [study.comparison(HEADS_LEVELS[h]) for h in HEADS_SLOPE_LEVELS]
    except KeyError:
        return dict(key=HEADS_SLOPE, value=None, lo=None, hi=None, n=0, declared=0, p=None, status="not declared yet")
    declared = set.intersection(*(declared_seeds(study, p) for p in pairs))
    seeds, slopes = per_seed_slopes([_diffs(results, p, declared) for p in pairs],
                                    [math.log2(h) for h in HEADS_SLOPE_LEVELS])
    return _estimate(HEADS_SLOPE, Condition(HEADS_SLOPE, 0, float("nan"), 512, tuple(slopes)), len(declared),
                     runs=[r for p in pairs for r in _used(results, p, seeds)])


def scale_estimates(results: Path) -> dict:
    """Every estimate of the scale study, keyed; the secondary family with Holm's correction."""
    results = Path(results)
    study = get_study("scale", results)
    est = {**level_estimates(results, study), **seq_len_levels(results), **model_estimates(results),
           **model_estimates(results, sensitivity=True)}
    est[W256_LENGTH] = _contrast(results, study, W256_LENGTH)
    est[HEADS_SLOPE] = heads_slope(results, study)
    family = [est.get(name, {}).get("p") for name in SECONDARY]
    for name, adjusted in zip(SECONDARY, holm(family)):
        if name in est:
            est[name]["p_holm"] = adjusted
    est["anchors"] = [dict(source=s, what=w, value=v) for s, w, v in ANCHORS]
    est["gate map"] = gate_map(results, study)
    est.update({f"{name} strength": gate_strength(results, study, name) for name in GATES})
    for check in CHECKS:  # its level at the common rate (xsa/books/scale_check.py)
        if (checked := check_conditions(results, check)) is not None:
            est.update(model_estimates(results, conditions=checked, tag=f"{check.key} "))
    return est


# -----------------------------------------------------------------------------
# The estimates file the paper's text reads (results/estimates/scale.json)

# the fit's keys, short where the text names them often
SHORT = {SLOPES[1]: "slope_heads", SLOPES[2]: "slope_tokens", SLOPES[3]: "slope_seq_len"}
FIT_TAGS = ("sensitivity ", *(f"{c.key} " for c in CHECKS))  # and each check's fit with its level at the common rate
BOOK_KEYS = {**SHORT, **{f"{tag}{k}": f"{tag.strip()}_{v}" for tag in FIT_TAGS for k, v in SHORT.items()},
             HEADS_SLOPE: "heads_slope_w128"}


def book_key(name: str) -> str:
    """The key an estimate has in the estimates file: its short name where it has one, else its slug."""
    return slug(BOOK_KEYS.get(name, name))


def _level(name: str, e: dict, family: str, runs) -> Estimate:
    why = "" if e.get("value") is not None else e.get("status", "not run")
    what = {W256_LENGTH: "(second's effect) minus (first's), per seed",
            HEADS_SLOPE: "per seed, the least-squares slope of XSA's relative effect on final val bpb against log2 "
                         f"heads over {', '.join(map(str, HEADS_SLOPE_LEVELS))} heads at width 128; stated after "
                         "the heads 1 and 4 levels had landed, so post hoc"
            }.get(name, "XSA minus baseline in final val bpb, relative to each seed's baseline, paired by seed")
    status = e.get("status", "")
    return Estimate(book_key(name), e.get("value"), e.get("lo"), e.get("hi"), e.get("n", 0),
                    p=e.get("p"), p_holm=e.get("p_holm"), family=family, reason=why, runs=tuple(runs),
                    unit="relative per doubling" if name == HEADS_SLOPE else "relative",
                    definition=f"{name}: {what}" + (f" ({status})" if status and status != "complete" else ""),
                    declared=e.get("declared", 0))


def _fit_estimate(name: str, e: dict, conditions) -> Estimate:
    unit = "relative per doubling" if "slope" in name else "relative"
    what = ("the model's slope (t interval on the fit's df)" if "slope" in name else
            f"the model's 95% prediction interval for the true effect at {e.get('heads')} heads, "
            f"{e.get('tokens_per_param')} tokens per parameter, T = {e.get('seq_len')}")
    return Estimate(book_key(name), e["value"], e["lo"], e["hi"], len(conditions), p=e.get("p"),
                    p_holm=e.get("p_holm"), unit=unit, family="prediction", definition=f"{name}: {what}; fit on "
                    + ", ".join(conditions))


def _done(results: Path, run) -> dict | None:
    path = results / "runs" / run.run_id / "summary.json"
    s = read_json(path) if path.exists() else None
    return s if s and s.get("complete") else None


def scale_book(results: Path, est: dict | None = None) -> dict[str, Estimate]:
    """The scale study's estimates as the paper's text reads them: each level and contrast, the fit's
    slopes and predictions once it can fit, and the study's progress (runs declared and done, CPU hours)."""
    results = Path(results)
    study = get_study("scale", results)
    est = est if est is not None else scale_estimates(results)
    book = {}
    for name in (*LEVELS, "T=256", "T=512", "T=1024", W256_LENGTH, HEADS_SLOPE):
        e = est.get(name) or {}
        family = ("primary" if name == study.primary else "secondary" if name in SECONDARY else
                  "post hoc" if name == HEADS_SLOPE else "level")
        book[book_key(name)] = _level(name, e, family, e.get("runs", ()))
    for name, e in est.items():  # the fits' slopes and predictions, once they can fit
        tag = next((t for t in FIT_TAGS if name.startswith(t)), "")
        if isinstance(e, dict) and (name.removeprefix(tag) in SLOPES.values() or "prediction" in name):
            book[book_key(name)] = _fit_estimate(name, e, est[f"{tag}fit"]["conditions"])
    if "fit" in est:  # the line the scale figure draws: its intercept beside the slopes above
        book["fit_intercept"] = fact("fit_intercept", est["fit"]["beta"][0], "relative", "the model's intercept: "
                                     "its effect at one head, one token per parameter and T = 512", family="prediction")
    for check in CHECKS:
        book.update(check_book(results, check))
    x4 = book["length_x4"]  # the precision rule's target against what its cap of seeds reached
    book["x4_precision_target"] = fact("x4_precision_target", PRECISION_X4.half_width, "relative",
                                       "the x4 level's registered target: its 95% interval's half-width")
    book["x4_precision_most"] = fact("x4_precision_most", PRECISION_X4.most, "pairs", "the rule's cap on its pairs")
    book["x4_half_width"] = fact("x4_half_width", None if x4.lo is None else (x4.hi - x4.lo) / 2, "relative",
                                 "the half-width the x4 level's interval reached", runs=x4.runs)
    if "heterogeneity" in est:  # does the registered model fit its own conditions? (post hoc)
        h = est["heterogeneity"]
        book["model_heterogeneity_q"] = fact("model_heterogeneity_q", h["value"], "Q", "Cochran's Q of the "
                                             "registered fit's conditions about its fixed-effect line", family="post hoc")
        book["model_heterogeneity_df"] = fact("model_heterogeneity_df", h["df"], "degrees of freedom", "its df")
        book["model_heterogeneity_p"] = fact("model_heterogeneity_p", h["p"], "p", "its chi-square p", family="post hoc")
    reused = (LENGTH_LEVELS["x1"], HEADS_LEVELS[2])  # the robust study's pairs (its primary, its two-head pairs)
    book["levels_with_pairs"] = fact("levels_with_pairs", sum(book[slug(n)].n >= 2 for n in LEVELS if n not in reused),
                                     "levels", "levels of the study's own (not the robust study's it reuses) with "
                                     "at least two paired seeds recorded")
    # its own runs: the robust study's records it reuses (its x1 level, its 2-head level) are not its cost
    robust = {r.run_id for r in get_study("robust", results).runs}
    own = [r for r in study.runs if r.run_id not in robust]
    done = [(r, s) for r in own if (s := _done(results, r))]
    book["runs_declared"] = fact("runs_declared", len(own), "runs", "runs of its own the study's rules have declared "
                                 "so far (they declare more as brackets select); the robust study's it reuses aside")
    book["runs_done"] = fact("runs_done", len(done), "runs", "declared runs with a finished record",
                             runs=[r.run_id for r, _ in done])
    book["cpu_hours"] = fact("cpu_hours", sum(s.get("cpu_time_s") or 0 for _, s in done) / 3600, "CPU hours",
                             "process CPU time of the finished runs' training", family="cost",
                             runs=[r.run_id for r, _ in done])
    for preset, key in (("cpu-w64-d4-s128", "tokens_per_param_x1_3"), ("cpu-w64-d4", "tokens_per_param_x1"),
                        ("cpu-w64-d4-s768", "tokens_per_param_x2"), ("cpu-w64-d4-s1536", "tokens_per_param_x4")):
        cfg = make_config(preset)
        book[key] = fact(key, cfg.num_tokens / scaling_params(cfg.model), "tokens per parameter",
                         f"{preset}: training tokens per block-matrix-and-head parameter (nanochat's unit)")
    book["gate_rows"] = fact("gate_rows", len(est["gate map"]), "rows",
                             "layer-and-head rows of the gate arms' learned strengths recorded")
    for name, prefix in GATES.items():
        book.update(gate_facts(name, prefix, est))
    for target, where in TARGETS.items():  # the conditions the model predicts (xsa/studies/predict.py)
        for axis, v in where.items():
            book[f"{target}_{axis}"] = fact(f"{target}_{axis}", v, axis, f"{target} as the model predicts it: {axis}")
    book["d12_half_width"] = fact("d12_half_width", D12_HALF_WIDTH, "relative",
                                  "the d12 test's target: its 95% interval's half-width")
    book["d12_pairs"] = fact("d12_pairs", pairs_to_test(GPU_PAIR_SD, D12_HALF_WIDTH), "pairs",
                             f"d12 pairs for that half-width at an assumed per-pair SD of {100 * GPU_PAIR_SD:.3f}%")
    book.update(gpu_cost_facts(study_d12_config(results), book["d12_pairs"].value))
    for (source, what, value), key in zip(ANCHORS, ANCHOR_KEYS):
        book[key] = fact(key, value, "relative", f"{source}: {what} (as the source reports it)", family="anchor")
    # the registration typed #264's p-value (0.0014) as its effect; its arms' losses give the effect itself
    m = PUBLISHED["modded_264"]
    book["anchor_modded_nanogpt_losses"] = fact(
        "anchor_modded_nanogpt_losses", relative(m["loss_base"], m["loss_xsa"]), "relative",
        f"{m['source']}: the XSA arm's final loss against the baseline's, as the pull request reports them "
        f"({m['steps_xsa']} against {m['steps_base']} steps); the registration's anchor printed its p-value instead",
        family="anchor")
    book["final"] = registered(study.final and all(c.final for c in CHECKS))
    book.update(scale_verdicts(book, seed_paper_effect("d12")))  # what §4 and Appendix C say (xsa/books/verdicts.py)
    return book


def study_d12_config(results: Path):
    """The config of the d12 test's runs (nanochat's d12 at its recipe), as its study declares them; refused
    where it schedules an evaluation after training that the cost estimate does not time."""
    study = get_study("d12-test", results)
    if untimed(study):
        raise ValueError(f"the d12 test schedules {', '.join(untimed(study))}, which xsa/gpu/cost.py does not time")
    return study.runs[0].config()


def gpu_cost_facts(cfg, pairs: int) -> dict[str, Estimate]:
    """What the d12 test costs on one node of eight H100s (xsa/gpu/cost.py: estimated from the
    model's FLOPs, not measured), each end of its range a fact the paper's text reads."""
    rates = len(D12_RATE_FACTORS)  # every seed's pair runs at each of the test's rates
    book, run, test, most = {}, run_hours(cfg), test_hours(cfg, pairs * rates), test_hours(cfg, D12_TEST.most * rates)
    ends = {"d12_run_hours": (run, "wall hours of one d12 run, its in-training evaluations included"),
            "d12_test_hours": (test, f"wall hours of the d12 test at {pairs} pairs at each of {rates} rates, its "
                                     "data build included"),
            "d12_test_usd": (tuple(NODE_USD_PER_HOUR * h for h in test), "its cost in US dollars"),
            "d12_test_most_hours": (most, f"wall hours at the most pairs its precision rule allows ({D12_TEST.most})"),
            "d12_test_most_usd": (tuple(NODE_USD_PER_HOUR * h for h in most), "that cost in US dollars")}
    for key, (values, what) in ends.items():
        for end, v in zip(("lo", "hi"), values):
            book[f"{key}_{end}"] = fact(f"{key}_{end}", v, key.rsplit("_", 1)[1], f"{what} on one node of "
                                        f"{GPUS} H100s, {'fast' if end == 'lo' else 'slow'} end of an estimate "
                                        f"at {100 * MFU[end == 'lo']:.0f}% MFU (xsa/gpu/cost.py)", family="cost")
    for end, v in zip(("lo", "hi"), MFU):
        book[f"gpu_mfu_{end}"] = fact(f"gpu_mfu_{end}", v, "share", "MFU the GPU estimate assumes", family="cost")
    book["gpu_usd_per_hour"] = fact("gpu_usd_per_hour", NODE_USD_PER_HOUR, "USD an hour",
                                    f"the rental price of one node of {GPUS} H100s the estimate assumes", family="cost")
    return book


