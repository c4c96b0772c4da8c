"""The scale study (xsa/studies/scale.py) as its rules decide it: what it declares before any record, in
the pre-registered priority order; the pairs a bracket's selection declares; the levels it reuses; and
its pre-registration, generated from the committed definition."""

from pathlib import Path

from xsa.studies.rules import final_bpb
from xsa.studies.predict import declared_seeds, model_conditions
from xsa.base.records import append_jsonl, atomic_write_json
from xsa.studies.scale import PAIRS, ROBUST_PRIMARY_SEEDS, SELECT, gate_arm
from xsa.studies.registry import get_study


def record(results, run, bpb):
    """A finished run's summary, all the rules read (xsa/studies/rules.py final_bpb)."""
    d, n = results / "runs" / run.run_id, run.config().num_iterations
    atomic_write_json(d / "config.json", run.config().to_dict())
    append_jsonl(d / "metrics.jsonl", {"step": n, "val_bpb": bpb})
    atomic_write_json(d / "summary.json", dict(complete=True, val_bpb=bpb, steps=n, num_iterations=n))


def bowl(results, runs, best):
    """Records of bracket runs whose mean val bpb is lowest at matrix LR `best`."""
    for r in runs:
        lr = r.config().matrix_lr
        record(results, r, 2.0 + (0.0 if lr == best else 0.01 * abs(lr - best) / best) + 1e-4 * r.seed)


def test_before_any_record_the_brackets_come_first_and_the_decided_levels_are_declared(tmp_path):
    study = get_study("scale", tmp_path)
    first = study.runs[:12]
    assert {r.preset for r in first} == {"cpu-w64-d4-s1536"} and {r.seed for r in first} == set(SELECT.seeds)
    assert sorted({r.config().matrix_lr for r in first}) == [0.04, 0.08, 0.16]
    # then the head brackets, before any pair of a level that waits for them
    heads = [r.config().model.n_head for r in study.runs[12:36]]
    assert set(heads) == {1, 8} and all(r.preset == "cpu-w128-d4" for r in study.runs[12:36])
    assert set(study.pending) == {"length x4", "length x2", "heads 1", "heads 4", "heads 8", "gate at 8 heads"}
    names = [c.name for c in (*study.main, *study.comparisons)]
    assert names[:2] == ["length x1/3", "length x1"] and "width 256, length" in names
    # the width-256 pairs come last (lowest priority)
    assert study.runs[-1].preset == "cpu-w256-d4"


def test_a_bracket_selection_declares_its_pairs_and_the_levels_that_borrow_it(tmp_path):
    for _ in range(2):  # XSA's best, 0.04, is the bracket's edge: the rule extends it to 0.02 first
        study = get_study("scale", tmp_path)
        x4_bracket = [r for r in study.runs if r.preset == "cpu-w64-d4-s1536" and r.seed in SELECT.seeds]
        base = [r for r in x4_bracket if r.config().model.xsa_layers == "none"]
        bowl(tmp_path, base, 0.08)
        bowl(tmp_path, [r for r in x4_bracket if r not in base], 0.04)
    assert {r.config().matrix_lr for r in x4_bracket} == {0.02, 0.04, 0.08, 0.16}
    study = get_study("scale", tmp_path)
    x4, x2 = study.comparison("length x4"), study.comparison("length x2")
    assert (x4.a.get("matrix_lr"), x4.b.get("matrix_lr")) == (0.08, 0.04)
    assert (x2.a.get("matrix_lr"), x2.b.get("matrix_lr")) == (0.08, 0.04)  # x2 borrows x4's selection
    assert declared_seeds(study, x4) == set(range(210, 218))  # the precision rule's first block
    i = study.runs.index(x4.a.run(210))
    assert i == 14  # the primary's pairs train right after its bracket (14 runs with the extension)
    assert "length x4" not in study.pending and "heads 1" in study.pending


def test_selection_seeds_never_enter_an_estimate_and_reused_levels_keep_their_seeds(tmp_path):
    study = get_study("scale", tmp_path)
    x1 = study.comparison("length x1")
    assert declared_seeds(study, x1) == set(ROBUST_PRIMARY_SEEDS)
    assert declared_seeds(study, study.comparison("length x1/3")) == set(PAIRS)
    # an x4 arm at its selected LR shares seeds 200-201 with the bracket: they stay out
    x4_bracket = [r for r in study.runs if r.preset == "cpu-w64-d4-s1536"]
    bowl(tmp_path, x4_bracket, 0.08)
    study = get_study("scale", tmp_path)
    assert not declared_seeds(study, study.comparison("length x4")) & set(SELECT.seeds)


def test_the_gate_starts_at_zero_beside_its_fixed_alpha_arm():
    study = get_study("scale", Path("/nonexistent"))
    g = study.comparison("gate at width 64")
    assert g.b == gate_arm(g.a) and g.b.name.startswith("cpu-w64-d4_xsa0-gate")
    m = g.b.config().model
    assert m.xsa_gate and m.xsa_alpha == 0.0 and m.xsa_layers == "all"


def test_the_model_reads_the_robust_levels_from_the_committed_records():
    from xsa.base.records import REPO_ROOT
    results = REPO_ROOT / "results"
    conds = {c.name: c for c in model_conditions(results)}
    x1 = conds["length x1"]
    assert x1.n == 20 and x1.heads == 1 and abs(x1.tokens_per_param - 3.428) < 1e-3
    robust = get_study("robust", results).comparison("cpu-w64-d4 tuned")
    by_hand = [(final_bpb(results, robust.b.run(s)) - final_bpb(results, robust.a.run(s)))
               / final_bpb(results, robust.a.run(s)) for s in ROBUST_PRIMARY_SEEDS]
    assert list(x1.diffs) == by_hand
    assert conds["cpu-w64-d4 tuned T=1024"].seq_len == 1024 and conds["heads 2"].heads == 2


