"""
The paper's sentences that carry numbers, each built from the tables of `build` (nothing typed by
hand): the abstract, the power calculation, the primary endpoint, the contrasts, and the
limitations. A number missing from the records reads "n/a", never a guess.
"""

from __future__ import annotations

import math

from xsa.report.stats import Interval
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
        tpp = ", ".join(f"{r['preset']} {r['tokens_per_param']:.1f}" for r in setup)
        out.append(f"Scale: {tpp} training tokens per non-embedding parameter (nanochat trains at 10-12 tokens per "
                   f"matrix-and-head parameter, 1-2 B tokens at d12); models "
                   f"{', '.join(str(r['width']) for r in setup)} wide; every run fp32 on a 2-core CPU. The GPU "
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
        out.append("Heads: every model has a single attention head, so XSA removes the self component from the "
                   "only head there is; with several heads, other heads can carry what one head drops. The "
                   f"project's earlier multi-head study ({EARLIER_STUDY}) pointed the other way, with too few "
                   "seeds to decide.")
    if lr_checks(study, built):
        out.append("Learning rate: the check has one seed per point and the baseline's best value lies at the "
                   "edge of its three-point grid, so the tuned comparison is indicative, not an estimate.")
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


# -----------------------------------------------------------------------------
# The paper's structure: numbered figures and tables, and the sentences around them

FIGURES = ("gap", "forest", "lr", "task_effects", "diagnostics_effects")
TABLES = ("setup", "power", "main", "claims", "throughput")
# the appendix: per-comparison, per-task, per-layer and per-run detail (sweeps expanded per study)
APPENDIX = ("effects", "@sweeps", "task_effects", "core_tasks", "diagnostics_effects", "diagnostics", "compute",
            "runs", "gpu")
# the project's earlier study, with multi-head models (git history; its records are not in results/)
EARLIER_STUDY = ("commit 30bc3ae: 4- and 6-head models 256 and 384 wide (cpu-d4, cpu-d8), 3 seeds, 0.5 M "
                 "tokens; XSA minus baseline in val bpb +0.0043 [-0.0053, +0.0140] and +0.0063 "
                 "[-0.0026, +0.0152]")


class Refs:
    """Figure and table numbers of a built paper, in the order they appear: `fig("gap")` is
    "Figure 1"; a figure or table with no records gets no number (and is not shown)."""

    def __init__(self, study, built):
        from xsa.studies import Sweep
        sweeps = [c.name for c in study.comparisons if isinstance(c, Sweep)]
        has_fig = lambda n: bool(built["figures"].get(n))
        has_tab = lambda n: bool(built["tables"].get(n))
        self.figures = {n: i + 1 for i, n in enumerate(n for n in FIGURES if has_fig(n))}
        self.tables = {n: i + 1 for i, n in enumerate(n for n in TABLES if has_tab(n))}
        names = [x for n in APPENDIX for x in (sweeps if n == "@sweeps" else [n])]
        self.appendix = {n: f"A{i + 1}" for i, n in enumerate(n for n in names if has_tab(n))}

    def fig(self, name: str) -> str:
        return f"Figure {self.figures[name]}" if name in self.figures else "(no figure: no records)"

    def tab(self, name: str) -> str:
        if name in self.tables:
            return f"Table {self.tables[name]}"
        return f"Table {self.appendix[name]}" if name in self.appendix else "(no table: no records)"

    def fig_caption(self, name: str, text: str) -> str:
        return f"**{self.fig(name)}.** {text}"

    def tab_caption(self, name: str, text: str) -> str:
        return f"**{self.tab(name)}.** {text}"


def planned(study, built) -> dict | None:
    """The primary comparison on its planned seeds (those before the precision rule's)."""
    from xsa.report import PLANNED_SEEDS
    from xsa.report.tables import effect
    p = study.comparison(study.primary)
    e = effect(built["runs"], p.a, p.b, "val_bpb", seeds=set(PLANNED_SEEDS))
    return e if e["n"] else None


def _rel(e: dict) -> str:
    """'-0.15% [-0.41%, +0.11%] (n = 8)' of an `effect` dict."""
    return f"{pct(e['rel_mean'])} {pct_ci(e['rel_ci'])} (n = {e['n']})"


def _seed_effect(study, comparison: str):
    return next((c.seed_effect for c in study.claims if c.comparison == comparison and c.metric == "val_bpb"), None)


def _verb(ci: Interval) -> str:
    return {"lowers": "lowers", "raises": "raises"}.get(direction(ci), "does not measurably change")


def answer(study, built) -> str:
    """The study's answer in two or three sentences, with the conditions it holds under."""
    from xsa.report.tables import effect
    p = study.comparison(study.primary)
    full = effect(built["runs"], p.a, p.b, "val_bpb")
    pre = planned(study, built)
    if full["n"] < 2:
        return "_The primary comparison has fewer than two paired seeds: no answer yet._"
    setup = {r["preset"]: r for r in built["tables"]["setup"]}
    row = setup.get(p.a.preset, {})
    where = (f"at {p.a.preset} ({row.get('layers')} layers, {row.get('width')} wide, {row.get('heads')} attention "
             f"head{'s' if row.get('heads') != 1 else ''}, {row.get('tokens', 0) / 1e6:.1f} M training tokens)")
    seed = _seed_effect(study, study.primary)
    first = pre if pre and pre["n"] < full["n"] else full
    verdict = {"lowers": "XSA lowers", "raises": "XSA raises"}.get(direction(first["rel_ci"]),
                                                                   "XSA does not measurably change")
    text = (f"On nanochat's Muon stack at CPU scale, {verdict} the final validation bits per byte on the "
            f"pre-registered primary comparison {where}: {_rel(first)}"
            + (f" over the {first['n']} planned paired seeds" if first is pre else "")
            + (f", an interval that {'excludes' if first['rel_ci'].excludes(0.0) else 'includes'} zero"
               + (f" and {'excludes' if first['rel_ci'].excludes(seed) else 'includes'} the seed paper's {pct(seed)}"
                  if seed is not None else "") if first["rel_ci"].defined else "") + ".")
    if first is pre:
        text += (f" With the {full['n'] - pre['n']} seeds a precision rule added after an interim look (post hoc) "
                 f"it is {_rel(full)}.")
    chk = next((c for c in lr_checks(study, built) if c["preset"] == p.a.preset), None)
    if chk and chk["base_best"] != chk["recipe"] and chk["base_best"] in chk["xsa_effect"]:
        at = chk["xsa_effect"][chk["base_best"]]["rel_mean"]
        grid = sorted(chk["xsa_effect"])
        edge = " (the top of the grid)" if chk["base_best"] == grid[-1] else (
            " (the bottom of the grid)" if chk["base_best"] == grid[0] else "")
        text += (f" The result holds at the recipe's learning rate only: at the matrix learning rate where the "
                 f"baseline does best{edge}, {chk['base_best']:g}, XSA's change is {pct(at)} "
                 f"({chk['n']} seed{'s' if chk['n'] != 1 else ''})"
                 + (", a reversal" if at > 0 > chk["xsa_effect"][chk["recipe"]]["rel_mean"] else "") + ".")
    return text


def abstract(study, built) -> str:
    """The answer first, then what was done and what else was found."""
    primary = _effect(built, study.primary)
    if primary is None or primary["n"] < 2:
        return ("_The study's records are not complete yet: the abstract is written from them once the "
                "primary comparison has at least two paired seeds._")
    setup = built["tables"]["setup"]
    heads = sorted({r["heads"] for r in setup})
    text = answer(study, built)
    others = [p for p in study.main if p.name != study.primary]
    second = _effect(built, others[0].name) if others else None
    if second is not None and second["n"] >= 2:
        text += (f" At twice the depth ({others[0].name}, a secondary endpoint) XSA {_verb(second['rel_ci95'])} val bpb: "
                 f"{effect_phrase(second)}.")
    diag = _effect(built, study.primary, "diag_mass")
    if diag is not None and diag["n"] >= 2 and diag["rel_ci95"].defined:
        text += (f" XSA {_verb(diag['rel_ci95'])} the attention a token pays to itself ({effect_phrase(diag)})"
                 + (", the opposite of the seed paper's mechanism." if diag["rel_ci95"].lo > 0 else "."))
    text += (f" Exclusive Self-Attention (XSA; Zhai, 2026) removes from each attention output its component along "
             f"the token's own value; a recent paper (the seed paper) reported that in nanochat's Muon stack it "
             f"lowers val bpb by about 0.3% at two depths, from one run per arm. We repeat its question with "
             f"{len(built['runs'])} CPU runs: paired seeds, a pre-registered primary endpoint, a depth pair, "
             f"optimizer and architecture controls, an alpha sweep, a learning-rate check, likelihood-based "
             f"downstream measures, attention diagnostics and a step-time benchmark.")
    if heads == [1]:
        text += (" Our models have one attention head, and the project's earlier multi-head study "
                 "(commit 30bc3ae) pointed the other way, so the result should not be read beyond this regime.")
    return text


def introduction(study, built, refs: Refs) -> str:
    seed_d4 = _seed_effect(study, study.main[0].name) if study.main else None
    return (f"Exclusive Self-Attention (XSA; Zhai, 2026) changes one line of attention: after the "
            f"attention-weighted sum, each output loses its component along the token's own value vector, so a "
            f"token's attention can only carry information from other tokens. A follow-up paper, which we call the "
            f"*seed paper*, put XSA into nanochat (Karpathy), whose matrices are trained with Muon rather than "
            f"AdamW, and reported lower validation bits per byte at two depths ({pct(seed_d4)} at d12), lower "
            f"self-attention, and a small runtime cost, each from a single run per arm. A single run cannot "
            f"separate an effect of 0.3% from seed-to-seed noise.\n\n"
            f"We ask the same question on the same code (nanochat commit 92d63d4: rotary embeddings, QK-norm, "
            f"ReLU², value embeddings, Muon for matrices and AdamW for the rest) at a scale a 2-core CPU can train "
            f"many times over, so that it can be decided statistically: paired seeds, a primary endpoint fixed "
            f"before the main runs, and controls for the choices the seed paper left open. Our contributions are "
            f"(i) a seed-paired estimate of XSA's effect with intervals ({refs.fig('gap')}, {refs.tab('main')}); "
            f"(ii) a judgement of each of the seed paper's claims ({refs.tab('claims')}); (iii) the conditions under "
            f"which the effect changes sign: depth, optimizer, architecture and learning rate ({refs.fig('forest')}, "
            f"{refs.fig('lr')}); and (iv) a fully regenerated paper: every number here is computed from the "
            f"committed run records by `make report`.")


def results_primary(study, built, refs: Refs) -> str:
    """The primary endpoint and the depth pair, planned seeds first."""
    from xsa.report.tables import effect
    p = study.comparison(study.primary)
    full, pre = effect(built["runs"], p.a, p.b, "val_bpb"), planned(study, built)
    if full["n"] < 2:
        return "_Fewer than two paired seeds of the primary comparison._"
    out = []
    if pre and pre["n"] < full["n"]:
        out.append(f"On the {pre['n']} planned seeds, XSA's change in final val bpb at {p.name} is {_rel(pre)}: the "
                   f"interval {'excludes' if pre['rel_ci'].excludes(0.0) else 'includes'} zero. The precision rule "
                   f"(add seeds 8-11 when the interval is wider than ±{100 * study.half_width_target:.1f}% after 8 "
                   f"seeds) was committed after an interim look at the first seeds, so the {full['n'] - pre['n']} "
                   f"seeds it added are post hoc; with them the change is {_rel(full)}. We report the planned "
                   f"estimate as the primary result and the other as exploratory.")
    else:
        out.append(f"XSA's change in final val bpb at {p.name} is {_rel(full)}.")
    for q in study.main:
        if q.name == study.primary:
            continue
        e = effect(built["runs"], q.a, q.b, "val_bpb")
        if e["n"]:
            out.append(f"At {q.name} it is {_rel(e)}.")
    curves = built.get("gap") or {}
    for name, series in curves.items():
        steps = sorted(t for t in series if t > 0)
        if len(steps) >= 2:
            m = lambda t: sum(series[t]) / len(series[t])
            out.append(f"Over training ({name.split(' (')[0]}), the paired gap is {pct(m(steps[0]))} after "
                       f"{steps[0] / 1e6:.2f} M tokens and {pct(m(steps[-1]))} at the end.")
    out.append(f"{refs.fig('gap')} shows the gap during training; {refs.tab('main')} gives the levels beside the "
               f"seed paper's single runs.")
    return " ".join(out)


def results_power(study, built, refs: Refs) -> str:
    """Did the study reach the precision it planned? (the numbers are in the power table)"""
    rows = built["tables"].get("power") or []
    target = study.half_width_target
    out = []
    for r in rows:
        if r["pilot_rel_sd"] is None or r["rel_ci_half_width"] is None:
            continue
        reached = target is not None and r["rel_ci_half_width"] <= target
        out.append(f"At {r['comparison']} the pilot's paired SD ({100 * r['pilot_rel_sd']:.2f}%, {r['pilot_n']} seeds) "
                   f"{'under' if r['rel_sd'] > r['pilot_rel_sd'] else 'over'}stated the spread the full study found "
                   f"({100 * r['rel_sd']:.2f}%, {r['n']} seeds); the interval's half-width is "
                   f"±{100 * r['rel_ci_half_width']:.2f}%"
                   + (f", {'within' if reached else 'short of'} the ±{100 * target:.1f}% target, which at this spread "
                      f"takes {r['seeds_for_target']} seeds" if target else "") + ".")
    return (f"Seeds 0 and 1 of both presets were a pilot that sized the study (two-sided 95% t-interval, 80% power "
            f"at the seed paper's effect, at least 8 seeds per preset; {refs.tab('power')}). " + " ".join(out)
            + " The study is therefore powered for an effect of the seed paper's size only in the sense the pilot "
            "promised; its intervals are wider than planned.")


def results_comparisons(study, built, refs: Refs) -> str:
    """The contrasts and the alpha sweep, one sentence each, read off the forest plot."""
    from xsa.studies import Sweep
    out = [f"{refs.fig('forest')} collects every effect on val bpb."]
    out += contrast_sentences(study, built)
    for c in study.comparisons:
        if isinstance(c, Sweep) and c.field != "matrix_lr":
            rows = {r["arm"]: r for r in built["tables"].get(c.name, [])}
            cells = [(a.get(c.field), rows.get(a.name)) for a in c.others if rows.get(a.name) and rows[a.name]["n"]]
            if cells:
                excl = [v for v, r in cells if r["rel_ci95"].defined and r["rel_ci95"].excludes(0.0)]
                out.append(f"**{SWEEP_LABELS.get(c.field, c.field)}** ({cells[0][1]['n']} seeds): the change against "
                           f"{c.base.name} ranges from {pct(min(r['rel_vs_base'] for _, r in cells))} to "
                           f"{pct(max(r['rel_vs_base'] for _, r in cells))}; "
                           + (f"the interval excludes zero at {', '.join(f'{v:g}' for v in excl)}." if excl else
                              "no interval excludes zero."))
    return "\n\n".join(out)


def results_lr(study, built, refs: Refs) -> str:
    out = []
    for chk in lr_checks(study, built):
        at_recipe, at_best = chk["xsa_effect"].get(chk["recipe"]), chk["xsa_effect"].get(chk["base_best"])
        grid = sorted(chk["xsa_effect"])
        top = chk["base_best"] == grid[-1]
        s = (f"At {chk['preset']} ({chk['n']} seed{'s' if chk['n'] != 1 else ''}, no interval) the baseline's lowest "
             f"val bpb on the grid is at matrix LR {chk['base_best']:g}"
             + (" (the top of the grid, so its optimum may lie beyond it)" if top else "")
             + f", {pct(chk['base_gain_at_best'])} against the recipe's {chk['recipe']:g}, and XSA's is at "
               f"{chk['xsa_best']:g}.")
        if at_recipe and at_best and chk["base_best"] != chk["recipe"]:
            s += (f" XSA's change is {pct(at_recipe['rel_mean'])} at {chk['recipe']:g} and {pct(at_best['rel_mean'])} at "
                  f"{chk['base_best']:g}"
                  + (": its gain does not survive tuning the baseline." if at_best["rel_mean"] > 0 > at_recipe["rel_mean"]
                     else ": smaller where the baseline is better tuned." if at_best["rel_mean"] > at_recipe["rel_mean"]
                     else ": it holds where the baseline is better tuned."))
        out.append(s)
    if not out:
        return "_No learning-rate check in this study._"
    sd = {r["comparison"]: r["rel_sd"] for r in built["tables"].get("power", [])}
    noise = ", ".join(f"{100 * v:.2f}% at {k}" for k, v in sd.items() if v)
    return (f"{refs.fig('lr')} halves and doubles Muon's matrix learning rate for both arms. " + " ".join(out)
            + (f" With one seed per point, differences below the paired seed-to-seed SD of XSA's effect ({noise}) "
               f"are not resolved." if noise else ""))


def results_downstream(study, built, refs: Refs) -> str:
    core = _effect(built, study.primary, "core")
    lik = _effect(built, study.primary, "core_bpb")
    rows = [r for r in built["tables"].get("task_effects") or [] if r["comparison"] == study.primary]
    lower = sum(1 for r in rows if r["rel_ci95"].defined and r["rel_ci95"].hi < 0)
    higher = sum(1 for r in rows if r["rel_ci95"].defined and r["rel_ci95"].lo > 0)
    vals = [r[a] for r in built["tables"].get("core_tasks") or [] for a in r if a != "task" and r[a] is not None]
    out = (f"CORE's centered accuracies average {sum(vals) / len(vals):+.3f} over the tasks and main arms (0 is chance; "
           f"{refs.tab('core_tasks')}), so accuracy cannot separate the arms at this scale"
           + (f": XSA's change in CORE at {study.primary} is {effect_phrase(core, relative=False)}" if core else "")
           + ". We therefore score, for every CORE item, the likelihood of its correct continuation in bits per byte "
             "(the same 200 items per task for every run): a measure of how well the model predicts task text, not "
             "of capability.") if vals else ""
    if lik:
        out += (f" On it, XSA's change at {study.primary} is {effect_phrase(lik)} over all tasks; per task "
                f"({refs.fig('task_effects')}) the interval lies below zero in {lower} and above zero in {higher} of "
                f"{len(rows)} tasks.")
    return out


def results_mechanism(study, built, refs: Refs) -> str:
    out = [f"{refs.fig('diagnostics_effects')} shows XSA minus baseline per layer on 16 validation rows; "
           f"cos(z, v) after the projection is zero under XSA by construction (a check, {refs.tab('diagnostics')})."]
    for p in study.main:
        diag, cos, ent, first = (_diag(built, p.name, k) for k in ("diag_mass", "cos_y_v", "entropy", "first_mass"))
        if diag:
            out.append(f"At {p.name}: the diagonal mass a_ii changes by {_layers_phrase(diag)}; cos(y, v) before the "
                       f"projection by {_layers_phrase(cos)}; the entropy by {_layers_phrase(ent)} nats; the "
                       f"first-token mass by {_layers_phrase(first)}.")
    out.append("Under XSA, attention a token pays to itself contributes only its own value, which the projection "
               "removes: attending to oneself becomes a no-op, the role an attention sink plays. That predicts more "
               "diagonal mass under XSA, as we find, where the seed paper reports less.")
    return " ".join(out)


def results_cost(study, built, refs: Refs) -> str:
    rows = built["tables"].get("throughput") or []
    if not rows:
        return "_No throughput records._"
    parts = [f"{pct(r['overhead'])} {pct_ci(r['overhead_ci95'])} at {r['preset']}" for r in rows
             if r.get("overhead") is not None]
    compute = built["tables"].get("compute") or []
    hours = sum(r["cpu_hours"] or 0 for r in compute)
    return (f"In one process, the two arms alternate one training step each (ABBA order, one thread) and the "
            f"overhead is the ratio of median step CPU times with a bootstrap interval over step pairs "
            f"({refs.tab('throughput')}): XSA costs {'; '.join(parts)} in step time. The whole study took "
            f"{hours:.0f} CPU hours ({refs.tab('compute')}).")


def machine_warnings(study, built) -> list[str]:
    """Pairs whose two arms of a seed were trained on machines the records tell apart."""
    from xsa.records import cpu_key
    out = []
    for p in study.main:
        runs = {(r["arm"], r["spec"].seed): r for r in built["runs"] if r["provenance"]}
        for (arm, seed), r in sorted(runs.items(), key=lambda x: x[0][1]):
            if arm != p.a.name or (p.b.name, seed) not in runs:
                continue
            a, b = r["provenance"], runs[(p.b.name, seed)]["provenance"]
            ka, kb = cpu_key(a) or a.get("cpu_model"), cpu_key(b) or b.get("cpu_model")
            if ka != kb or a.get("torch_version") != b.get("torch_version"):
                out.append(f"{p.name}, seed {seed}: baseline on {ka} (torch {a.get('torch_version')}), XSA on {kb} "
                           f"(torch {b.get('torch_version')})")
    return out


def reproduction(study, built) -> str:
    """What reproduces bit for bit where, from the records' provenance."""
    provs = [r["provenance"] for r in built["runs"] if r["provenance"]]
    models = sorted({p.get("cpu_model") for p in provs if p.get("cpu_model")})
    ident = sum(1 for p in provs if p.get("cpu_identity"))
    warn = machine_warnings(study, built)
    text = ("Training is deterministic given the config, seed, data, thread count and machine kind. `make reproduce "
            "RUN=<run id>` retrains one committed run: on a machine that matches its record (CPU vendor, "
            "family/model/stepping and the kernel set torch selects; torch and numpy versions; threads) the final "
            "weights match bit for bit; on another machine the kernels round differently, and the difference in "
            "val bpb is reported against the arm's seed-to-seed SD (within it, the comparisons stand). ")
    text += (f"The records name the CPU as {', '.join(repr(m) for m in models)}"
             + (f"; {ident} of {len(provs)} also record its identity." if ident else
                ", which does not tell machines apart: they predate the CPU identity in provenance, so a rerun "
                "cannot be matched to their machine kind and is judged against the seed-to-seed SD."))
    text += (" Two arms of a seed trained on different machines: " + "; ".join(warn) + "." if warn else
             " Within every pair of the main comparisons, both arms of a seed were trained on the same machine kind "
             "as far as the records tell.")
    return text


def conclusion(study, built, refs: Refs) -> str:
    from xsa.report.tables import effect
    p = study.comparison(study.primary)
    full, pre = effect(built["runs"], p.a, p.b, "val_bpb"), planned(study, built)
    if full["n"] < 2:
        return "_Written once the primary comparison has two paired seeds._"
    main = pre if pre and pre["n"] < full["n"] else full
    heads = sorted({r["heads"] for r in built["tables"]["setup"]})
    text = (f"At CPU scale on nanochat's Muon stack, XSA's effect on the primary endpoint is {_rel(main)}"
            + (" on the planned seeds" if main is pre else "")
            + f": {'no effect can be excluded' if not main['rel_ci'].excludes(0.0) else 'an effect is detected'}"
            + (f", and the {full['n'] - pre['n']} post hoc seeds move it to {_rel(full)}" if main is pre else "")
            + ". Whatever XSA gains here depends on the learning rate and on the depth, and it raises rather than "
              "lowers diagonal attention. ")
    if heads == [1]:
        text += ("Since our models have a single attention head and the earlier multi-head study pointed the other "
                 "way, the question the seed paper raised stays open for multi-head models at tuned learning rates; "
                 "the study is built so that such comparisons slot into this paper as new records arrive.")
    return text
