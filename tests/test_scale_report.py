"""The scale study's estimates and figure (xsa/books/scale.py) on the committed robust records plus
made-up scale records whose effect follows a known line in log2 heads and log2 tokens per parameter:
the fit recovers the slopes, predicts d12 inside its interval, and the secondary family is Holm-adjusted."""

import math
import shutil

import pytest

from xsa.base.records import REPO_ROOT, atomic_write_json, read_json
from xsa.books.scale import HEADS_SLOPE, scale_book, scale_estimates
from xsa.report.scale_section import fig_scale, scale_table
from xsa.studies.registry import get_study

from test_scale_study import record


def effect(cfg):
    """The made-up effect: -0.6% at 1 head and 3.43 tokens per parameter, +0.1 point per doubling of
    heads, -0.05 point per doubling of tokens per parameter (the gate halves XSA's effect)."""
    from xsa.stack.presets import scaling_params
    m = cfg.model
    d = cfg.num_tokens / scaling_params(m)
    return -0.006 + 0.001 * math.log2(m.n_head) - 0.0005 * math.log2(d / 3.43)


def best_lr(cfg):
    """The made-up best matrix LR: 0.04 for XSA at x2 and x4 (so the x4 bracket selects two rates and the
    check trains each arm at the other's), 0.08 elsewhere."""
    longer = cfg.model.xsa_layers != "none" and cfg.num_iterations >= 768 and cfg.model.n_embd == 64
    return 0.04 if longer else 0.08


def bpb(run):
    cfg = run.config()
    base = 2.0 + 0.001 * (run.seed % 7) + 0.01 * abs(math.log2(cfg.matrix_lr / best_lr(cfg)))
    if cfg.model.xsa_gate:
        return base * (1 + 0.5 * effect(cfg))
    return base * (1 + effect(cfg)) if cfg.model.xsa_layers != "none" else base


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    runs = REPO_ROOT / "results" / "runs"
    # the robust study's committed records (CPU presets, seeds below 200), never the scale study's own
    # (its seeds start at 200): every scale record here is made up
    shutil.copytree(runs, out / "runs", ignore=lambda d, names: [n for n in names if d == str(runs) and not (
        n.startswith("cpu-w") and int(n.rsplit("_s", 1)[1]) < 200)])
    for _ in range(4):  # the brackets select, then their pairs are declared (and the x4 check's runs)
        for run in (*get_study("scale", out).runs, *get_study("scale-check", out).runs):
            if not (out / "runs" / run.run_id / "summary.json").exists():
                record(out, run, bpb(run) * (1 + 0.0005 * math.sin(run.seed)))
    for run in get_study("scale", out).runs:  # a gate run's learned strengths: 0.5 everywhere, 0.1 in layer 0
        m = run.config().model
        if m.xsa_gate:
            path = out / "runs" / run.run_id / "summary.json"
            gates = [[(0.1 if layer == 0 else 0.5) + 0.01 * math.sin(run.seed + h) for h in range(m.n_head)]
                     for layer in range(m.n_layer)]
            atomic_write_json(path, {**read_json(path), "learned_gates": gates})
    return out


def test_the_fit_recovers_the_made_up_slopes_and_the_family_is_holm_adjusted(results, tmp_path):
    est = scale_estimates(results)
    assert est["length x4"]["status"] == "complete" and est["length x4"]["n"] == 8
    assert est["fit"]["df"] == 10 - 4
    heads = est["slope per doubling of heads"]
    assert heads["lo"] < 0.001 < heads["hi"]
    tokens = est["slope per doubling of tokens per parameter"]
    assert tokens["value"] == pytest.approx(-0.0005, abs=2e-4)
    d12 = est["prediction d12"]
    assert d12["lo"] < d12["value"] < d12["hi"] and d12["heads"] == 12
    assert all(est[k].get("p_holm") is not None for k in ("slope per doubling of heads", "gate at width 64",
                                                          "width 256, 128 steps"))
    assert est["gate at width 64"]["value"] > 0  # the made-up gate keeps only half of XSA's gain
    assert est["T=512"]["n"] == 6 and est["T=256"]["seq_len"] == 256
    book = scale_book(results, est)
    assert book["fit_intercept"].value == pytest.approx(est["fit"]["beta"][0])  # the figure's line, from the estimates
    png = fig_scale(book, tmp_path)
    assert png.exists() and (tmp_path / "scale.svg").exists()
    svg = (tmp_path / "scale.svg").read_text()
    assert "d12 (10.5" not in svg and "seed paper" not in svg  # nothing of d12 drawn on axes it is not on


