"""
The factorial study's registered estimates as the paper reads them (results/estimates/factorial.json):
each cell at each rate and its two-rate primary, the four contrasts with Holm's p, and the stability
measures for every cell and rate and for the scale study's x4 level (at each common rate and at the
tuned rates), all computed by xsa/studies/factorial/analysis.py.

    book = factorial_book(results)     # {key: Estimate}
    book = d12_book(results, study, D.cpu_statement(results))  # the d12 test's endpoint and verdicts
"""

from __future__ import annotations

from pathlib import Path

from xsa.studies.rules import final_bpb
from xsa.studies.factorial import analysis as A
from xsa.studies.factorial import d12 as D
from xsa.studies.factorial.design import CELLS, CONTRASTS, RATES, factorial_study
from xsa.studies.factorial.steps import condition_multiples
from xsa.stack.presets import scaling_params
from xsa.books.estimates import Estimate, fact, slug, summarised
from xsa.studies.factorial.models import compare
from xsa.books.verdicts import axis, fit, model, registered
from xsa.studies.kinds import xsa_pair
from xsa.studies.registry import get_study

X4_SEEDS = range(210, 218)
# the scale study's x4 pairs the stability measures read: at each common rate, and at the tuned rates
X4_PAIRS = {"x4_at_0_04": (0.04, 0.04), "x4_at_0_08": (0.08, 0.08), "x4_tuned": (0.08, 0.04)}


def _cells(results: Path) -> dict[str, Estimate]:
    out = {}
    for name, e in A.cell_estimates(results).items():
        cell, _, lr = name.partition("@")
        c = next(x for x in CELLS if x.name == cell)
        what = f"at matrix LR {lr}" if lr else f"the per-seed mean over matrix LRs {' and '.join(f'{r:g}' for r in RATES)}"
        key = slug(cell) + (f"_at_{slug(lr)}" if lr else "")
        out[key] = summarised(key, e, "primary (per cell)" if not lr else "descriptive",
                              f"{cell} (`{c.preset}`): XSA minus baseline in final val bpb, relative, paired by seed, "
                              f"{what}", declared=len(c.seeds))
    return out


def _contrasts(results: Path) -> dict[str, Estimate]:
    out = {}
    est = A.contrast_estimates(results)
    for k in CONTRASTS:
        for key in (k.key, f"{k.key}_per_doubling"):
            if key in est:
                per = " per doubling of steps" if key.endswith("per_doubling") else ""
                out[key] = summarised(key, est[key], "secondary (Holm over the four contrasts)",
                                      f"{k.name}: {k.second}'s primary minus {k.first}'s, Welch's t{per}")
    return out


def _stability(key: str, st: dict, a, b) -> dict[str, Estimate]:
    """The spread, spikes and mode split of one pair of arms, as estimates."""
    sp, out = st["spread"], {}
    out[f"{key}_variance_ratio"] = Estimate(
        f"{key}_variance_ratio", sp["ratio"], sp["lo"], sp["hi"], min(sp["n_a"], sp["n_b"]), unit="ratio",
        metric="val_bpb", family="descriptive", reason="" if sp["ratio"] is not None else "fewer than two seeds",
        definition=f"the between-seed variance of final val bpb of `{a.name}` over that of `{b.name}`, 95% F interval")
    for arm, side in ((a, "base"), (b, "xsa")):
        out[f"{key}_sd_{side}"] = fact(f"{key}_sd_{side}", sp[f"sd_{'a' if side == 'base' else 'b'}"], "val bpb",
                                       f"`{arm.name}`: SD of final val bpb between seeds", family="descriptive")
        runs = st["runs"][arm.name]
        out[f"{key}_sharp_runs_{side}"] = fact(
            f"{key}_sharp_runs_{side}", sum(r["mode"] == "sharp" for r in runs), "runs",
            f"`{arm.name}`: runs whose layer-1 head ends sharp by the registered entropy rule (of {len(runs)})",
            family="descriptive", runs=[r["run"] for r in runs])
        out[f"{key}_spiky_runs_{side}"] = fact(
            f"{key}_spiky_runs_{side}", sum(r["spikes"] > 0 for r in runs), "runs",
            f"`{arm.name}`: runs with at least one training-loss spike (of {len(runs)})", family="descriptive",
            runs=[r["run"] for r in runs])
    for mode, e in st["by_mode"].items():
        out[f"{key}_effect_{mode}"] = summarised(f"{key}_effect_{mode}", e, "descriptive",
                                                 f"XSA's relative effect on the seeds whose baseline ends {mode} "
                                                 f"(seeds {', '.join(map(str, e['seeds'])) or 'none'})")
    return out


