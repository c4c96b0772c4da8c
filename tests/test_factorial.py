"""The factorial study: its design as data, and its registered analysis recovering effects planted in
made-up run records (a steps account, a tokens-per-parameter account), so that each can fail."""

from __future__ import annotations

import hashlib
import json
import math
import random

import pytest

from xsa.studies.factorial import analysis as A
from xsa.studies.factorial import models as M
from xsa.studies.factorial.design import CELLS, CONTRASTS, RATES, Cell, factorial_study, ordered_runs
from xsa.studies.factorial.steps import condition_multiples, steps_to_reach
from xsa.studies.registry import get_study
from xsa.studies.kinds import xsa_pair


def _write(results, run, bpb):
    d = results / "runs" / run.run_id
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.json").write_text(json.dumps(dict(complete=True, val_bpb=bpb)))


def _plant(results, effect, noise=0.0005, seed=0):
    """Records for every factorial run and the other conditions the models read: the baseline at
    2.0 - 0.1 log2(steps / 384), XSA at baseline x (1 + effect(cfg)) with per-seed noise."""
    rng = random.Random(seed)
    pairs = [(p, c.seeds) for c in CELLS for p in c.pairs().values()]
    for preset, seeds in (("cpu-w64-d4-s1536", M.X4_SEEDS), ("cpu-w64-d4-s128", M.X4_SEEDS),
                          ("cpu-w256-d4-s128", M.W256_SEEDS), ("cpu-w256-d4", M.W256_SEEDS)):
        p = xsa_pair(preset, cpu_compile=True)
        pairs += [(type(p)(p.name, p.a.with_(matrix_lr=lr), p.b.with_(matrix_lr=lr)), seeds) for lr in RATES]
    for pair, seeds in pairs:
        cfg = pair.b.config()
        for s in seeds:
            base = 2.0 - 0.1 * math.log2(cfg.num_iterations / 384) + rng.gauss(0, 0.01)
            _write(results, pair.a.run(s), base)
            _write(results, pair.b.run(s), base * (1 + effect(cfg) + rng.gauss(0, noise)))


def steps_account(cfg):
    return -0.006 - 0.004 * math.log2(cfg.num_iterations / 384)


def tokens_account(cfg):
    from xsa.stack.presets import scaling_params
    return -0.006 - 0.004 * math.log2(cfg.num_tokens / scaling_params(cfg.model) / 3.43)


def test_the_design_is_four_cells_at_two_common_rates_on_shared_seeds():
    study = get_study("factorial")
    assert len(study.runs) == 4 * 2 * 2 * 10 == len({r.run_id for r in study.runs})
    for c in CELLS:
        for p in c.pairs().values():
            assert p.a.get("matrix_lr") == p.b.get("matrix_lr")
            for arm in p.arms():
                assert {r.seed for r in study.runs if r.arm == arm} == set(c.seeds)
    # the short cells' 0.08 runs are the robust study's, by value
    robust = {r.run_id for r in get_study("robust").runs}
    assert all(c.pair(0.08).a.run(s).run_id in robust for c in CELLS[:1] for s in c.seeds)
    # seed by seed: the first 16 runs are every cell's first seed
    assert {r.seed for r in study.runs[:16]} == {100, 300}
    # the equal-tokens-per-parameter cells have equal tokens per parameter, the equal-steps cells equal steps
    axes = {c.name: M.axes_of(c.config()) for c in CELLS}
    tpp = next(k for k in CONTRASTS if k.key == "equal_tokens_per_param")
    assert axes[tpp.first]["tokens_per_param"] == pytest.approx(axes[tpp.second]["tokens_per_param"], abs=0.01)
    steps = next(k for k in CONTRASTS if k.key == "equal_steps")
    assert axes[steps.first]["steps"] == axes[steps.second]["steps"]
    assert factorial_study().runs == study.runs


# The run ids the registered design declares, in training order (4 cells x 2 rates x 2 arms x 10 seeds),
# as (count, sha256 of the ids joined by newlines), read off the design when its records were committed:
# the study is pre-registered, so a change to xsa/studies/factorial/design.py that changes a run, or the order
# they train in, fails here before it reaches a record.
REGISTERED_RUNS = (160, "810125844633f6a6b15c11f20196f0f7dc6be5a188903712d128805cf2a6c60f")


