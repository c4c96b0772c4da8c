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
