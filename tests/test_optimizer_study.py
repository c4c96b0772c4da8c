"""The optimizer study (xsa/studies/optimizer.py): its selection rule on synthetic records (a grid
extended at an edge, upward while the largest rate loses less than 10%, a diverged run at its initial
val bpb), the divergence record as the pipeline reads it, LR sensitivity by hand, its registration from an
empty results folder, and the reuse of the robust study's Muon records by run id."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

import xsa.stack.model
from xsa.runs.diverged import FILENAME, read_diverged, write_diverged
from xsa.studies.jobs import Context, Job, is_done
from xsa.stack.presets import make_config
from xsa.stack.spec import Arm
from xsa.studies import optimizer as O
from xsa.studies.optimizer_analysis import estimates, figure, sensitivity, sensitivity_estimate
from xsa.studies.optimizer_prereg import optimizer_document
from xsa.studies.registry import get_study
from xsa.studies.rules import SweepRule, capped_bpb
from xsa.train import TrainingDiverged, train

ARM = Arm.of("smoke")
INITIAL = 3.0


def record(results: Path, run, final: float | None, initial: float = INITIAL, diverged_at: int | None = None):
    """A run folder as training leaves it: the step-0 evaluation, then a summary or a divergence record."""
    folder = results / "runs" / run.run_id
    folder.mkdir(parents=True, exist_ok=True)
    lines = [{"step": 0, "val_bpb": initial}, {"step": 1, "train_loss": 5.0}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if diverged_at is not None:
        write_diverged(folder, diverged_at, "train loss is nan", run.config().to_dict())
    else:
        (folder / "summary.json").write_text(json.dumps({"complete": True, "val_bpb": final, "steps": 384}))


def fill(results: Path, rule: SweepRule, values: dict[float, float]):
    for lr, v in values.items():
        for s in rule.seeds:
            record(results, rule.at(ARM, lr).run(s), v)


def test_grid_is_extended_down_while_the_best_is_at_its_lower_end(tmp_path):
    r = SweepRule((0.01, 0.02, 0.04), seeds=(0, 1))
    fill(tmp_path, r, {0.01: 2.0, 0.02: 2.1, 0.04: 2.5})
    assert r.state(tmp_path, ARM) == ([0.005, 0.01, 0.02, 0.04], None)  # pending: the new point
    assert [x.seed for x in r.runs(tmp_path, ARM)[:4]] == [0, 0, 0, 0]  # seed by seed
    fill(tmp_path, r, {0.005: 2.2})
    assert r.state(tmp_path, ARM) == ([0.005, 0.01, 0.02, 0.04], 0.01)


def test_grid_is_extended_up_while_the_top_rate_loses_less_than_ten_percent(tmp_path):
    r = SweepRule((0.01, 0.02, 0.04), seeds=(0, 1))
    fill(tmp_path, r, {0.01: 2.2, 0.02: 2.0, 0.04: 2.1})  # best inside, top only 5% worse
    assert r.state(tmp_path, ARM) == ([0.01, 0.02, 0.04, 0.08], None)
    fill(tmp_path, r, {0.08: 2.15})  # still less than 10% above 2.0: once more, the last time
    assert r.state(tmp_path, ARM)[0] == [0.01, 0.02, 0.04, 0.08, 0.16]
    fill(tmp_path, r, {0.16: 2.18})
    assert r.state(tmp_path, ARM) == ([0.01, 0.02, 0.04, 0.08, 0.16], 0.02)  # at most two extensions


def test_a_diverged_run_counts_at_its_initial_val_bpb(tmp_path):
    r = SweepRule((0.01, 0.02, 0.04), seeds=(0, 1))
    fill(tmp_path, r, {0.01: 2.2, 0.02: 2.0})
    record(tmp_path, r.at(ARM, 0.04).run(0), 2.1)
    assert r.state(tmp_path, ARM)[1] is None  # seed 1 at 0.04 pending
    record(tmp_path, r.at(ARM, 0.04).run(1), None, diverged_at=7)
    assert capped_bpb(tmp_path, r.at(ARM, 0.04).run(1)) == INITIAL
    assert r.means(tmp_path, ARM, [0.04])[0.04] == pytest.approx((2.1 + INITIAL) / 2)
    assert r.state(tmp_path, ARM) == ([0.01, 0.02, 0.04], 0.02)  # the top now loses more than 10%


def test_a_final_above_the_initial_counts_at_the_initial(tmp_path):
    run = ARM.run(0)
    record(tmp_path, run, 3.5)
    assert capped_bpb(tmp_path, run) == INITIAL


def test_divergence_record_is_done_for_the_pipeline(tmp_path):
    run = ARM.run(3)
    folder = tmp_path / run.run_id
    job = Job("train", run.run_id, dict(run=run.to_dict(), out_dir=str(folder), resume=False, overwrite=False),
              [folder / "summary.json"])
    ctx = Context(study=None, layout=None, notebooks=tmp_path)
    assert not is_done(job, ctx)
    write_diverged(folder, 12, "non-finite weights", run.config().to_dict(), run.config().config_hash())
    got = read_diverged(folder)
    assert got["step"] == 12 and got["reason"] == "non-finite weights" and got["config"] == run.config().to_dict()
    assert is_done(job, ctx)
    assert not is_done(job, Context(study=None, layout=None, notebooks=tmp_path, force=True))
    write_diverged(folder, 12, "non-finite weights", ARM.run(4).config().to_dict())  # another config's
    assert not is_done(job, ctx)
    assert read_diverged(tmp_path / "none") is None


def test_training_writes_the_divergence_record_and_a_rerun_drops_it(smoke_data, tmp_path, monkeypatch):
    orig = xsa.stack.model.GPT.forward

    def poisoned(self, idx, targets=None, **kw):
        out = orig(self, idx, targets, **kw)
        return out * float("nan") if self.training and targets is not None else out
    cfg = make_config("smoke", eval_every=1000, checkpoint_every=5, num_tokens=8 * 8192)
    with monkeypatch.context() as m:
        m.setattr(xsa.stack.model.GPT, "forward", poisoned)
        with pytest.raises(TrainingDiverged):
            train(cfg, tmp_path / "r", data_dir=smoke_data, progress=False)
    got = read_diverged(tmp_path / "r")
    assert got["step"] >= 1 and "nan" in got["reason"] and got["config_hash"] == cfg.config_hash()
    assert not (tmp_path / "r" / "summary.json").exists()
    train(cfg, tmp_path / "r", data_dir=smoke_data, progress=False, overwrite=True)
    assert not (tmp_path / "r" / FILENAME).exists() and (tmp_path / "r" / "summary.json").exists()


def test_sensitivity_by_hand():
    values = {0.01: {0: 2.0, 1: 2.2}, 0.02: {0: 1.8, 1: 1.8}, 0.04: {0: 3.0, 1: 3.0}}
    # means 2.1, 1.8, 3.0; best 1.8; excess 0.3, 0, 1.2
    assert sensitivity(values, [0, 1]) == pytest.approx(0.5)
    assert sensitivity(values, [0, 0]) == pytest.approx((0.2 + 0 + 1.2) / 3)
    est = sensitivity_estimate(values, values, [0, 1])
    assert est["base"]["value"] == pytest.approx(0.5) and est["change"]["value"] == 0
    assert est["base"]["lo"] <= 0.5 <= est["base"]["hi"] and est["change"]["p"] == 1.0
    flatter = {lr: {s: v - (v - 1.8) / 2 for s, v in per.items()} for lr, per in values.items()}
    est = sensitivity_estimate(values, flatter, [0, 1])
    assert est["change"]["value"] < 0 and est["change"]["hi"] < 0 and est["change"]["p"] == 0.0


def test_document_and_estimates_from_an_empty_results_folder(tmp_path):
    text = optimizer_document(tmp_path)
    assert text.startswith("# Pre-registration: the `optimizer` study") and "Holm" in text
    e = estimates(tmp_path)
    json.dumps(e)
    assert e["counts"]["finished"] == 0 and e["counts"]["declared"] == len(O.optimizer_study(tmp_path).runs)
    assert e["family"]["interaction"]["p_holm"] is None
    assert figure(tmp_path, tmp_path / "fig").exists() and (tmp_path / "fig" / f"{'optimizer_lr'}.svg").exists()


def test_first_step_declares_every_grid_seed_by_seed_and_w64_first(tmp_path):
    study = O.optimizer_study(tmp_path)
    assert len(study.runs) == 2 * 2 * 7 * (3 + 2) and not study.main
    presets = [r.preset for r in study.runs]
    assert presets.index("cpu-w128-d4") == 2 * 2 * 7 * 3
    adamw = [r for r in study.runs if r.config().optimizer == "adamw"]
    assert {r.config().adamw_matrix_lr for r in adamw} == set(O.GRIDS["adamw"])
    assert all(r.config().cpu_compile for r in study.runs)


def test_robust_muon_records_are_reused_by_run_id(tmp_path):
    robust = {r.run_id for r in get_study("robust").runs}
    ours = {r.run_id for r in O.optimizer_study(tmp_path).runs}
    for preset, seeds in O.SELECTION_SEEDS.items():
        for arm in O.pair("muon", preset).arms():
            for lr in (0.02, 0.04, 0.08, 0.16):
                ids = {O.rule("muon", preset).at(arm, lr).run(s).run_id for s in seeds}
                assert ids <= ours and ids <= robust, (preset, lr)
    tuned, common = O.estimation_pairs("muon", {"base": 0.08, "xsa": 0.08})
    primary = get_study("robust").comparison("cpu-w64-d4 tuned")
    assert tuned.arms() == primary.arms() and common.arms() == primary.arms()
    assert {x.run(s).run_id for s in O.TUNED_SEEDS for x in tuned.arms()} <= robust
    assert math.isclose(tuned.a.get("matrix_lr"), 0.08)


def plant_study(results: Path, effects: dict | None = None, noise: float = 0.001) -> None:
    """Records for every run the study declares, declared round by round as its rules decide, until it
    declares no more: each optimizer's loss a bowl in log2 of its rate around its best (Muon 0.04, AdamW
    0.002), XSA `effects[optimizer]` below the baseline (-0.6% under both by default), and each run's own
    noise of relative SD `noise`."""
    effects = effects or {"muon": -0.006, "adamw": -0.006}
    best = {"muon": 0.04, "adamw": 0.002}
    for _ in range(20):
        study = O.optimizer_study(results)
        todo = [r for r in study.runs if not (results / "runs" / r.run_id).exists()]
        if not todo:
            assert not study.pending, study.pending
            return
        for r in todo:
            cfg = r.config()
            lr = cfg.matrix_lr if cfg.optimizer == "muon" else cfg.adamw_matrix_lr
            v = (2.0 + 0.05 * math.log2(lr / best[cfg.optimizer]) ** 2) * (1 + random.Random(r.run_id).gauss(0, noise))
            record(results, r, v * (1 + effects[cfg.optimizer]) if cfg.model.xsa_alpha else v)
    raise AssertionError("the study kept declaring runs")