def test_the_registered_design_declares_the_runs_it_was_registered_with():
    ids = [r.run_id for r in get_study("factorial").runs]
    assert (len(ids), hashlib.sha256("\n".join(ids).encode()).hexdigest()) == REGISTERED_RUNS
    assert ids[:2] == ["cpu-w64-d4_base-compiled-mlr0.04_s100", "cpu-w64-d4_xsa1-compiled-mlr0.04_s100"]


def test_cells_of_unequal_seeds_train_seed_by_seed_each_on_its_own_seeds():
    short, long_ = Cell("w64 short", "cpu-w64-d4", range(100, 103)), Cell("w64 long", "cpu-w64-d4-s1097", range(300, 305))
    runs = ordered_runs((short, long_))
    assert len(runs) == len({r.run_id for r in runs}) == 2 * 2 * (3 + 5)  # two rates, two arms a seed
    for c in (short, long_):
        assert {r.seed for r in runs if r.preset == c.preset} == set(c.seeds)
    assert [r.seed for r in runs[::4]] == [100, 300, 101, 301, 102, 302, 303, 304]  # the shorter cell ends first


def test_a_cells_ladder_is_a_field_that_defaults_to_its_shape(tmp_path):
    assert [c.ladder for c in CELLS] == ["w64", "w64", "w128", "w128"]
    _plant(tmp_path, steps_account)
    # a cell whose name is no shape names its ladder: w64 long under another name reads w64's
    renamed = Cell("narrow long", CELLS[1].preset, CELLS[1].seeds, ladder="w64")
    got, want = condition_multiples(tmp_path, (renamed,)), condition_multiples(tmp_path, CELLS[1:2])
    assert got == {k.replace("w64 long", "narrow long"): v for k, v in want.items()} and len(got) == len(RATES)
    with pytest.raises(ValueError, match="ladder 'narrow'"):
        condition_multiples(tmp_path, (Cell("narrow long", CELLS[1].preset, CELLS[1].seeds),))


def test_a_fifth_cell_at_x4_is_one_condition_not_two(tmp_path):
    """The fits read the scale study's x4 beside the cells; a cell at x4's preset is that condition (its
    shape and length), so the fits count it once, as the cell."""
    _plant(tmp_path, steps_account)
    fifth = Cell("w64 x4", M.X4.preset, M.X4_SEEDS)
    for rate in (None, 0.08):
        before, after = M.conditions(tmp_path, rate), M.conditions(tmp_path, rate, cells=(*CELLS, fifth))
        assert [c.name for c in after] == [fifth.name if c.name == M.X4.name else c.name for c in before]
        x4, cell = next(c for c in before if c.name == M.X4.name), next(c for c in after if c.name == fifth.name)
        assert (cell.axes, cell.diffs) == (x4.axes, x4.diffs)


def test_a_steps_account_is_recovered_and_the_other_fails(tmp_path):
    _plant(tmp_path, steps_account)
    cells = A.cell_estimates(tmp_path)
    for c in CELLS:
        assert cells[c.name]["n"] == 10
        assert cells[c.name]["value"] == pytest.approx(steps_account(c.config()), abs=0.0006)
    con = A.contrast_estimates(tmp_path)
    assert con["equal_tokens_per_param"]["value"] == pytest.approx(-0.004 * math.log2(1097 / 384), abs=0.0008)
    assert con["length_w64_per_doubling"]["value"] == pytest.approx(-0.004, abs=0.0006)
    assert A.axis_verdict(con) == "steps"
    res = M.compare(tmp_path)
    assert "steps" in res["chosen"] and "tokens per parameter" not in res["chosen"]
    assert res["heterogeneity"]["p"] > 0.01


def test_a_tokens_per_parameter_account_is_recovered(tmp_path):
    _plant(tmp_path, tokens_account)
    con = A.contrast_estimates(tmp_path)
    assert abs(con["equal_tokens_per_param"]["value"]) < 0.001
    assert A.axis_verdict(con) == "tokens per parameter"
    assert M.compare(tmp_path)["chosen"][0] == "tokens per parameter"


def test_no_difference_between_cells_is_undecided_and_an_interim_cell_counts_its_pairs(tmp_path):
    _plant(tmp_path, lambda cfg: -0.005)
    assert A.axis_verdict(A.contrast_estimates(tmp_path)) == "undecided"
    c = CELLS[1]
    (tmp_path / "runs" / c.pair(0.04).b.run(c.seeds[0]).run_id / "summary.json").unlink()
    assert A.cell_estimates(tmp_path)[c.name]["n"] == 9
    assert A.cell_estimates(tmp_path)[f"{c.name}@0.08"]["n"] == 10


