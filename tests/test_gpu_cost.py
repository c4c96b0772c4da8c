"""The GPU cost estimate (xsa/gpu/cost.py) the paper prints for the d12 test: FLOPs counted on the
meta device are those of a real model, time falls as MFU rises, and pairs add linearly to the data build."""

import pytest

from xsa.gpu import cost as gpu_cost
from xsa.stack.model import GPT
from xsa.stack.presets import make_config


def test_flops_on_the_meta_device_are_the_real_models():
    cfg = make_config("cpu-w64-d4")
    assert gpu_cost.run_flops(cfg) == GPT(cfg.model).estimate_flops() * cfg.num_tokens


def test_a_run_is_faster_at_the_higher_mfu_and_pairs_add_two_runs_each():
    cfg = make_config("d12")
    fast, slow = gpu_cost.run_hours(cfg)
    assert 0 < fast < slow
    # at the top of the MFU range, the run's compute alone (its start-up taken off) scales as 1/MFU
    lo_mfu, hi_mfu = gpu_cost.MFU
    assert (slow - gpu_cost.STARTUP_H[1]) / (fast - gpu_cost.STARTUP_H[0]) == pytest.approx(hi_mfu / lo_mfu)
    assert gpu_cost.test_hours(cfg, 0) == gpu_cost.DATA_H
    four, five = gpu_cost.test_hours(cfg, 4), gpu_cost.test_hours(cfg, 5)
    assert [b - a for a, b in zip(four, five)] == pytest.approx([2 * fast, 2 * slow])


def test_more_gpus_take_less_time():
    cfg = make_config("d12")
    assert gpu_cost.run_hours(cfg, gpus=16)[1] < gpu_cost.run_hours(cfg, gpus=8)[1]


def test_a_runs_in_training_evaluations_are_counted_from_its_settings():
    cfg = make_config("d12", recipe="nanochat-324e69c")
    assert gpu_cost.evaluations(cfg) == 10  # step 0, every 250 of 2,205 steps, and the last
    # forward only over 10 x 41.9 M tokens, against 1.16 B training tokens: about 12%
    assert gpu_cost.eval_share(cfg) == pytest.approx(10 * cfg.eval_tokens / (3 * cfg.num_tokens))
    assert 0.11 < gpu_cost.eval_share(cfg) < 0.13
    fast, _ = gpu_cost.run_hours(cfg)
    compute = gpu_cost.run_flops(cfg) / (gpu_cost.GPUS * gpu_cost.PEAK * gpu_cost.MFU[1]) / 3600
    assert fast - gpu_cost.STARTUP_H[0] == pytest.approx(compute * (1 + gpu_cost.eval_share(cfg)))


def test_a_cost_is_printed_only_for_a_study_whose_evaluations_it_times(tmp_path):
    from xsa.studies.registry import get_study
    assert gpu_cost.untimed(get_study("d12-test", tmp_path)) == []
    assert gpu_cost.untimed(get_study("gpu")) == ["CORE", "SFT", "ChatCORE"]


def test_the_d12_registration_states_the_rules_error_and_the_cost_at_the_most_seeds():
    from xsa.studies.factorial.prereg import d12_test_document
    from xsa.base.records import REPO_ROOT
    from xsa.studies.scale import D12_RATE_FACTORS, D12_TEST
    results = REPO_ROOT / "results"
    text = d12_test_document(results)
    assert text == (results / "d12-test" / "preregistration.md").read_text()  # the committed file is this code's
    cfg = make_config("d12", recipe="nanochat-324e69c")
    lo, hi = gpu_cost.test_hours(cfg, D12_TEST.most * len(D12_RATE_FACTORS))
    assert f"{lo:.1f}-{hi:.1f} wall hours, ${24 * lo:.0f}-{24 * hi:.0f}" in text
    assert f"{100 * gpu_cost.eval_share(cfg):.1f}% to its training FLOPs" in text
    assert "wholly outside [L, U]" in text and "replaces the one this file first registered" in text