def test_the_estimates_file_binds_each_level_to_its_runs_and_counts_only_the_studys_own(results):
    est = scale_estimates(results)
    book = scale_book(results, est)
    x4 = book["length_x4"]
    assert (x4.value, x4.n, x4.declared) == (est["length x4"]["value"], 8, 8) and len(x4.runs) == 16
    assert all(r.endswith(tuple(f"_s{s}" for s in range(210, 218))) for r in x4.runs)  # never a selection seed
    assert book["prediction_d12"].value == est["prediction d12"]["value"] and book["slope_heads"].lo is not None
    own = {r.run_id for r in get_study("scale", results).runs} - {r.run_id for r in get_study("robust", results).runs}
    assert book["runs_declared"].value == len(own) and book["runs_done"].value == len(own)  # every made-up run is done
    assert book["length_x1"].n == 20 and book["length_x1"].runs  # the robust primary, reused, bound to its runs
    rows = {r["level"]: r for r in scale_table(book, results)}
    assert rows["length x4"]["status"] == "complete"
    assert rows["length x1"]["first_record"].startswith("2026-")  # read from the robust records' provenance


def test_the_post_hoc_heads_slope_is_per_seed_at_width_128_and_says_it_is_post_hoc(results):
    """The made-up effect moves +0.1 point per doubling of heads; the post hoc slope reads it from the
    1-, 4- and 8-head levels on their common seeds only (never the robust study's 2-head seeds)."""
    est = scale_estimates(results)
    e = est[HEADS_SLOPE]
    assert e["n"] == e["declared"] == 8 and e["value"] == pytest.approx(0.001, abs=1e-6)
    assert len(e["runs"]) == 3 * 2 * 8 and all("-h2-" not in r and int(r.rsplit("_s", 1)[1]) >= 210 for r in e["runs"])
    book = scale_book(results, est)
    slope = book["heads_slope_w128"]
    assert slope.family == "post hoc" and slope.unit == "relative per doubling" and "post hoc" in slope.definition
    assert book["slope_heads"].family == "prediction"  # the model's pre-registered slope is a different estimate
    rows = {r["level"]: r for r in scale_table(book, results)}
    assert rows[HEADS_SLOPE]["status"] == "complete" and rows[HEADS_SLOPE]["family"] == "post hoc"


def test_a_level_not_declared_yet_says_so_and_has_no_value(tmp_path):
    runs = REPO_ROOT / "results" / "runs"
    shutil.copytree(runs, tmp_path / "runs", ignore=lambda d, names: [n for n in names if d == str(runs) and not (
        n.startswith("cpu-w") and int(n.rsplit("_s", 1)[1]) < 200)])
    book = scale_book(tmp_path)
    assert book["length_x4"].value is None and book["length_x4"].reason == "not declared yet"
    assert book["runs_done"].value == 0 and book["levels_with_pairs"].value == 0  # x1 and 2 heads are the robust study's
    assert "prediction_d12" not in book and book["heads_slope_w128"].value is None
    rows = {r["level"]: r for r in scale_table(book, tmp_path)}
    assert rows["length x4"]["status"] == "not declared yet" and rows["length x1"]["status"] == "complete"
    assert rows["length x1/3"]["status"] == "not run"  # declared (its LR is the robust study's), no records yet


