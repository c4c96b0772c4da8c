"""
The paper's structure and its sections: numbered figures and tables (Refs), the abstract, the
introduction, the results, the reproduction note and the conclusion, each built from the tables of
`build` and the sentences of xsa/report/text.py (nothing typed by hand).
"""

from __future__ import annotations

from xsa.stats import Interval
from xsa.report.tables import SWEEP_LABELS
from xsa.report.text import (_diag, _effect, _layers_phrase, contrast_sentences, direction, effect_phrase,
                             lr_checks, pct, pct_ci, planned)


# -----------------------------------------------------------------------------
# The paper's structure: numbered figures and tables, and the sentences around them

FIGURES = ("gap", "robustness", "forest", "lr", "task_effects", "diagnostics_effects")
TABLES = ("setup", "power", "main", "robustness", "claims", "throughput")
# the appendix: per-comparison, per-task, per-layer and per-run detail (sweeps expanded per study)
APPENDIX = ("effects", "@sweeps", "task_effects", "core_tasks", "diagnostics_effects", "diagnostics", "compute",
            "runs", "gpu")

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


def _scale(study) -> str:
    """The study's scale as the paper says it: "CPU scale", "smoke scale", "GPU scale"."""
    return study.scale.split(" (")[0]


def title(study) -> str:
    return (f"Exclusive Self-Attention under Muon at {_scale(study)}: a seed-paired, pre-registered replication on "
            f"nanochat's stack")


def _robust_rows(built) -> list[dict]:
    return (built.get("robust") or {}).get("rows") or []


def _row_numbers(r: dict) -> str:
    """'-0.61% [-0.78%, -0.43%], n = 20' of a robustness row, 'interim k/N' beside it while it trains."""
    ci = r["rel_ci95"]
    return (f"{pct(r['rel'])} {pct_ci(ci) if ci.defined else '(no interval)'}, n = {r['n']}"
            + (f", interim {r['n']}/{r['declared']}" if r["n"] < r["declared"] else ""))


def _decided(r: dict) -> str:
    """A robustness row's direction: 'lowers', 'raises' or 'unclear'. The primary is judged by its
    interval, a member of the secondary family by its Holm-adjusted p at 5% (the pre-registration)."""
    ci = r["rel_ci95"]
    if not ci.defined:
        return "unclear"
    if r["family"] == "secondary":
        return ("lowers" if r["rel"] < 0 else "raises") if r["p_holm"] is not None and r["p_holm"] < 0.05 \
            else "unclear"
    return {"lowers": "lowers", "raises": "raises"}.get(direction(ci), "unclear")


def robust_sentence(built, lead: str = "With") -> str:
    """The robust study's answer in one sentence: under which of its conditions XSA lowers (or raises)
    final val bpb at each arm's tuned learning rate, and under which it cannot be told from zero ('' before
    the primary has two pairs). Then, if any has records, whether the effect depends on the heads, the
    sequence length or the layers (Holm-corrected)."""
    from xsa.report.robust import secondary_kind
    rows = _robust_rows(built)
    primary = next((r for r in rows if r["family"] == "primary"), None)
    if not primary or primary["n"] < 2:
        return ""
    excl = lambda what, yes: f"{'excludes' if yes else 'includes'} {what}"
    seed = excl("the seed paper's effect", primary["excludes_seed_paper"])
    conditions = [(f"with one head (the pre-registered primary endpoint, {_row_numbers(primary)}; its interval "
                   f"{excl('zero', primary['excludes_zero'])} and {seed})", primary)]
    dependences, pending = [], []
    for r in rows:
        kind = secondary_kind(r) if r["family"] == "secondary" else None
        if kind is None:
            continue
        if r["n"] < 2:
            pending += [kind[0]] if kind[1] == "condition" else []
        elif kind[1] == "condition":
            conditions.append((f"{kind[0]} ({_row_numbers(r)})", r))
        else:
            dependences.append((f"{kind[0]} ({_row_numbers(r)})", r))
    by = {}
    for text, r in conditions:
        by.setdefault(_decided(r), []).append(text)
    parts = [f"{verb} final val bpb {_join(by[verb])}" for verb in ("lowers", "raises") if by.get(verb)]
    if by.get("unclear"):
        parts.append(f"does not measurably change {'it' if parts else 'final val bpb'} (after Holm's correction) "
                     f"{_join(by['unclear'])}")
    text = (f" {lead} each arm at its own tuned matrix learning rate ({primary['matrix_lr']} at {primary['preset']}; "
            f"the pre-registered robust study, its secondary conditions Holm-corrected), XSA "
            f"{_join(parts, '; and it ')}.")
    if dependences:
        moved = [t for t, r in dependences if _decided(r) != "unclear"]
        still = [t for t, r in dependences if _decided(r) == "unclear"]
        if moved:
            text += f" Its effect depends measurably on {_join(moved)}."
        if still:
            text += (f" {'It' if moved else 'Its effect'} does not depend measurably (after Holm's correction) on "
                     f"{_join(still, ' or ')}.")
    if pending:
        text += f" Not yet measured (fewer than two pairs): XSA's effect {_join(pending)}."
    return text


