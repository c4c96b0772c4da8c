"""The cross-scale picture (xsa/report/crossscale.py): this paper's CPU conditions with their intervals
beside the published results as their sources report them, none of which gains an interval, and only
those that contrast XSA with none at equal steps and whose FLOPs are known drawn on the FLOPs axis."""

import pytest

from xsa.report.crossscale import cross_scale_rows, cross_scale_table, fig_cross_scale
from xsa.books.published import PUBLISHED
from xsa.books.scale import scale_book
from xsa.base.records import REPO_ROOT
from xsa.studies.registry import SEED_PAPER, get_study


@pytest.fixture(scope="module")
def rows():
    return cross_scale_rows(scale_book(REPO_ROOT / "results"), get_study("scale"))


def test_ours_have_intervals_and_the_published_none(rows):
    ours = [r for r in rows if r["source"] == "this paper"]
    assert ours and all(r["lo"] <= r["effect"] <= r["hi"] and r["runs_per_arm"] >= 2 for r in ours)
    assert all(r.get("lo") is None and r.get("hi") is None for r in rows if r["source"] != "this paper")


def test_each_published_effect_is_its_sources_numbers(rows):
    by = {(r["source"], r["what"]): r for r in rows}
    d12 = SEED_PAPER["d12"]
    assert by[("the seed paper", "d12")]["effect"] == pytest.approx(d12["xsa1"]["val_bpb"] / d12["base"]["val_bpb"] - 1)
    m = PUBLISHED["marin_5854"]
    marin = by[("marin #5854", "d512")]  # XSA against the arm without it: lower by the loss it adds
    assert marin["effect"] == pytest.approx(-m["loss_up_d512"] / (m["loss_xsa_d512"] + m["loss_up_d512"]))
    assert marin["flops"] == m["flops_d512"] and marin["flops_how"] == "stated"
    # contrasts that are not XSA against none at equal steps have no relative effect, so no point
    assert by[("modded-nanogpt #264", "124 M")]["effect"] is None
    assert all(r["effect"] is None for r in rows if r["source"].startswith("parameter-golf"))


def test_the_table_says_not_stated_and_the_figure_is_written(rows, tmp_path):
    table = cross_scale_table(rows)
    assert all(t["flops"] == "not stated" for t, r in zip(table, rows) if r["flops"] is None)
    assert "[" in table[0]["effect"] and all("[" not in t["effect"] for t in table if t["source"] != "this paper")
    png = fig_cross_scale(rows, tmp_path)
    svg = (tmp_path / "cross_scale.svg").read_text()
    assert png.exists() and "parameter-golf" not in svg and "the seed paper (one run per arm)" in svg