def render_section_4(results):
    """The paper's §4 rendered on the committed estimates with the scale book of `results`: (the scale
    book, the text of §4 and of Appendix C, the scale study's further arms, the rendered blocks)."""
    from xsa.books.estimates import Book, read_estimates
    from xsa.report.writing import render, template_for
    book = {f.stem: read_estimates(f) for f in (REPO_ROOT / "results" / "estimates").glob("*.json") if f.stem != "smoke"}
    scale = scale_book(results)
    book["scale"] = scale
    figures = {n: "x.png" for n in ("robustness", "paired", "diagnostics_effects", "cross_scale", "scale", "factorial",
                                      "gates", "learning", "optimizer_lr")}
    blocks = render(template_for("default").read_text(), Book(book), figures, lambda name, **kw: "", dict(
        study=get_study("default"), left_out="", machine_warnings=[], runs=[], scale_study=get_study("scale"),
        scale_checks={"scale-check": get_study("scale-check")}))
    text = "".join(v for k, v in blocks if k == "markdown")
    further = text.split("## Appendix C.")[1].split("## Appendix D.")[0] if "## Appendix C." in text else ""
    return scale, text.split("## 4. Scale")[1].split("## 5.")[0] + further, blocks  # §4 and its appendix


def test_the_papers_section_states_the_prediction_once_the_model_fits(results):
    """With every level recorded (made up here), §4 tells the scale study whole, its figure shown and referred
    to, and gives no d12 number: every extrapolation to d12 is in the appendix's table of registered conditional
    extrapolations, not in the main text."""
    scale, section, blocks = render_section_4(results)
    assert "The study is in progress" not in section
    lo, hi = (f"{100 * x:+.2f}%" for x in (scale["prediction_d12"].lo, scale["prediction_d12"].hi))
    assert lo not in section and hi not in section
    assert ("figure", "scale") in blocks
    # the gate: what it learned at both places, and its verdict against fixed alpha = 1 (made up: it keeps half
    # of XSA's gain, so learning it raises the loss); the first study's shape with its verdict
    assert "The learnable gate" in section and "With one head of 64 the gates learned a strength of" in section
    assert "With eight heads at width 128" in section and "learning it raises the loss" in section
    assert "The first study's shape" in section
    assert ("table", "scale_gates") not in blocks  # tables are markdown blocks; the gate table is in the appendix


def test_a_level_read_before_its_last_pairs_stops_the_text_of_a_final_study(results, tmp_path):
    """The first study's shape with two of its six pairs at 384 steps recorded: the scale study is registered
    final, so its text has no interim reading to give, and the build stops naming the level and its count
    (xsa/books/verdicts.py: whole)."""
    from xsa.books.verdicts import NotWhole
    shutil.copytree(results, tmp_path / "results")
    long_runs = [r for r in get_study("scale", tmp_path / "results").runs
                 if r.config().model.n_embd == 256 and r.config().num_iterations == 384]
    for run in long_runs:
        if run.seed >= 212:
            shutil.rmtree(tmp_path / "results" / "runs" / run.run_id)
    with pytest.raises(NotWhole, match=r"scale: width_256_384_steps \(2 of 6 pairs\).*runs_done \(\d+ of \d+ runs\)"):
        render_section_4(tmp_path / "results")


def test_the_gate_map_has_every_layer_and_head_of_both_gate_levels_with_intervals(results, tmp_path):
    from xsa.report.scale_section import gate_table
    est = scale_estimates(results)
    rows, book = gate_table(est), scale_book(results, est)
    assert {r["level"] for r in rows} == {"gate at width 64", "gate at 8 heads"} and book["gate_rows"].value == len(rows)
    assert len([r for r in rows if r["level"] == "gate at 8 heads"]) == 4 * 8  # 4 layers x 8 heads
    first = [r for r in rows if r["layer"] == 0]
    assert all(r["ci"].hi < 0.2 for r in first) and all(r["ci"].lo > 0.4 for r in rows if r["layer"] > 0)
    # what the text states of each level: 0.1 in layer 0 and 0.5 elsewhere average 0.4 over 4 layers; every
    # gate's interval lies above 0 and none reaches 1
    for prefix, heads in (("gate_w64", 4), ("gate_h8", 32)):
        strength = book[f"{prefix}_strength"]
        assert strength.n == 8 and strength.lo < 0.4 < strength.hi and strength.hi - strength.lo < 0.02
        assert len(strength.runs) == 8 and all("gate" in r for r in strength.runs)
        assert book[f"{prefix}_heads"].value == heads and book[f"{prefix}_heads_on"].value == heads
        assert book[f"{prefix}_heads_off"].value == 0 and book[f"{prefix}_heads_full"].value == 0
        assert abs(book[f"{prefix}_head_lo"].value - 0.1) < 0.02 and abs(book[f"{prefix}_head_hi"].value - 0.5) < 0.02