def factorial_book(results) -> dict[str, Estimate]:
    """Every estimate of the factorial study, and the stability measures at x4."""
    results = Path(results)
    book = {**_cells(results), **_contrasts(results)}
    for c in CELLS:
        for lr, p in c.pairs().items():
            book.update(_stability(f"{slug(c.name)}_at_{slug(f'{lr:g}')}", A.pair_stability(results, p.a, p.b, c.seeds),
                                   p.a, p.b))
    x4 = xsa_pair("cpu-w64-d4-s1536", cpu_compile=True)
    for key, (lr_a, lr_b) in X4_PAIRS.items():
        a, b = x4.a.with_(matrix_lr=lr_a), x4.b.with_(matrix_lr=lr_b)
        book.update(_stability(key, A.pair_stability(results, a, b, X4_SEEDS), a, b))
    for i, lr in enumerate(RATES):  # the common rates, as the text names them
        book[f"rate_{i}"] = fact(f"rate_{i}", lr, "matrix LR", "a common matrix learning rate of the factorial study")
    for name, m in condition_multiples(results).items():  # the steps multiple (xsa/studies/factorial/steps.py)
        cell, lr = name.split("@")
        key = f"{slug(cell)}_at_{slug(lr)}_steps_multiple"
        book[key] = Estimate(key, m["value"], m["lo"], m["hi"], unit="multiple of steps", family="registered",
                             definition=f"{cell} at matrix LR {lr}: the steps the baseline's length ladder needs to "
                             "reach XSA's mean final val bpb, over the cell's steps (percentile bootstrap over seeds)"
                             + ("; beyond the ladder's lengths, extrapolated" if m["extrapolated"] else ""),
                             reason="" if m["value"] is not None else "fewer than two seeds on the ladder or XSA, "
                             "or the baseline's ladder does not reach XSA's loss")
    for c in CELLS:  # each cell's length and tokens per parameter, as the text names them
        cfg = c.config()
        book[f"{slug(c.name)}_steps"] = fact(f"{slug(c.name)}_steps", cfg.num_iterations, "steps", f"{c.preset}: steps")
        book[f"{slug(c.name)}_tokens_per_param"] = fact(
            f"{slug(c.name)}_tokens_per_param", cfg.num_tokens / scaling_params(cfg.model), "tokens per parameter",
            f"{c.preset}: training tokens per block-matrix-and-head parameter (nanochat's unit)")
    study = factorial_study()
    done = [r.run_id for r in study.runs if final_bpb(results, r) is not None]
    book["runs_declared"] = fact("runs_declared", len(study.runs), "runs", "the factorial study's declared runs")
    book["runs_done"] = fact("runs_done", len(done), "runs", "its runs with a finished record", runs=done)
    models, chosen = model_book(results)
    book.update(models)
    book["final"] = registered(study.final)  # not final: the text states its interim readings as such
    if study.final:  # what the text says of it, once whole (xsa/books/verdicts.py)
        book.update(factorial_verdicts(results, book, chosen))
    return book


# the two model comparisons the registration states: the primary (each seed's two-rate mean) and at 0.08
COMPARISONS = {"": None, "at_0_08_": 0.08}
# the verdicts its text reads once the study is whole (factorial_verdicts), each with its kind
VERDICTS = {"axis": "axis", **{f"{tag}model_chosen": "model" for tag in COMPARISONS},
            **{f"{tag}model_fit": "fit" for tag in COMPARISONS}}


def model_book(results: Path) -> tuple[dict[str, Estimate], dict[str, list]]:
    """The registered comparison of length parameterisations (xsa/studies/factorial/models.py), as estimates:
    each candidate's score, the chosen model's heterogeneity test, each condition's residual, the held-out
    conditions' predictions and each chosen candidate's d12 number, conditional (never a prediction);
    and the candidates chosen, per comparison."""
    book, chosen = {}, {}
    for tag, rate in COMPARISONS.items():
        cmp = compare(results, rate)
        where = "each seed's mean over both rates" if rate is None else f"matrix LR {rate:g}"
        for name, score in cmp["scores"].items():
            k = f"{tag}model_score_{slug(name)}"
            book[k] = Estimate(k, score, unit="score", metric="", family="registered", reason="" if score is not None
                               else "too few conditions", definition=f"{name}, at {where}: the leave-one-condition-out "
                               "score (lower is better) over " + ", ".join(cmp["conditions"]))
        if not cmp["chosen"]:
            continue
        h = cmp["heterogeneity"]
        for part, unit in (("value", "Q"), ("df", "degrees of freedom"), ("p", "p")):
            k = f"{tag}model_q" + ("" if part == "value" else f"_{part}")
            book[k] = fact(k, h[part], unit, f"at {where}: Cochran's Q_E of the chosen model ({', '.join(cmp['chosen'])})"
                           f", its {unit}", family="registered")
        for cond, r in cmp["residuals"].items():
            k = f"{tag}model_residual_{slug(cond)}"
            book[k] = fact(k, r, "relative", f"at {where}: {cond}'s mean effect minus the chosen model's fit",
                           family="registered")
        for cond, o in cmp["held_out"].items():
            for part in ("observed", "predicted"):
                k = f"{tag}heldout_{slug(cond)}_{part}"
                book[k] = fact(k, o[part], "relative", f"at {where}: {cond}, never fitted: its {part} effect",
                               family="registered")
        for name, d in cmp["d12_every"].items():
            k = f"{tag}d12_conditional_{slug(name)}"
            book[k] = Estimate(k, d["value"], float(d["lo"]), float(d["hi"]), len(cmp["conditions"]), family="conditional",
                               definition=f"at {where}: the {name} model's number at d12 (2,205 steps, 10.5 tokens per "
                               "parameter), a 95% interval for the true effect conditional on the model"
                               + (" (a chosen model)" if name in cmp["chosen"] else "") + "; not a prediction: d12 "
                               "differs in batch, vocabulary, depth and heads, which no cell varies")
        chosen[tag] = cmp["chosen"]
    return book, chosen