def test_the_committed_preregistration_is_the_generated_one():
    from xsa.prereg import FILENAME
    from xsa.studies.prereg_scale import scale_document
    from xsa.base.records import REPO_ROOT
    results = REPO_ROOT / "results"
    assert (results / "scale" / FILENAME).read_text() == scale_document(results)


def test_the_d12_test_trains_the_predicted_condition_under_its_precision_rule(tmp_path):
    from xsa.studies.predict import TARGETS
    from xsa.stack.presets import scaling_params
    from xsa.stack.spec import Run
    study = get_study("d12-test", tmp_path)
    assert len(study.runs) == 16 and {r.seed for r in study.runs} == {0, 1, 2, 3}  # both arms at two rates
    cfg = study.runs[0].config()
    target = TARGETS["d12"]
    assert (cfg.model.n_head, cfg.model.head_dim, cfg.model.sequence_len) == (target["heads"], 64, target["seq_len"])
    assert abs(cfg.num_tokens / scaling_params(cfg.model) - target["tokens_per_param"]) < 0.01
    # another recipe is named by its name alone, and the name reads back
    assert study.runs[1].run_id == "d12_xsa1-nanochat-324e69c_s0"
    assert Run.from_config(study.runs[1].config()) == study.runs[1]
    # four noisy seeds (at both rates): the rule adds four more
    for pair in study.main:
        for s, d in zip(range(4), (-0.01, 0.01, -0.02, 0.015)):
            record(tmp_path, pair.a.run(s), 0.85)
            record(tmp_path, pair.b.run(s), 0.85 * (1 + d))
    assert {r.seed for r in get_study("d12-test", tmp_path).runs} == set(range(8))


def test_the_x4_check_trains_each_arm_at_the_other_arms_rate_once_the_bracket_has_selected(tmp_path):
    assert get_study("scale-check", tmp_path).runs == ()  # nothing before the x4 bracket has selected
    for _ in range(2):  # XSA's best, 0.04, is the bracket's edge: extended to 0.02 first
        x4_bracket = [r for r in get_study("scale", tmp_path).runs if r.preset == "cpu-w64-d4-s1536"
                      and r.seed in SELECT.seeds]
        base = [r for r in x4_bracket if r.config().model.xsa_layers == "none"]
        bowl(tmp_path, base, 0.08)
        bowl(tmp_path, [r for r in x4_bracket if r not in base], 0.04)
    check = get_study("scale-check", tmp_path)
    # the baseline at XSA's rate first, then XSA at the baseline's, on the x4 level's first eight pairs
    assert [(r.config().model.xsa_layers, r.config().matrix_lr) for r in check.runs[::8]] == [("none", 0.04), ("all", 0.08)]
    assert [r.seed for r in check.runs] == list(PAIRS) * 2
    pairs = {c.name: (c.a.get("matrix_lr"), c.b.get("matrix_lr"), c.a.get("xsa_layers"), c.b.get("xsa_layers"))
             for c in (*check.main, *check.comparisons)}
    assert pairs == {"x4, both at XSA's rate": (0.04, 0.04, "none", "all"),
                     "x4 baseline, XSA's rate against its own": (0.08, 0.04, "none", "none"),
                     "x4, both at the baseline's rate": (0.08, 0.08, "none", "all"),
                     "x4 XSA, the baseline's rate against its own": (0.04, 0.08, "all", "all")}
    # its other arms are the x4 level's own runs, so the check adds no second copy of them
    x4 = get_study("scale", tmp_path).comparison("length x4")
    assert check.comparison("x4 baseline, XSA's rate against its own").a == x4.a and check.main[0].b == x4.b


def test_the_committed_x4_check_registration_is_the_generated_one():
    from xsa.prereg import FILENAME
    from xsa.studies.prereg_check import check_document
    from xsa.base.records import REPO_ROOT
    results = REPO_ROOT / "results"
    from xsa.studies.scale import CHECKS
    assert (results / "scale-check" / FILENAME).read_text() == check_document(results, CHECKS[0])


def test_a_check_of_a_level_whose_arms_selected_one_rate_is_that_levels_pairs_and_is_whole(tmp_path):
    """Made up: both arms of x4 select 0.08. The level is then at the common rate already: the x4 check
    trains nothing of its own, its one comparison is the level's pair on its seeds, nothing is pending,
    and it is whole once those records exist (a state it can be marked final in)."""
    from xsa.studies.kinds import Paired
    x4_bracket = [r for r in get_study("scale", tmp_path).runs if r.preset == "cpu-w64-d4-s1536"
                  and r.seed in SELECT.seeds]
    bowl(tmp_path, x4_bracket, 0.08)
    level = get_study("scale", tmp_path).comparison("length x4")
    assert level.a.get("matrix_lr") == level.b.get("matrix_lr") == 0.08
    check = get_study("scale-check", tmp_path)
    assert not check.pending and check.comparisons == () and check.main == (Paired("x4, both at XSA's rate", *level.arms()),)
    assert [r.run_id for r in check.runs] == [a.run(s).run_id for a in level.arms() for s in PAIRS]
    assert {r.run_id for r in check.runs} <= {r.run_id for r in get_study("scale", tmp_path).runs}  # the level's own
    for run in check.runs:
        record(tmp_path, run, 2.0)
    assert all(final_bpb(tmp_path, r) is not None for r in get_study("scale-check", tmp_path).runs)