def test_a_scale_record_that_is_not_whole_stops_the_section_naming_its_file(results, tmp_path):
    from xsa.checks.integrity import RecordError
    from xsa.report.scale_section import scale_section
    with pytest.raises(RecordError, match="provenance.json: missing"):  # the made-up records have none
        scale_section(get_study("default"), results, tmp_path)


def test_a_damaged_scale_record_left_out_is_analysed_as_never_trained_and_kept(tmp_path):
    from xsa.checks.integrity import RecordError, known_runs
    from xsa.report.scale_section import scale_section
    results = tmp_path / "results"
    shutil.copytree(REPO_ROOT / "results" / "runs", results / "runs")  # the committed records, scale's own among them
    study = get_study("default")
    book, _, _ = scale_section(study, results, tmp_path / "figures")
    x4 = book["length_x4"]
    assert x4.n >= 2, "the committed records have x4 pairs"
    damaged = results / "runs" / x4.runs[-1]
    (damaged / "provenance.json").unlink()
    with pytest.raises(RecordError, match=f"(?s){damaged.name}.*provenance.json: missing.*--leave-out"):
        scale_section(study, results, tmp_path / "figures")
    assert damaged.name in known_runs(study, results)  # the paper stage accepts it as a run to leave out
    kept = sorted(p.name for p in damaged.iterdir())
    book, tables, _ = scale_section(study, results, tmp_path / "figures", leave_out=[damaged.name])
    assert book["length_x4"].n == x4.n - 1 and damaged.name not in book["length_x4"].runs
    assert damaged.name not in book["runs_done"].runs
    assert next(r for r in tables["scale"] if r["level"] == "length x4")["status"].startswith("interim")
    assert sorted(p.name for p in damaged.iterdir()) == kept  # its files are left as they were


def test_the_x4_check_pairs_each_arm_at_both_rates_and_refits_with_x4_at_the_common_rate(results, tmp_path):
    """Made up: XSA's best rate at x4 is 0.04 and the baseline's 0.08, 0.01 bpb worse an octave off. The
    check's four estimates read that (Holm over the four), the better-rates effect picks each arm's own
    rate, and the sensitivity fit replaces the x4 level by its pairs at the common rate."""
    book = scale_book(results)
    own_penalty = 0.01 / 2.0  # an octave off the best rate, relative to a baseline of about 2.0
    assert book["check_base_rates"].value == pytest.approx(own_penalty, rel=0.05)  # the baseline worse at 0.04
    assert book["check_xsa_rates"].value == pytest.approx(own_penalty, rel=0.05)  # XSA worse at 0.08
    x4 = book["length_x4"].value
    assert book["check_common_xsa_rate"].value == pytest.approx(x4 - own_penalty, abs=1e-3)  # a baseline off its best
    assert all(book[k].n == 8 and book[k].p_holm is not None and book[k].p_holm >= book[k].p
               for k in ("check_common_xsa_rate", "check_base_rates", "check_common_base_rate", "check_xsa_rates"))
    better = book["check_better_rates"]
    assert better.value == pytest.approx(x4, abs=1e-9) and "optimistic" in better.definition
    assert book["check_runs_done"].value == book["check_runs_declared"].value == 16
    assert book["check_prediction_d12"].value != book["prediction_d12"].value  # the refit moved with x4
    assert "length x4" in book["check_prediction_d12"].definition
    # the figure draws the check beside the x4 level, named in its legend
    fig_scale(book, tmp_path)
    assert "both arms at XSA&#39;s rate (the check)" in (tmp_path / "scale.svg").read_text() or \
        "both arms at XSA's rate (the check)" in (tmp_path / "scale.svg").read_text()