def _join(items, last: str = " and ") -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + last + items[-1]


def _rel(e: dict) -> str:
    """'-0.15% [-0.41%, +0.11%] (n = 8)' of an `effect` dict."""
    return f"{pct(e['rel_mean'])} {pct_ci(e['rel_ci'])} (n = {e['n']})"


def _verb(ci: Interval) -> str:
    return {"lowers": "lowers", "raises": "raises"}.get(direction(ci), "does not measurably change")


def answer(study, built, opening: str | None = None) -> str:
    """The study's answer in two or three sentences, with the conditions it holds under; `opening`
    replaces "On nanochat's Muon stack at <scale>" where another answer comes first."""
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
    seed = study.seed_effect(study.primary)
    first = pre if pre and pre["n"] < full["n"] else full
    verdict = {"lowers": "XSA lowers", "raises": "XSA raises"}.get(direction(first["rel_ci"]),
                                                                   "XSA does not measurably change")
    opening = opening or f"On nanochat's Muon stack at {_scale(study)}"
    text = (f"{opening}, {verdict} the final validation bits per byte on the "
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
        text += (f" In this study's learning-rate check, at the matrix learning rate where the "
                 f"baseline does best{edge}, {chk['base_best']:g}, XSA's change is {pct(at)} "
                 f"({chk['n']} seed{'s' if chk['n'] != 1 else ''})"
                 + (", a reversal" if at > 0 > chk["xsa_effect"][chk["recipe"]]["rel_mean"] else "") + ".")
    return text


def abstract(study, built) -> str:
    """The answer first (the robust study's, where it has one, else the study's own), then what XSA is
    and what was done, then what else was found."""
    primary = _effect(built, study.primary)
    if primary is None or primary["n"] < 2:
        return ("_The study's records are not complete yet: the abstract is written from them once the "
                "primary comparison has at least two paired seeds._")
    setup = built["tables"]["setup"]
    heads = sorted({r["heads"] for r in setup})
    robust = robust_sentence(built, lead=f"On nanochat's Muon stack at {_scale(study)}, with").strip()
    robust_runs = len((built.get("robust") or {}).get("runs") or [])
    text = robust + " " if robust else ""
    text += (f"Exclusive Self-Attention (XSA; Zhai, 2026) removes from each attention output its component along "
             f"the token's own value; a recent paper (the seed paper) reported that in nanochat's Muon stack it "
             f"lowers val bpb by about 0.3% at two depths, from one run per arm. We repeat its question with "
             f"{len(built['runs'])} CPU runs at the recipe's learning rate: paired seeds, a pre-registered primary "
             f"endpoint, a depth pair, optimizer and architecture controls, an alpha sweep, a learning-rate check, "
             f"likelihood-based downstream measures, attention diagnostics and a step-time benchmark"
             + (f"; and with {robust_runs} more in a pre-registered robust study that tunes each arm's learning rate "
                f"and varies the number of heads, the sequence length and the layers XSA acts on." if robust else "."))
    text += " " + answer(study, built, opening="At the recipe's learning rate" if robust else None)
    others = [p for p in study.main if p.name != study.primary]
    second = _effect(built, others[0].name) if others else None
    if second is not None and second["n"] >= 2:
        text += (f" At twice the depth ({others[0].name}, a secondary endpoint) XSA {_verb(second['rel_ci95'])} val bpb: "
                 f"{effect_phrase(second)}.")
    diag = _effect(built, study.primary, "diag_mass")
    if diag is not None and diag["n"] >= 2 and diag["rel_ci95"].defined:
        text += (f" XSA {_verb(diag['rel_ci95'])} the attention a token pays to itself ({effect_phrase(diag)})"
                 + (", the opposite of the seed paper's mechanism." if diag["rel_ci95"].lo > 0 else "."))
    earlier = _earlier_rows(built)
    if heads == [1] and earlier:
        way = "pointed the other way" if all(r["rel"] > 0 for r in earlier) else "was mixed"
        shown = ", ".join(pct(r["rel"]) for r in earlier)
        said = (f"the project's earlier multi-head study ({study.archived[0].commit}: {shown} on "
                f"{max(r['n'] for r in earlier)} seeds, no interval excluding zero) {way}")
        if _two_heads(built):
            text += (f" On an earlier stack, at its recipe's learning rate and "
                     f"{_span(r['tokens_per_param'] for r in earlier)} tokens per parameter, {said}.")
        else:
            text += (f" The recipe-LR study's models have one attention head, and {said}, so its result should not "
                     f"be read beyond this regime.")
    return text


def _earlier_rows(built) -> list[dict]:
    """The archived earlier study's rows of the robustness table that have pairs."""
    return [r for r in _robust_rows(built) if r["family"].startswith("earlier study") and r.get("n")]


def _two_heads(built) -> dict | None:
    """The robust study's two-head row, once it has two pairs."""
    from xsa.report.robust import secondary_row
    row = secondary_row(_robust_rows(built), "cpu-w128-d4 tuned")
    return row if row and row["n"] >= 2 else None


def _span(values) -> str:
    """'0.03-0.1' of some positive numbers (two significant digits)."""
    vs = sorted(values)
    return f"{vs[0]:.2g}" if f"{vs[0]:.2g}" == f"{vs[-1]:.2g}" else f"{vs[0]:.2g}-{vs[-1]:.2g}"


def introduction(study, built, refs: Refs) -> str:
    seed_d4 = study.seed_effect(study.main[0].name) if study.main else None
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


def robust_interim(built) -> str:
    """'' when every row of the robustness table is complete, else what is still training."""
    rows = (built.get("robust") or {}).get("rows") or []
    open_rows = [r for r in rows if r["status"].startswith(("interim", "not run"))]  # archived rows are whole
    if not open_rows:
        return ""
    return (f"{len(open_rows)} of its {len(rows)} rows are still interim or not run (the study trains on; each "
            f"row says how many of its declared pairs have records, k/N, and its verdict is final once all have)")


def results_robust(study, built, refs: Refs) -> str:
    """The robustness table: the pre-registration's date against the first records', each arm's selected
    learning rate, and every condition's effect (Holm over the secondary family)."""
    from xsa.report.robust import minute, row_sentence
    robust = built.get("robust")
    if not robust:
        return "_This study has no robustness table._"
    pre, rows = robust["preregistration"], robust["rows"]
    firsts = sorted(minute(d) for x in robust["runs"] if (d := (x["provenance"] or {}).get("date")))
    when = (f"committed as {pre['commit']} on {pre['date']} UTC" if pre["commit"] else
            "whose commit this checkout's history does not hold")
    out = [f"The recipe-LR estimates rest on one learning rate. The robust study, pre-registered in "
           f"`results/{robust['study'].name}/preregistration.md` ({when}; its first run record is dated "
           f"{firsts[0] if firsts else 'n/a'} UTC), trains every run on the compiled CPU path and repeats the primary "
           f"comparison with each arm at its own matrix learning rate, selected on seeds that are never reused for "
           f"an estimate; its pairs use seeds from 100 on."]
    grids = {}
    for r in robust["selection"]:
        grids.setdefault(r["grid"], []).append(r)
    for name, pts in grids.items():
        chosen = next((p["matrix_lr"] for p in pts if p["selected"]), None)
        per = ", ".join(f"{p['matrix_lr']:g}: {p['val_bpb']:.4f}" for p in pts if p["val_bpb"] is not None)
        arm = "the baseline" if name.endswith("base") else "XSA"
        out.append(f"At {pts[0]['preset']} the grid selects {chosen:g} for {arm} (mean final val bpb over "
                   f"{pts[0]['n']} seeds: {per})." if chosen is not None else
                   f"At {pts[0]['preset']}, {arm}'s grid is still training.")
    checks = [g for g in robust["group_check"] if g["best"] is not None]
    if checks:
        said = "; ".join(f"{'the baseline' if g['grid'].endswith('base') else 'XSA'} with the embedding and unembedding "
                         f"LRs x{g['scale']:g}: best at {g['best']:g} ({'moved' if g['moved'] else 'not moved'})"
                         for g in checks)
        out.append(f"The AdamW-group check (2 seeds, descriptive; {len(checks)} of {len(robust['group_check'])} "
                   f"cells trained): {said}.")
    done = [row_sentence(r) for r in rows if r["family"] != "recipe-LR study" and r.get("n", 0) >= 2]
    if done:
        out.append("XSA's change in final val bpb: " + "; ".join(done) + ".")
    if slope := _slope_design(study, built):
        out.append(slope)
    diag = [d for d in robust.get("diagonal", []) if d["n"] >= 2]
    if diag:
        said = "; ".join(f"{d['label']}: {pct(d['rel_mean'], 1)} {pct_ci(d['rel_ci'], 1)} (n = {d['n']})" for d in diag)
        out.append(f"XSA's change in the diagonal attention mass a_ii (mean over layers at the final evaluation, "
                   f"paired by seed): {said}.")
    if interim := robust_interim(built):
        out.append(f"{interim[0].upper()}{interim[1:]}.")
    out.append(f"{refs.tab('robustness')} sets every condition side by side, with whether its interval excludes zero "
               f"and the seed paper's {pct(study.seed_effect(study.primary))} and, for the "
               f"secondary family, Holm-adjusted p-values (a member not run counts as p = 1). The tokens-per-parameter "
               f"column is in nanochat's unit (training tokens per block-matrix-and-head parameter; nanochat trains "
               f"d12 at 10-12).")
    return " ".join(out)


def _slope_design(study, built) -> str:
    """The slope of XSA's effect per doubling of T beside the slope the pre-registered design detects
    (80% power at the paired SD that sized it), or '' where this study did not size it."""
    from xsa.prereg import SIZED_BY, slope_detectable
    from xsa.report.robust import secondary_row
    from xsa.report.tables import effect
    from xsa.studies import SECONDARY_SEEDS
    if study.name != SIZED_BY[0]:
        return ""
    p = study.comparison(SIZED_BY[1])
    sd = effect(built["runs"], p.a, p.b, "val_bpb")["rel_sd"]
    row = secondary_row(_robust_rows(built), "sequence-length slope")
    if sd is None or row is None:
        return ""
    can = pct(slope_detectable(len(SECONDARY_SEEDS), sd)).lstrip("+")
    return ((f"Per doubling of the sequence length XSA's effect changes by {_row_numbers(row)}; " if row["n"] >= 2
             else "The sequence-length slope has no records yet; ")
            + f"the design detects a slope of {can} per doubling with 80% power (stated in the pre-registration).")


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
    text = (f"At {_scale(study)} on nanochat's Muon stack, XSA's effect on the primary endpoint is {_rel(main)}"
            + (" on the planned seeds" if main is pre else "")
            + f": {'no effect can be excluded' if not main['rel_ci'].excludes(0.0) else 'an effect is detected'}"
            + (f", and the {full['n'] - pre['n']} post hoc seeds move it to {_rel(full)}" if main is pre else "")
            + ". In this study what XSA gains depends on the depth and, on one seed a point, on the learning rate, "
              "and it raises rather than lowers diagonal attention." + robust_sentence(built) + " ")
    two = _two_heads(built)
    if heads == [1] and two is not None:  # its effect is in robust_sentence above
        earlier = _earlier_rows(built)
        if earlier and all(r["rel"] * two["rel"] < 0 for r in earlier):
            text += (f"The earlier multi-head study, of the other sign, trained at its recipe's learning rate on "
                     f"{_span(r['tokens_per_param'] for r in earlier)} tokens per parameter (the two-head rows here "
                     f"{two['tokens_per_param']:.2g}), so the two do not test the same regime. ")
    elif heads == [1]:
        text += ("Since these models have a single attention head and the earlier multi-head study pointed the other "
                 "way, the question the seed paper raised stays open for multi-head models at tuned learning rates"
                 + ("; the robust study's two-head rows (§3.2) answer it as their records land." if study.robustness
                    else "."))
    return text
