"""The paper's figures across studies read what their records say: each seed's paired effect, both arms'
curves and their gap, CPU hours per study, the two studies under way counted from their records, and in the
print a short table never parts from its caption."""

import json
from pathlib import Path

import pytest

from xsa.report.export import LONG_TABLE, tables_with_captions
from xsa.books.paper_estimates import progress_books
from xsa.report.paper_figures import learning_panel, seed_effects, study_compute
from xsa.base.records import REPO_ROOT
from xsa.stack.spec import Run
from xsa.studies.sink import sink_study


def _run(arm: str, seed: int, curve: dict[int, float], complete=True) -> dict:
    """A run record as load_runs gives it: its arm, seed, logged val bpb per step and final summary."""
    last = curve[max(curve)]
    return dict(arm=arm, spec=Run("cpu-w64-d4", (), seed), summary=dict(val_bpb=last, complete=complete),
                metrics=[{"step": s, "val_bpb": v} for s, v in sorted(curve.items())])


def test_each_seed_gives_its_own_relative_effect_and_an_unfinished_run_gives_none():
    runs = [_run("a", 1, {0: 4.0, 10: 2.0}), _run("b", 1, {0: 4.0, 10: 1.9}),
            _run("a", 2, {0: 4.0, 10: 2.5}), _run("b", 2, {0: 4.0, 10: 2.6}),
            _run("a", 3, {0: 4.0, 10: 2.0}), _run("b", 3, {0: 4.0, 10: 1.0}, complete=False)]
    got = seed_effects(runs, "a", "b")
    assert set(got) == {1, 2}
    assert got[1] == pytest.approx(-0.05) and got[2] == pytest.approx(0.04)


def test_the_learning_panel_pairs_steps_both_arms_logged_for_the_same_seeds():
    runs = [_run("a", s, {0: 4.0, 10: 2.0 + s / 10, 20: 1.5 + s / 10}) for s in (1, 2, 3)]
    runs += [_run("b", s, {0: 4.0, 10: 2.0 + s / 10, 20: 1.4 + s / 10}) for s in (1, 2)]
    runs += [_run("b", 3, {0: 4.0, 20: 1.7})]  # seed 3 of b logged no step 10: that step is not paired
    p = learning_panel(runs, "a", "b")
    assert [x[0] for x in p["gap"]] == [0, 20] and p["n"] == 3
    step, mean, lo, hi = p["gap"][1]
    assert mean < 0 and lo < mean < hi  # b lower at step 20 on every seed
    assert [x[0] for x in p["arms"]["baseline"]] == [0, 20]


def test_study_compute_sums_each_study_and_says_none_where_no_cpu_time_was_recorded():
    rows = [dict(study="x", cpu_s=3600, eval_cpu_s=1800, wall_s=7200), dict(study="x", cpu_s=1800, eval_cpu_s=None,
                                                                            wall_s=3600),
            dict(study="old", cpu_s="not recorded", eval_cpu_s=None, wall_s=360)]
    got = {r["study"]: r for r in study_compute(rows)}
    assert got["x"]["runs"] == 2 and got["x"]["cpu_hours"] == pytest.approx(2.0) and got["x"]["wall_hours"] == 3.0
    assert got["old"]["cpu_hours"] is None and got["old"]["wall_hours"] == pytest.approx(0.1)


def test_the_studies_under_way_are_counted_from_their_records():
    books = progress_books(REPO_ROOT / "results")
    sink = books["sink"]
    assert sink["runs_declared"].value == len(sink_study().runs)
    finished = [r for r in sink_study().runs
                if (REPO_ROOT / "results" / "runs" / r.run_id / "summary.json").exists()]
    assert sink["runs_finished"].value == len(finished)
    assert sink["runs_new_finished"].value <= sink["runs_new"].value < sink["runs_declared"].value
    assert sink["final"].value == int(len(finished) == len(sink_study().runs))
    opt = books["optimizer"]
    assert 0 <= opt["runs_diverged"].value <= opt["runs_finished"].value <= opt["runs_declared"].value


def test_the_committed_paper_states_the_counts_its_estimates_hold():
    said = (REPO_ROOT / "paper" / "paper.md").read_text()
    sink = {e["key"]: e["value"] for e in json.loads((REPO_ROOT / "results/estimates/sink.json").read_text())["estimates"]}
    assert f"{sink['runs_finished']} of the sink study's {sink['runs_declared']} runs" in " ".join(said.split())


def _table(rows: int, n: int = 1) -> str:
    body = "".join(f"<tr><td>{i}</td></tr>" for i in range(rows))
    return f"<p><strong>Table A{n}.</strong> A caption.</p>\n<table><thead><tr><th>x</th></tr></thead>{body}</table>"


def test_a_short_table_and_its_caption_are_one_block_and_a_long_one_takes_its_caption_in():
    html = "<p>Text.</p>" + _table(3, 1) + _table(LONG_TABLE + 5, 2)
    out = tables_with_captions(html)
    assert out.count('<div class="paper-table">') == 1 and out.count('<div class="paper-table long">') == 1
    assert out.index('<div class="paper-table">') < out.index("Table A1.") < out.index("</div>")
    assert "<p><strong>Table A1.</strong>" in out  # a short table's caption stays a paragraph, above it
    # a long table flows across pages, its caption its own <caption>, which a page break never parts from its rows
    assert "<table>\n<caption><strong>Table A2.</strong> A caption.</caption><thead>" in out
    assert "<p><strong>Table A2." not in out
    assert out.startswith("<p>Text.</p>")  # a paragraph that is no caption stays as it was
    assert tables_with_captions("<p>Text.</p><table></table>") == "<p>Text.</p><table></table>"