def test_a_new_registered_check_of_a_level_is_one_entry(results, tmp_path, monkeypatch):
    """README, Extending: a registered check of a scale level is one RateCheck (xsa/studies/scale.py:
    CHECKS); its study, its registration and its estimates follow from it. Here a made-up second check
    of x4 on the seeds its precision rule would add (218-225)."""
    import xsa.prereg
    import xsa.studies.registry
    from xsa.studies.prereg_check import check_document
    from xsa.books.scale_check import check_book
    from xsa.studies.scale import CHECKS, RateCheck
    from test_scale_study import record
    for c in CHECKS:  # the registries are built from CHECKS: nothing else to touch
        assert c.name in xsa.studies.registry.STUDIES and c.name in xsa.studies.registry.ADAPTIVE and c.name in xsa.prereg.DOCUMENTS
        assert c.name in get_study("scale", results).checks
    check = RateCheck("scale-check-late", "length x4", "cpu-w64-d4-s1536", "late", seeds=range(218, 226))
    monkeypatch.setitem(xsa.studies.registry.STUDIES, check.name, check.study)
    monkeypatch.setattr(xsa.studies.registry, "ADAPTIVE", {*xsa.studies.registry.ADAPTIVE, check.name})
    out = tmp_path / "results"
    shutil.copytree(results, out)
    study = get_study(check.name, out)
    assert [r.seed for r in study.runs] == list(range(218, 226)) * 2 and study.scale.endswith("; not d12/d24)")
    level = get_study("scale", out).comparison("length x4")
    for run in (*study.runs, *(arm.run(s) for arm in level.arms() for s in check.seeds)):
        if not (out / "runs" / run.run_id / "summary.json").exists():
            record(out, run, bpb(run) * (1 + 0.0005 * math.sin(run.seed)))
    doc = check_document(out, check)
    assert "the scale study's x4 level" in doc and "218..225" in doc
    book = check_book(out, check)
    assert book["late_common_xsa_rate"].n == 8 and book["late_runs_done"].value == 16
    assert book["late_x4_registered"].n == 8 and all(r.endswith(tuple(f"_s{s}" for s in check.seeds))
                                                      for r in book["late_x4_registered"].runs)
    # made up: XSA's best rate at x4 is 0.04, the baseline's 0.08, so the baseline at XSA's rate is worse
    assert book["late_base_rates"].value > 0


def test_a_check_of_a_level_whose_arms_selected_one_rate_reads_as_selected_and_whole(monkeypatch):
    """The committed heads-8 level: both arms' brackets chose 0.08. A check of it is the level's own
    pairs on its seeds: its estimate is read, the rest say why there is nothing else to compare (never
    "not declared"), every run it declares has its record, and its registration says it trains nothing."""
    import xsa.studies.registry
    from xsa.books.scale_check import ONE_RATE, check_book
    from xsa.studies.prereg_check import check_document
    from xsa.studies.rules import final_bpb
    from xsa.studies.scale import HEADS_LEVELS, RateCheck
    results = REPO_ROOT / "results"
    check = RateCheck("scale-check-h8", HEADS_LEVELS[8], "cpu-w128-d4", "h8", final=True)
    monkeypatch.setitem(xsa.studies.registry.STUDIES, check.name, check.study)
    monkeypatch.setattr(xsa.studies.registry, "ADAPTIVE", {*xsa.studies.registry.ADAPTIVE, check.name})
    study = get_study(check.name, results)
    assert study.main and not study.pending and study.final and "eight heads of 16" in study.scale
    assert study.runs and all(final_bpb(results, r) is not None for r in study.runs)  # whole
    book = check_book(results, check)
    assert all("not declared" not in e.reason for e in book.values())
    level = get_study("scale", results).comparison("heads 8")
    assert book["h8_common_xsa_rate"].n == 8 and book["h8_common_xsa_rate"].value is not None
    assert book["h8_common_xsa_rate"].value == book["h8_heads_8_registered"].value  # the level's own pairs
    assert book["h8_common_xsa_rate"].runs == tuple(r.run_id for s in check.seeds for r in (level.a.run(s), level.b.run(s)))
    assert all(book[k].value is None and book[k].reason == ONE_RATE
               for k in ("h8_base_rates", "h8_common_base_rate", "h8_xsa_rates", "h8_better_rates"))
    assert book["h8_runs_done"].value == book["h8_runs_declared"].value == 16
    assert "None of its own" in check_document(results, check)
