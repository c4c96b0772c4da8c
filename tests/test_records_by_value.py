"""Run records are compared by value: a config field added with a default that reproduces the old
behaviour (the rule in xsa/stack/config.py) keeps every committed run, its CORE and diagnostics records up
to date, and the report's tables byte-identical."""

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import xsa.stack.config as config
from xsa.studies.jobs import Context, is_done, jobs_for, recorded_config
from xsa.runs.layout import default_layout
from xsa.stack.presets import make_config
from xsa.base.records import REPO_ROOT, read_json
from xsa.stack.spec import Run
from xsa.studies.registry import get_study

RUNS = REPO_ROOT / "results" / "runs"
COMMITTED = sorted(p for p in RUNS.glob("*") if (p / "config.json").exists() and not p.name.startswith("smoke"))


def _patch_everywhere(monkeypatch, name, new):
    """Replace the class `name` in every xsa module that imported it (as a new field would)."""
    old = getattr(config, name)
    for mod in [m for k, m in list(sys.modules.items()) if k == "xsa" or k.startswith("xsa.")]:
        if getattr(mod, name, None) is old:
            monkeypatch.setattr(mod, name, new)


@pytest.fixture
def new_fields(monkeypatch):
    """Today's configs with one more model field, one more training field and one more AdamW group
    (a per-head gate, say), each defaulting to what the code did before it existed."""
    betas, decay = (config.TrainConfig.__dataclass_fields__[k].default_factory() for k in ("adam_betas", "adam_weight_decay"))

    @dataclass(frozen=True)
    class GPTConfig(config.GPTConfig):
        probe_gate: bool = False

    @dataclass(frozen=True)
    class TrainConfig(config.TrainConfig):
        probe_field: int = 0
        adam_betas: dict = field(default_factory=lambda: {**betas, "probe_gate": (0.8, 0.95)})
        adam_weight_decay: dict = field(default_factory=lambda: {**decay, "probe_gate": 0.0})

    monkeypatch.setattr(config, "ADAM_GROUPS", (*config.ADAM_GROUPS, "probe_gate"))
    for recipe in config.RECIPES.values():  # a recipe that sets every group (built over ADAM_GROUPS) has it too
        for key, default in (("adam_betas", (0.8, 0.95)), ("adam_weight_decay", 0.0)):
            if key in recipe["train"]:
                monkeypatch.setitem(recipe["train"], key, {**recipe["train"][key], "probe_gate": default})
    old = {"GPTConfig": config.GPTConfig, "TrainConfig": config.TrainConfig}
    _patch_everywhere(monkeypatch, "GPTConfig", GPTConfig)
    _patch_everywhere(monkeypatch, "TrainConfig", TrainConfig)
    assert "probe_field" in make_config("cpu-w64-d4").to_dict()  # the patch took
    yield TrainConfig
    # a module first imported during the test took the patched class from config: give it back today's
    for mod in [m for k, m in list(sys.modules.items()) if k == "xsa" or k.startswith("xsa.")]:
        for name, new in (("GPTConfig", GPTConfig), ("TrainConfig", TrainConfig)):
            if getattr(mod, name, None) is new:
                setattr(mod, name, old[name])


def test_committed_runs_read_back_as_the_run_their_folder_names():
    assert len(COMMITTED) >= 84
    for d in COMMITTED:
        cfg = config.TrainConfig.from_dict(read_json(d / "config.json"))
        assert Run.from_config(cfg).run_id == d.name
        assert cfg == Run.from_config(cfg).config()


def test_a_record_may_predate_fields_but_not_know_more():
    rec = read_json(COMMITTED[0] / "config.json")
    short = {k: v for k, v in rec.items() if k not in ("muon_eq", "gpu_path")}
    short["adam_betas"] = {k: v for k, v in rec["adam_betas"].items() if k != "smear"}
    assert config.TrainConfig.from_dict(short) == config.TrainConfig.from_dict(rec)  # defaults and recipe values filled in
    with pytest.raises(config.ConfigError, match="not_a_field"):
        config.TrainConfig.from_dict({**rec, "not_a_field": 1})
    with pytest.raises(config.ConfigError, match="model.wings"):
        config.TrainConfig.from_dict({**rec, "model": {**rec["model"], "wings": 2}})


@pytest.mark.slow
def test_a_new_defaulted_field_keeps_every_committed_record(new_fields, tmp_path):
    study = get_study("default")
    assert make_config("cpu-w64-d4").config_hash() != read_json(COMMITTED[0] / "provenance.json")["config_hash"]
    for run in study.runs:  # every run of the study, read back by value, is the run the study asks for
        assert recorded_config(RUNS / run.run_id) == run.config()
    ctx = Context(study, default_layout(), REPO_ROOT / "notebooks")
    counts = {stage: sum(is_done(job, ctx) for job in jobs_for(stage, ctx)) for stage in ("train", "evaluate", "diagnostics")}
    assert counts == {"train": len(study.runs), "evaluate": 40, "diagnostics": len(study.runs)}

    from xsa import report
    report.build(study, REPO_ROOT / "results", out_dir=tmp_path)
    committed = REPO_ROOT / "results" / "tables"
    built = sorted(p.name for p in (tmp_path / "tables").iterdir())
    assert built == sorted(p.name for p in committed.iterdir())
    for name in built:
        assert (tmp_path / "tables" / name).read_bytes() == (committed / name).read_bytes(), name