def test_stability_modes_spikes_and_the_variance_ratio():
    assert A.mode([4.0, 2.5, 2.0]) == "sharp" and A.mode([4.0, 3.0, 2.0]) == "diffuse" and A.mode(None) is None
    flat = [dict(train_loss=4.0) for _ in range(100)]
    assert A.spikes(flat) == 0
    spiky = flat[:60] + [dict(train_loss=9.0)] * 3 + flat[:20] + [dict(train_loss=5.5)] + flat[:20]
    assert A.spikes(spiky) == 2  # one excursion of three steps, one of one; a rise of 1 nat or less is none
    assert A.spikes(flat[:60] + [dict(train_loss=5.0)] + flat[:10]) == 0
    assert A.final_entropy([{"diag": {"entropy": [1, 2]}}, {"val_bpb": 2}, {"diag": {"entropy": [3, 4]}}]) == [3, 4]


def test_the_variance_ratio_interval_covers_its_ratio(tmp_path):
    _plant(tmp_path, steps_account)
    c = CELLS[0]
    s = A.spread(tmp_path, c.pair(0.08).a, c.pair(0.08).b, c.seeds)
    assert s["lo"] < s["ratio"] < s["hi"] and s["n_a"] == s["n_b"] == 10


def test_steps_to_reach_interpolates_in_log_steps_and_marks_extrapolation():
    ladder = {384: 2.0, 1536: 1.8}
    assert steps_to_reach(ladder, 1.9) == (pytest.approx(768), False)
    assert steps_to_reach(ladder, 1.7)[0] == pytest.approx(3072) and steps_to_reach(ladder, 1.7)[1]
    assert steps_to_reach({384: 2.0, 1536: 2.0}, 1.9) == (None, True)


def test_the_steps_multiple_exceeds_one_where_xsa_is_lower(tmp_path):
    _plant(tmp_path, steps_account)
    m = condition_multiples(tmp_path)["w64 short@0.08"]
    assert m["value"] > 1 and m["lo"] <= m["value"] <= m["hi"]


def test_the_estimates_carry_each_cells_steps_multiple(tmp_path):
    """The factorial estimates hold the steps multiple of every cell at every rate, with its interval
    (planted: the baseline loses 0.1 bpb per doubling of steps, XSA gains 0.6% at 384 steps: the
    baseline needs 2**(2.0 * 0.006 / 0.1) = 1.087 times the steps at w64 short)."""
    from xsa.books.factorial import factorial_book
    _plant(tmp_path, steps_account, noise=0.0)
    book = factorial_book(tmp_path)
    keys = [k for k in book if k.endswith("_steps_multiple")]
    assert len(keys) == len(CELLS) * len(RATES)
    m = book["w64_short_at_0_08_steps_multiple"]
    assert m.value == pytest.approx(2 ** (2.0 * 0.006 / 0.1), rel=0.05) and m.lo <= m.value <= m.hi
    assert m.unit == "multiple of steps"


def test_the_registration_is_written_once(tmp_path):
    from xsa import prereg
    (tmp_path / "runs").mkdir()
    out = tmp_path / "keep.json"
    out.write_text("{}")
    with pytest.raises(SystemExit):
        prereg.main(["--study", "factorial", "--results", str(tmp_path), "--out", str(out)])
    assert out.read_text() == "{}"
    with pytest.raises(SystemExit):
        prereg.main(["--study", "factorial", "--results", str(tmp_path / "missing")])


def test_the_d12_rule_can_reject_the_cpu_statement_either_way():
    from xsa.studies.factorial.d12 import verdict
    cpu = (-0.03, -0.004)
    assert verdict((-0.003, -0.001), cpu) == "rejected"  # smaller than stated: wholly above U
    assert verdict((-0.05, -0.04), cpu) == "rejected"  # larger than stated: wholly below L
    assert verdict((-0.02, -0.01), cpu) == "consistent"
    assert verdict((-0.005, -0.002), cpu) == "inconclusive"  # straddles U (the replaced rule rejected it)
    assert verdict((-0.0045, -0.0041), cpu) == "consistent"  # near an end, still inside: a correct model's truth
    with pytest.raises(ValueError, match="low end"):
        verdict((0.01, -0.01), cpu)