def factorial_verdicts(results: Path, book: dict, chosen: dict) -> dict[str, Estimate]:
    """What the text says of the study once whole: the account its axis contrasts support, and for each
    model comparison the length axis chosen and whether that model fits its conditions."""
    out = {"axis": axis("axis", A.axis_verdict(A.contrast_estimates(results)), book["equal_tokens_per_param"])}
    for tag, names in chosen.items():
        out[f"{tag}model_chosen"] = model(f"{tag}model_chosen", names)
        out[f"{tag}model_fit"] = fit(f"{tag}model_fit", book[f"{tag}model_q_p"].value)
    return out


def factorial_table(book: dict[str, Estimate]) -> list[dict]:
    """The factorial study's cells as a table, from its estimates: each cell at each rate and its two-rate
    primary, with its pairs against those declared, the steps multiple, the baseline-to-XSA variance ratio
    and each arm's runs with a training-loss spike."""
    rows = []
    for c in CELLS:
        cell = slug(c.name)
        for lr in (*RATES, None):
            at = f"{cell}_at_{slug(f'{lr:g}')}" if lr is not None else cell
            e = book[at]
            row = dict(cell=c.name, matrix_lr=lr if lr is not None else "mean of both", steps=book[f"{cell}_steps"].value,
                       tokens_per_param=book[f"{cell}_tokens_per_param"].value, n=e.n, declared=e.declared,
                       rel=e.value, rel_ci95=e.ci)
            m, v = (book[f"{at}_steps_multiple"], book[f"{at}_variance_ratio"]) if lr is not None else (None, None)
            row.update(steps_multiple=m and m.value, steps_multiple_ci95=m.ci if m else None,
                       variance_ratio=v and v.value, variance_ratio_ci95=v.ci if v else None,
                       spiky_base=book[f"{at}_spiky_runs_base"].value if lr is not None else None,
                       spiky_xsa=book[f"{at}_spiky_runs_xsa"].value if lr is not None else None)
            rows.append(row)
    return rows


# -----------------------------------------------------------------------------
# The d12 test, registered with the factorial study (its rule: xsa/studies/factorial/d12.py)

def _summarised(key: str, values, family: str, definition: str, declared: int) -> Estimate:
    e = A.summary(values)
    return Estimate(key, e["value"], e["lo"], e["hi"], e["n"], e["sd"], e["p"], family=family,
                    definition=definition, declared=declared, reason="" if e["n"] >= 2 else "fewer than two pairs")


def d12_book(results: Path, study, cpu: dict[str, tuple[float, float, int]]) -> dict[str, Estimate]:
    """The d12 test's registered estimates: `primary`, the per-seed two-rate mean with its t-interval;
    each rate's effect (its pair's name as key); and `verdict_<candidate>`, the registered verdict
    against each interval of `cpu` (`cpu_statement`), once the primary has an interval."""
    means, per = D.endpoint(results, study)
    declared = len({r.seed for r in study.runs})
    rates = " and ".join(f"{p.a.get('matrix_lr'):g}" for p in study.main)
    book = {"primary": _summarised("primary", means.values(), "primary", "final val bpb, XSA minus baseline "
                                   f"relative to each seed's baseline, per seed the mean over matrix LRs {rates}; 95% "
                                   "t-interval over seeds (the d12 test's registered endpoint)", declared)}
    for p in study.main:  # each rate's effect beside it
        book[slug(p.name)] = _summarised(slug(p.name), per[p.name].values(), "descriptive",
                                         f"{p.name}: final val bpb, XSA minus baseline relative to each seed's "
                                         "baseline, paired by seed", declared)
    e = book["primary"]
    for name, (lo, hi, _) in cpu.items():
        k = f"verdict_{slug(name)}"
        said = D.verdict((e.lo, e.hi), (lo, hi)) if e.ci.defined else "not yet (fewer than two seeds)"
        book[k] = Estimate(k, None, unit="verdict", metric="", family="verdict", verdict=said,
                           definition=f"the d12 interval read against the factorial's conditional d12 interval of the "
                           f"{name} model, [{100 * lo:+.2f}%, {100 * hi:+.2f}%], by the registered rule "
                           "(xsa/studies/factorial/d12.py)")
    return book


def d12_test_books(results: Path) -> dict[str, dict[str, Estimate]]:
    """{"d12-test": its book} once any of the d12 test's runs has a finished record, else {}: what the
    claims table reads at the seed paper's d12 in place of the one-run GPU study."""
    study = get_study("d12-test", results)
    if not any(final_bpb(results, r) is not None for r in study.runs):
        return {}
    return {study.name: d12_book(results, study, D.cpu_statement(results))}
