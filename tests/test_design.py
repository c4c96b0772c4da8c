"""The adaptive rules of the robust study (xsa/studies/rules.py) on records made up for the test: the LR
grid extends while its best value sits at an end, the precision rule adds seeds until the interval
is narrow enough or the maximum is reached, and the study declares each step once its rule decided."""

import math

from xsa.studies.rules import LRRule, PrecisionRule, final_bpb
from xsa.base.records import atomic_write_json
from xsa.stack.spec import Arm
from xsa.studies.registry import PICK, PICK_HEADS, PRECISION, get_study


def _record(results, run, bpb, complete=True):
    atomic_write_json(results / "runs" / run.run_id / "summary.json", {"complete": complete, "val_bpb": bpb})


def _train_grid(results, rule, arm, best_lr):
    """Record the rule's current grid with a bowl in log LR whose minimum is at best_lr."""
    for run in rule.runs(results, arm):
        lr = run.config().matrix_lr
        _record(results, run, 2.0 + 0.1 * math.log2(lr / best_lr) ** 2 + 0.001 * run.seed)


def test_lr_rule_extends_the_grid_until_the_best_value_is_inside(tmp_path):
    arm, rule = Arm.of("cpu-w64-d4", cpu_compile=True), LRRule((0.02, 0.04, 0.08, 0.16), seeds=(0, 1))
    assert rule.state(tmp_path, arm) == ([0.02, 0.04, 0.08, 0.16], None)  # nothing trained: pending
    _train_grid(tmp_path, rule, arm, best_lr=0.3)
    assert rule.state(tmp_path, arm) == ([0.02, 0.04, 0.08, 0.16, 0.32], None)  # best at the top: extend
    _train_grid(tmp_path, rule, arm, best_lr=0.3)
    assert rule.state(tmp_path, arm) == ([0.02, 0.04, 0.08, 0.16, 0.32, 0.64], None)  # 0.32 best, at the top
    _train_grid(tmp_path, rule, arm, best_lr=0.3)
    grid, lr = rule.state(tmp_path, arm)
    assert grid == [0.02, 0.04, 0.08, 0.16, 0.32, 0.64] and lr == 0.32  # inside the grid: selected


def test_lr_rule_stops_at_its_maximum_and_ignores_unfinished_runs(tmp_path):
    arm, rule = Arm.of("cpu-w64-d4", cpu_compile=True), LRRule((0.02, 0.04), seeds=(0,), max_extensions=1)
    for _ in range(3):
        _train_grid(tmp_path, rule, arm, best_lr=0.001)
    assert rule.state(tmp_path, arm) == ([0.01, 0.02, 0.04], 0.01)  # at the edge after one extension
    _record(tmp_path, arm.with_(matrix_lr=0.01).run(0), float("nan"))
    assert rule.state(tmp_path, arm)[1] is None and final_bpb(tmp_path, arm.with_(matrix_lr=0.01).run(0)) is None


def test_precision_rule_adds_blocks_until_narrow_or_the_maximum(tmp_path):
    a, b = Arm.of("cpu-w64-d4", cpu_compile=True), Arm.of("cpu-w64-d4", cpu_compile=True, xsa_alpha=1.0)
    rule = PrecisionRule(first=4, block=2, most=8, half_width=0.002, start=100)
    assert rule.seeds(tmp_path, a, b) == range(100, 104)

    def fill(spread):
        for s in rule.seeds(tmp_path, a, b):
            _record(tmp_path, a.run(s), 2.0)
            _record(tmp_path, b.run(s), 2.0 * (1 - 0.004 + spread * (-1) ** s))
    fill(0.01)  # wide: 2 more seeds, then 2 more, then the maximum
    assert rule.seeds(tmp_path, a, b) == range(100, 106)
    fill(0.01)
    fill(0.01)
    assert rule.seeds(tmp_path, a, b) == range(100, 108)
    narrow = tmp_path / "narrow"
    for s in range(100, 104):
        _record(narrow, a.run(s), 2.0)
        _record(narrow, b.run(s), 2.0 * (1 - 0.004 + 0.0001 * (-1) ** s))
    assert rule.seeds(narrow, a, b) == range(100, 104)  # narrow enough at the first block


def test_robust_study_declares_each_step_once_its_rule_decided(tmp_path):
    study = get_study("robust", tmp_path)
    assert len(study.runs) == 2 * len(PICK.grid) * len(PICK.seeds) and not study.main
    assert all(r.config().cpu_compile for r in study.runs)
    d4 = [Arm.of("cpu-w64-d4", cpu_compile=True), Arm.of("cpu-w64-d4", cpu_compile=True, xsa_alpha=1.0)]
    for arm, best in zip(d4, (0.045, 0.05)):
        _train_grid(tmp_path, PICK, arm, best)
    study = get_study("robust", tmp_path)
    primary = study.comparison("cpu-w64-d4 tuned")
    assert (primary.a.get("matrix_lr"), primary.b.get("matrix_lr")) == (0.04, 0.04)
    ids = {r.run_id for r in study.runs}
    assert {primary.a.run(s).run_id for s in range(100, 100 + PRECISION.first)} <= ids
    assert "cpu-w64-d4_xsa1-compiled-device_batch_size4-mlr0.04-seq1024_s105" in ids
    assert "cpu-w64-d4_xsa1-last2-compiled-mlr0.04_s100" in ids
    assert any(i.startswith("cpu-w128-d4_") for i in ids) and not any("cpu-w128-d4 tuned" == c.name for c in study.main)
    w128 = [Arm.of("cpu-w128-d4", cpu_compile=True), Arm.of("cpu-w128-d4", cpu_compile=True, xsa_alpha=1.0)]
    for arm in w128:
        _train_grid(tmp_path, PICK_HEADS, arm, 0.1)
    study = get_study("robust", tmp_path)
    assert study.comparison("cpu-w128-d4 tuned").b.get("matrix_lr") == 0.08
    assert study.comparison("heads") and study.comparison("last half vs all layers")


def test_seed_by_seed_orders_groups_of_unequal_seeds_without_an_index_error():
    # a group with fewer seeds ends earlier; the k-th seed of every group comes before the (k+1)-th of any
    from types import SimpleNamespace

    from xsa.studies.kinds import seed_by_seed, xsa_pair
    pair = xsa_pair("smoke")
    groups = [SimpleNamespace(seeds=range(3), pairs=lambda: {"p": pair}),
              SimpleNamespace(seeds=range(10, 11), pairs=lambda: {"p": pair})]
    assert [r.seed for r in seed_by_seed(groups)] == [0, 0, 10, 10, 1, 1, 2, 2]
