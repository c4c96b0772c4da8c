"""
The optimizer study's book (xsa/studies/optimizer.py, its analysis xsa/studies/optimizer_analysis.py): how far
its records have come while it trains, and, once every run it can declare has its record, its registered
endpoints. Until then no effect of the study is read into results/estimates/optimizer.json, as its
registration says.

    optimizer_book(results)   # {key: Estimate}: the progress facts; when complete, the endpoints as well

The endpoints (relative to each seed's baseline, paired by seed, Holm over the registered family): XSA under
AdamW at tuned rates (`adamw_tuned`) and under Muon beside it (`muon_tuned`, outside the family), their
per-seed difference (`interaction`, Muon minus AdamW), both arms at the baseline's rate (`<opt>_common`), and
each optimizer's and width's change of the LR sensitivity (`sensitivity_change_<opt>_<preset>`, with each
arm's sensitivity `sensitivity_<opt>_<preset>_<arm>`); each with the verdict its registration reads.
"""

from __future__ import annotations

from pathlib import Path

from xsa.books.estimates import Estimate, fact, slug, summarised
from xsa.books.verdicts import carries, direction, progress
from xsa.studies import optimizer_analysis as O
from xsa.studies.optimizer import OPTIMIZERS, SELECTION_SEEDS


DIRECTIONS = ("adamw_tuned", "muon_tuned", "muon_common", "adamw_common",
              *(slug(f"sensitivity change {o} {p}") for o in OPTIMIZERS for p in SELECTION_SEEDS))
SENSITIVITY = dict(unit="absolute", metric="lr_sensitivity")  # in bits per byte, not relative to a baseline
# the verdicts its book holds once complete, by kind (xsa/books/verdicts.py: OUTCOMES); absent before
VERDICT_KINDS = {**{f"{k}_direction": "direction" for k in DIRECTIONS}, "interaction_reading": "carries"}


def optimizer_book(results, ours: dict | None = None) -> dict[str, Estimate]:
    """`ours`: the study's analysis of `results` (optimizer_analysis.estimates), read here if not given."""
    ours = ours if ours is not None else O.estimates(Path(results))
    counts = ours["counts"]
    complete = counts["pending"] == 0 and not counts["pending_comparisons"]
    book = {e.key: e for e in (
        fact("runs_declared", counts["declared"], "runs", "runs the optimizer study declares so far (adaptive)"),
        fact("runs_finished", counts["finished"], "runs", "declared runs with a final or divergence record"),
        fact("runs_diverged", counts["diverged"], "runs", "finished runs that diverged"),
        fact("cost", counts["cpu_hours"], "CPU hours", "training CPU time of the finished runs", family="cost"),
        fact("final", int(complete), "flag", "1 when every run the study can declare has a record"),
        progress("progress", counts["finished"], counts["declared"], more=bool(counts["pending_comparisons"])))}
    if complete:
        book.update(endpoint_book(ours))
    return book


def endpoint_book(ours: dict) -> dict[str, Estimate]:
    """The registered endpoints and their verdicts, from the study's complete estimates (optimizer_book)."""
    fam, book = ours["family"], {}
    for k in ("adamw_tuned", "interaction", "muon_common", "adamw_common"):
        book[k] = summarised(k, fam[k], "registered",
                             f"optimizer study, {k}: XSA's relative effect on final val bpb, paired by seed (interaction: "
                             "under Muon minus under AdamW, per seed), Holm over the registered family")
    book["muon_tuned"] = summarised("muon_tuned", ours["effects"]["muon_tuned"], "registered",
                                    "optimizer study: XSA's effect under Muon at tuned rates (the robust primary's "
                                    "pairs), outside the family")
    for opt in OPTIMIZERS:
        for preset in SELECTION_SEEDS:
            sens = ours["sensitivity"][f"{opt}/{preset}"]
            k = slug(f"sensitivity change {opt} {preset}")
            book[k] = summarised(k, fam[f"sensitivity_change/{opt}/{preset}"], "registered",
                                 f"{opt} at {preset}: XSA's LR sensitivity minus the baseline's (Wortsman et al. 2023, "
                                 "bits per byte), seed-bootstrap interval, Holm over the family", **SENSITIVITY)
            for arm in ("base", "xsa"):
                ka = slug(f"sensitivity {opt} {preset} {arm}")
                book[ka] = summarised(ka, sens[arm], "descriptive",
                                      f"{opt} at {preset}: the {arm} arm's LR sensitivity, seed-bootstrap interval",
                                      **SENSITIVITY)
    book.update(instability_book(ours["grids"]))
    book["selections"] = fact("selections", len(ours["selections"]), "selections", "the study's LR selections "
                              "(width, optimizer, arm)", "descriptive")
    book["selections_at_edge"] = fact("selections_at_edge", sum(v["at_edge"] for v in ours["selections"].values()),
                                      "selections", "selections (width, optimizer, arm) at an end of their extended "
                                      "grid: the best rate reached, not shown to be the optimum", "descriptive")
    for k in DIRECTIONS:
        book[f"{k}_direction"] = direction(k, book[k])
    book["interaction_reading"] = carries("interaction_reading", book["interaction"])
    return book


def instability_book(grids: dict) -> dict[str, Estimate]:
    """The registration's descriptive endpoint 5 over every grid, per arm: the runs that diverged or spiked, the
    grid points at which one arm diverged and the other did not, and the largest attention logit and output-logit
    RMS at a run's end (Table optimizer_grid gives them per grid point)."""
    book, points = {}, {}
    for name, rows in grids.items():
        preset, opt, arm = name.split("/")
        for r in rows:
            points.setdefault((preset, opt, r["lr"]), {})[arm] = r["diverged"] > 0
    apart = sum(len(set(p.values())) > 1 for p in points.values())
    book["diverged_one_arm"] = fact("diverged_one_arm", apart, "grid points", "grid points (width, optimizer, "
                                    "rate) at which one arm has a diverged run and the other none", "descriptive")
    for arm in ("base", "xsa"):
        rows = [r for name, g in grids.items() if name.endswith(f"/{arm}") for r in g]
        book[f"spiky_{arm}"] = fact(f"spiky_{arm}", sum(r["spiky"] for r in rows), "runs",
                                    f"the {arm} arm's grid runs with a train-loss spike (the factorial's rule)",
                                    "descriptive")
        for k, what in (("attn_logit_max_end", "pre-softmax attention logit"), ("logit_rms_end", "output-logit RMS")):
            vals = [r[k] for r in rows if r[k] is not None]
            book[f"{k}_{arm}"] = fact(f"{k}_{arm}", max(vals) if vals else None, "logit",
                                      f"the largest {what} at a run's end over the {arm} arm's grid runs", "descriptive")
    return book