@pytest.mark.parametrize("n", [4, 16])  # the precision rule's first seed count and its most
def test_the_d12_rule_rejects_a_correct_cpu_model_at_most_a_tenth_of_the_time_and_a_wrong_one_often(n):
    from xsa.studies.factorial.d12 import error_rate
    from xsa.studies.predict import GPU_PAIR_SD
    cpu, df = (-0.0274, -0.0011), 3  # the factorial's steps interval, t on 3 degrees of freedom
    for truth, dof in (("model", df), ("model", 10 ** 6), ("centre", df), ("across", df)):
        assert error_rate(cpu, dof, n, GPU_PAIR_SD, truth) <= 0.10
    # the replaced central-half rule rejected a correct model a fifth to a third of the time
    assert error_rate(cpu, 10 ** 6, n, GPU_PAIR_SD, "model", "central half (replaced)") > 0.25
    assert error_rate(cpu, df, n, GPU_PAIR_SD, 0.0) > 0.8  # no gain at d12: outside U, rejected
    assert error_rate(cpu, df, n, GPU_PAIR_SD, -0.0011 + 0.001) > 0.8  # 0.1% above U


def _d12_records(results, effects: dict, seeds):
    """Finished records of the d12 test's runs: baseline 0.85, XSA at 0.85 x (1 + effect at its rate + noise)."""
    from xsa.studies.scale import d12_pairs
    rng = random.Random(0)
    for p in d12_pairs():
        for s in seeds:
            _write(results, p.a.run(s), 0.85)
            _write(results, p.b.run(s), 0.85 * (1 + effects[p.name] + rng.gauss(0, 0.0002)))


def test_the_d12_tests_primary_is_the_two_rate_mean_read_by_the_rule_and_the_claims(tmp_path):
    from xsa.report.claims import their_scale
    from xsa.books.factorial import d12_book, d12_test_books
    from xsa.studies.scale import D12_ENDPOINT
    study = get_study("d12-test", tmp_path)
    assert study.primary == D12_ENDPOINT and D12_ENDPOINT not in {p.name for p in study.main}
    assert d12_test_books(tmp_path) == {}  # no record: the claims read the GPU study (not tested)
    low, high = (p.name for p in study.main)
    _d12_records(tmp_path, {low: -0.002, high: -0.006}, range(4))
    book = d12_book(tmp_path, study, {"steps": (-0.0274, -0.0011, 3), "tokens seen": (-0.0905, 0.0132, 3)})
    e = book["primary"]
    assert e.n == 4 and e.value == pytest.approx(-0.004, abs=3e-4)  # the mean over both rates, not 0.02's
    assert book["d12_test_at_0_02"].value == pytest.approx(-0.002, abs=3e-4)
    assert book["d12_test_at_0_04"].value == pytest.approx(-0.006, abs=3e-4)
    assert book["verdict_steps"].verdict == "consistent" and book["verdict_tokens_seen"].verdict == "consistent"
    far = d12_book(tmp_path, study, {"steps": (-0.0274, -0.0060, 3)})
    assert far["verdict_steps"].verdict == "rejected"  # smaller than the statement's whole interval
    _d12_records(tmp_path, {low: 0.004, high: 0.002}, range(4))  # XSA hurts d12: the claim is contradicted
    claims = {c.text: c for c in get_study("default").claims}
    books = d12_test_books(tmp_path)
    assert their_scale(claims["XSA lowers val bpb at the smaller depth"], books) == "contradicted"
    assert their_scale(claims["XSA lowers val bpb at the larger depth"], books) == "not tested"


def test_the_d12_test_runs_both_arms_at_two_rates_and_sizes_itself_from_its_own_pairs(tmp_path):
    from xsa.studies.scale import D12_TEST, d12_pairs
    study = get_study("d12-test", tmp_path)
    pairs = d12_pairs()
    assert len(pairs) == 2 and pairs[1].a.get("matrix_lr") == 2 * pairs[0].a.get("matrix_lr")
    assert len(study.runs) == 4 * D12_TEST.first  # both arms at both rates on the first seeds
    rng = random.Random(1)
    for run in study.runs:  # a spread far above the target: the rule adds a block of seeds
        _write(tmp_path, run, 0.8 + rng.gauss(0, 0.01))
    assert len(get_study("d12-test", tmp_path).runs) == 4 * (D12_TEST.first + D12_TEST.block)
