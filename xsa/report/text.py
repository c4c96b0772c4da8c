"""
The paper's sentences that carry numbers, each built from the tables of `build` (nothing typed by
hand): the abstract, the power calculation, the primary endpoint, the contrasts, and the
limitations. A number missing from the records reads "n/a", never a guess.
"""

from __future__ import annotations

import math

from xsa.stats import Interval
from xsa.report.tables import SWEEP_LABELS, fmt


def pct(x, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{100 * x:+.{digits}f}%"


def pct_ci(ci: Interval, digits: int = 2) -> str:
    return "n/a" if not ci.defined else f"[{pct(ci.lo, digits)}, {pct(ci.hi, digits)}]"


def _effect(built, comparison: str, metric: str = "val_bpb") -> dict | None:
    for r in built["tables"]["effects"]:
        if r["comparison"] == comparison and r["metric"] == metric:
            return r
    return None


def _claim(built, comparison_prefix: str, metric_word: str) -> dict | None:
    for c in built["tables"]["claims"]:
        if c["ours"].startswith(comparison_prefix) and metric_word in c["ours"]:
            return c
    return None


def effect_phrase(row: dict | None, relative: bool = True) -> str:
    """'+0.12% [+0.05%, +0.19%] (n = 8)' of an effects row."""
    if row is None or row["n"] == 0:
        return "n/a (no paired seeds yet)"
    if relative:
        return f"{pct(row['rel'])} {pct_ci(row['rel_ci95'])} (n = {row['n']})"
    return f"{fmt(row['d'])} {fmt(row['d_ci95'])} (n = {row['n']})"


def direction(ci: Interval, lower: str = "lowers", higher: str = "raises") -> str:
    if not ci.defined:
        return "cannot be decided from"
    if ci.hi < 0:
        return lower
    if ci.lo > 0:
        return higher
    return "does not measurably change"


def _tokens_per_param(built, preset: str) -> str:
    for row in built["tables"]["setup"]:
        if row["preset"] == preset:
            return f"{row['tokens_per_param']:.1f}"
    return "n/a"


def power_paragraph(study, built) -> str:
    rows = built["tables"].get("power") or []
    if not rows:
        return "_No pilot seeds declared for this study._"
    parts, target = [], study.half_width_target
    for r in rows:
        if r["pilot_rel_sd"] is None:
            parts.append(f"{r['comparison']}: the pilot has fewer than two paired seeds yet.")
            continue
        at8 = r.get("rel_ci_half_width_first8")
        parts.append(
            f"{r['comparison']}: the pilot's paired SD of the relative change in final val bpb is "
            f"{100 * r['pilot_rel_sd']:.3f}% over {r['pilot_n']} seeds ({fmt(r['pilot_sd'])} bpb); to exclude zero "
            f"with 80% probability at the seed paper's {pct(r['seed_paper_effect_rel'])} takes "
            f"{r['seeds_for_80pct_power'] or 'n/a'} paired seeds. Over all {r['n']} seeds the SD is "
            f"{100 * r['rel_sd']:.3f}%"
            + (f"; after 8 seeds the 95% interval was +/-{100 * at8:.3f}% wide (half-width)" if at8 is not None else "")
            + (f"; with all {r['n']} it is +/-{100 * r['rel_ci_half_width']:.3f}%" if r["rel_ci_half_width"]
               is not None else "")
            + (f", {'within' if r['rel_ci_half_width'] <= target else 'above'} the {100 * target:.1f}% target; at "
               f"this spread +/-{100 * target:.1f}% takes {r['seeds_for_target'] or 'more than 1000'} paired seeds"
               if target and r["rel_ci_half_width"] is not None else "") + ".")
    rule = (f", and a precision rule for the primary endpoint: seeds 8-11 are added where its interval is wider "
            f"than +/-{100 * target:.1f}% after 8 seeds" if target else "")
    return ("Seeds 0 and 1 of both presets were run first, as a pilot; the number of seeds follows from their "
            "paired spread (a two-sided 95% t-interval, normal approximation to the noncentral t for the power), "
            f"with a minimum of 8 per preset{rule}. " + " ".join(parts))


def contrast_sentences(study, built) -> list[str]:
    from xsa.studies import Contrast
    out = []
    for c in study.comparisons:
        if not isinstance(c, Contrast):
            continue
        row = _effect(built, f"({c.second.name}) minus ({c.first.name})")
        eff = _effect(built, c.second.name)
        if row is None:
            continue
        ci = row["rel_ci95"]
        verdict = ("the two effects differ" if ci.excludes(0.0) else "no difference between the two effects is detectable")
        out.append(f"**{c.name.replace('_', '/').capitalize()}.** XSA's effect on val bpb at {c.second.name}: {effect_phrase(eff)}; minus its "
                   f"effect at {c.first.name}: {effect_phrase(row)}: {verdict}.")
    return out


def lr_checks(study, built) -> list[dict]:
    """Per preset whose baseline and XSA arms both have a learning-rate sweep (field matrix_lr): the
    recipe's LR, each arm's lowest-val-bpb LR on the grid, the baseline's change there against the
    recipe's, and XSA's paired relative change in val bpb at every LR of the grid."""
    from xsa.report.tables import common_seeds, effect
    from xsa.studies import Sweep
    sweeps = [c for c in study.comparisons if isinstance(c, Sweep) and c.field == "matrix_lr"]
    out = []
    for preset in dict.fromkeys(c.base.preset for c in sweeps):
        pair = sorted((c for c in sweeps if c.base.preset == preset), key=lambda c: c.base.get("xsa_alpha"))
        if len(pair) != 2:
            continue
        base, xsa = ({a.get("matrix_lr"): a for a in c.arms()} for c in pair)
        grid = sorted(base.keys() & xsa.keys())
        seeds = common_seeds(built["runs"], [a.name for arms in (base, xsa) for a in arms.values()])
        effects = {v: effect(built["runs"], base[v], xsa[v], "val_bpb", seeds) for v in grid}  # the check's seeds
        effects = {v: e for v, e in effects.items() if e["n"]}
        rows = [{r["arm"]: r for r in built["tables"].get(c.name, [])} for c in pair]
        best = [min((r for r in t.values() if r["n"]), key=lambda r: r["val_bpb"], default=None) for t in rows]
        if not effects or None in best:
            continue
        lr_of = {a.name: v for arms in (base, xsa) for v, a in arms.items()}
        out.append(dict(preset=preset, recipe=pair[0].base.get("matrix_lr"), n=min(e["n"] for e in effects.values()),
                        base_best=lr_of[best[0]["arm"]], xsa_best=lr_of[best[1]["arm"]],
                        base_gain_at_best=best[0]["rel_vs_base"], xsa_effect=effects))
    return out


def sweep_sentences(study, built) -> list[str]:
    """Per sweep, what its table says (val bpb at each value on the seeds all its arms share, the
    lowest, the paired change against the reference arm); then, per preset with a learning-rate
    check of both arms, whether XSA moves the optimum on that grid."""
    from xsa.studies import Sweep
    out = []
    for c in study.comparisons:
        if not isinstance(c, Sweep):
            continue
        rows = {r["arm"]: r for r in built["tables"].get(c.name, [])}
        cells = sorted(((v, rows.get(a.name)) for v, a in zip(c.values(), c.arms())
                        if rows.get(a.name) and rows[a.name]["n"]), key=lambda x: x[0])
        if not cells:
            continue
        n = cells[0][1]["n"]
        low = min(cells, key=lambda x: x[1]["val_bpb"])[0]
        ref = c.base.get(c.field)
        change = "; ".join(f"{v:g}: {pct(r['rel_vs_base'])}" + (f" {pct_ci(r['rel_ci95'])}" if n > 1 else "")
                           for v, r in cells if v != ref)
        levels = ", ".join(f"{r['val_bpb']:.4f} at {v:g}" for v, r in cells)
        out.append(f"**{c.name}** ({SWEEP_LABELS.get(c.field, c.field)}; {n} seed{'s' if n != 1 else ''}, "
                   f"shared by every arm): val bpb {levels}; "
                   f"lowest at {low:g}. Change against {c.base.name} ({ref:g}): {change}"
                   + ("." if n > 1 else " (one seed: no interval)."))
    sd = {r["comparison"]: r["sd"] for r in built["tables"].get("power", [])}
    for chk in lr_checks(study, built):
        moved = chk["base_best"] != chk["xsa_best"]
        noise = (f"; with one seed, differences below the paired seed-to-seed SD of XSA's effect here "
                 f"({sd[chk['preset']]:.4f} bpb) are not resolved" if sd.get(chk["preset"]) and chk["n"] == 1 else "")
        per_lr = ", ".join(f"{v:g}: {pct(e['rel_mean'])}" for v, e in chk["xsa_effect"].items())
        out.append(f"**Learning rate at {chk['preset']}.** The lowest val bpb on this grid is at matrix LR "
                   f"{chk['base_best']:g} for the baseline and {chk['xsa_best']:g} for XSA (recipe {chk['recipe']:g}): "
                   f"XSA {'moves' if moved else 'does not move'} the optimum on this grid{noise}. XSA's change in "
                   f"val bpb at each matrix LR (n = {chk['n']}): {per_lr}.")
    return out


def limitations(study, built) -> list[str]:
    """The limits of this study, computed from its own records."""
    out = []
    setup = built["tables"]["setup"]
    if setup:
        tpp = ", ".join(f"{r['preset']} {r['tokens_per_param']:.1f} ({r['tokens_per_scaling_param']:.1f})" for r in setup)
        widths = ", ".join(str(w) for w in sorted({r["width"] for r in setup}))
        out.append(f"Scale: {tpp} training tokens per non-embedding parameter (in parentheses, per block-matrix-and-"
                   f"head parameter, the unit in which nanochat trains at 10-12, 1-2 B tokens at d12); models "
                   f"{widths} wide; every run fp32 on a 2-core CPU. The GPU "
                   f"stack (bf16, compiled) is the same code path, tested on CPU, not run at d12/d24 here.")
    runs = [r for r in built["runs"] if r["summary"]]
    bpb = [r["summary"]["val_bpb"] for r in runs if r["summary"].get("val_bpb") is not None]
    if bpb:
        out.append(f"Quality: final val bpb {min(bpb):.3f}-{max(bpb):.3f} (the seed paper's d12 is 0.85), so the models "
                   f"are far from the regime where the seed paper measured.")
    diag = built["tables"].get("diagnostics") or []
    ent = [r["entropy"] for r in diag if r.get("entropy") is not None]
    if ent and setup:
        T = setup[0]["seq_len"]
        uniform = sum(math.log(i + 1) for i in range(1, T)) / (T - 1)
        out.append(f"Attention: mean attention entropy {min(ent):.2f}-{max(ent):.2f} nats per layer against "
                   f"{uniform:.2f} for uniform causal attention over {T} positions.")
    heads = sorted({r["heads"] for r in setup})
    if heads == [1]:
        from xsa.report.archive import earlier_phrase
        earlier = earlier_phrase((built.get("robust") or {}).get("rows") or [])
        out.append("Heads: every model of this study has a single attention head, so XSA removes the self component "
                   "from the only head there is; with several heads, other heads can carry what one head drops."
                   + (f" The project's earlier multi-head study (commit {study.archived[0].commit}, its records restored in "
                      f"`results/archive/`, rows in §3.2) pointed the other way, {earlier}."
                      if earlier and study.archived else ""))
    if lr_checks(study, built):
        out.append("Learning rate: this study's check has one seed per point and the baseline's best value lies at "
                   "the edge of its three-point grid, so its tuned comparison is indicative, not an estimate"
                   + ("; the robust study (§3.2) selects each arm's rate on a grid that brackets it, on seeds of "
                      "its own." if study.robustness else "."))
    if study.half_width_target:
        out.append("Post hoc seeds: the precision rule that added seeds to the primary comparison was committed "
                   "after an interim look; the planned-seed estimate is the confirmatory one.")
    out.append("Seeds: each seed fixes the initialisation and the data order of both arms; the intervals are over "
               "seeds, the unit that varies between the arms' replications. Other sources of variation (data "
               "subset, tokenizer, hyperparameters beyond the learning-rate check) are held fixed.")
    return out


def _diag(built, comparison: str, metric: str) -> list[dict]:
    return [r for r in built["tables"].get("diagnostics_effects") or []
            if r["comparison"] == comparison and r["metric"] == metric and r["d"] is not None]


def _layers_phrase(rows: list[dict]) -> str:
    if not rows:
        return "n/a"
    up = sum(1 for r in rows if r["direction"] == "higher")
    down = sum(1 for r in rows if r["direction"] == "lower")
    mean = sum(r["d"] for r in rows) / len(rows)
    return f"{mean:+.4f} on average over {len(rows)} layers (interval above zero in {up}, below in {down})"


def discussion(study, built) -> str:
    """What the results mean together, without restating them: why the direction may differ from
    the seed paper's, and what would settle it."""
    primary = _effect(built, study.primary)
    if primary is None or primary["n"] < 2:
        return "_Written from the records once the primary comparison has at least two paired seeds._"
    lines = []
    pre = planned(study, built)
    if pre and pre["n"] < primary["n"] and primary["rel"] < pre["rel_mean"]:
        lines.append(f"- **Planned against post hoc seeds.** The planned estimate's interval includes zero; the "
                     f"added seeds' share of the estimate pulls it down, and a rule chosen after an interim look "
                     f"can select for that. Only a fresh, pre-registered set of seeds would turn the exploratory "
                     f"{pct(primary['rel'])} into a confirmed effect.")
    chk = {c["preset"]: c for c in lr_checks(study, built) if c["base_best"] != c["recipe"]}
    if chk:
        parts = [f"{p}: {pct(c['xsa_effect'][c['base_best']]['rel_mean'])} at {c['base_best']:g} against "
                 f"{pct(c['xsa_effect'][c['recipe']]['rel_mean'])} at {c['recipe']:g}"
                 for p, c in chk.items() if c["base_best"] in c["xsa_effect"] and c["recipe"] in c["xsa_effect"]]
        lines.append("- **Tuning.** Part of what XSA gains at the recipe's learning rate may be what a better "
                     "learning rate also gives an untuned baseline (XSA's change at the baseline's best rate and at "
                     "the recipe's: " + "; ".join(parts) + "). A comparison at each arm's own tuned rate, with "
                     "seeds, is the test the seed paper's claim needs.")
    lines.append("- **Depth.** Both presets train on the same tokens, so the deeper model sees half the tokens per "
                 "parameter: the depth contrast changes depth and training budget together and cannot separate them.")
    lines.append("- **Scale.** Zhai reports XSA's gain growing with model size and sequence length; the seed "
                 "paper's gains are at 0.1-0.4 B parameters trained on billions of tokens with 2,048-token "
                 "contexts. Ours are sub-million-parameter models with 512-token contexts trained on 1.6 M tokens, "
                 "a regime where attention is still learning to retrieve. What our intervals decide is the "
                 "direction and size at this scale, on this stack.")
    return "\n".join(lines)


def chat_paragraph(study, built) -> str:
    """Why ChatCORE is or is not reported for this study, from its records."""
    if not study.chat_arms:
        return ("**ChatCORE** (supervised fine-tuning on conversations, then ARC, MMLU, GSM8K and HumanEval) is "
                "run for the GPU presets only (`gpu` study): at this scale the fine-tuned models answer at chance "
                "(measured on one cpu-w64-d4 run, `results/chat_check/`: after SFT, which lowers the held-out "
                "conversation loss, ChatCORE is 0.04 on 20 items per task), so the measurement cannot inform "
                "(README, \"Evaluation\").")
    n = sum(1 for r in built["runs"] if (r["eval"] or {}).get("chatcore") is not None)
    return f"**ChatCORE** after supervised fine-tuning: {n} runs scored (see the claims and the runs table)."


def planned(study, built) -> dict | None:
    """The primary comparison on its planned seeds (those before the precision rule's)."""
    from xsa.report import PLANNED_SEEDS
    from xsa.report.tables import effect
    p = study.comparison(study.primary)
    e = effect(built["runs"], p.a, p.b, "val_bpb", seeds=set(PLANNED_SEEDS))
    return e if e["n"] else None
