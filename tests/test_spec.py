"""The run spec (xsa/stack/spec.py) and the studies built from it (xsa/studies/registry.py)."""

import re
import shlex

import pytest

from xsa.stack.config import ConfigError, TrainConfig
from xsa.stack.presets import make_config
from xsa.base.records import REPO_ROOT, read_json
from xsa.stack.spec import Arm, Run
from xsa.studies.registry import STUDIES, get_study

from conftest import REPO


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_every_study_run_round_trips_and_is_unique(name):
    study = get_study(name)
    ids = [r.run_id for r in study.runs]
    assert len(ids) == len(set(ids)), "two runs of the study share a folder"
    for run in study.runs:
        cfg = run.config()
        assert Run.from_config(cfg) == run  # the inverse: the config diffed against its preset
        assert Run.from_config(TrainConfig.from_dict({**cfg.to_dict(), "data_dir": "/x"})) == run  # from disk
        assert Run.from_dict(run.to_dict()) == run  # what the pipeline hands notebook 01


def test_one_run_per_meaning():
    assert Run.of("cpu-w64-d4", xsa_alpha=1.0) == Run.of("cpu-w64-d4", xsa_alpha=1, xsa_layers="all")
    assert Run.of("cpu-w64-d4", xsa_layers="all") == Run.of("cpu-w64-d4", xsa_alpha=1.0)  # layers alone: alpha 1
    assert Run.of("cpu-w64-d4", matrix_lr=make_config("cpu-w64-d4").matrix_lr) == Run.of("cpu-w64-d4")  # no-op override
    assert Run.of("cpu-w64-d4", xsa_layers="0,0,1") == Run.of("cpu-w64-d4", xsa_layers=" 1,0")
    assert Run.of("cpu-w64-d4", xsa_layers="0,0,1").config().model.xsa_layers == "0,1"
    assert make_config("cpu-w64-d4", xsa_layers=" 1").config_hash() == make_config("cpu-w64-d4", xsa_layers="1").config_hash()


def test_alpha_zero_through_the_formula_is_its_own_arm():
    base, zero = Run.of("cpu-w64-d4"), Run.of("cpu-w64-d4", xsa_alpha=0.0)
    assert (base.run_id, zero.run_id) == ("cpu-w64-d4_base_s0", "cpu-w64-d4_xsa0_s0")
    assert zero.config().model.xsa_layer_set() and not base.config().model.xsa_layer_set()
    assert base.config().config_hash() != zero.config().config_hash()


def test_names_follow_one_rule():
    assert Run.of("cpu-w64-d4", seed=2, optimizer="adamw").run_id == "cpu-w64-d4_adamw_base_s2"
    assert Run.of("cpu-w64-d4", xsa_alpha=1.0, xsa_layers="last:2").run_id == "cpu-w64-d4_xsa1-last2_s0"
    assert Run.of("cpu-w64-d4", xsa_alpha=1.0, xsa_value="plain").run_id == "cpu-w64-d4_xsa1-plain_s0"
    assert Run.of("cpu-w64-d4", xsa_alpha=0.25).run_id == "cpu-w64-d4_xsa0.25_s0"
    assert Run.of("cpu-w64-d4", matrix_lr=0.04).run_id == "cpu-w64-d4_base-mlr0.04_s0"
    assert Arm.of("cpu-w64-d4").with_(xsa_alpha=1.0).with_(xsa_layers="none", xsa_alpha=0.0) == Arm.of("cpu-w64-d4")


def test_bad_overrides_name_the_field():
    with pytest.raises(ConfigError, match="learning_rate"):
        Run.of("cpu-w64-d4", learning_rate=1.0)
    with pytest.raises(ConfigError, match="xsa_value"):
        Run.of("cpu-w64-d4", xsa_value="plain")  # no XSA layer would use it
    with pytest.raises(ConfigError, match="run"):
        Run.from_dict({"overrides": {}})


def test_readme_study_table_agrees_with_the_default_study():
    """The README's table of the default study: its run counts add up to the study's runs, and
    every preset it names is one the study trains."""
    text = (REPO / "README.md").read_text()
    section = text.split("## The default study", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    body = [dict(zip(header, (c.strip() for c in r.strip("|").split("|")))) for r in rows[1:]]
    study = get_study("default")
    assert sum(int(r["runs"]) for r in body) == len(study.runs)
    named = {p for r in body for p in re.split(r",\s*", r["preset"])}
    assert named == set(study.presets())


def test_a_new_attention_variant_touches_config_attention_and_validation_only(monkeypatch, smoke_data, tmp_path):
    """A variant beside XSA: its name in config.XSA_VARIANTS, its function in attention.XSA_VARIANTS and
    (optionally) a check in validation.CHECKS. Nothing else changes: the validation stage decodes it
    with the KV cache, the run spec names it, training runs it, the pipeline's jobs and the report's
    loader take it, and its records name it."""
    import torch

    from xsa.stack import attention, config, model

    from xsa import pipeline, validation
    from xsa.report import load_run
    from xsa.train import train

    def damp(y, v, alpha):  # the trivial variant: scale the attention output down by alpha
        return (1 - alpha) * y

    def check_damp():
        y, v = validation._random_yv(0)
        return validation.Check("damp halves y at alpha 0.5", (damp(y, v, 0.5) - y / 2).abs().max().item(), 1e-6, "")

    monkeypatch.setattr(config, "XSA_VARIANTS", (*config.XSA_VARIANTS, "damp"))  # 1. config
    monkeypatch.setitem(attention.XSA_VARIANTS, "damp", damp)  # 2. attention
    monkeypatch.setattr(validation, "CHECKS", (*validation.CHECKS, check_damp))  # 3. validation
    checks = validation.run_checks()
    assert all(c.passed for c in checks) and "KV-cache decoding equals full forward (damp)" in {c.name for c in checks}

    run = Run.of("smoke", xsa_alpha=0.5, xsa_variant="damp")
    assert run.run_id == "smoke_damp0.5_s0" and Run.from_config(run.config()) == run
    calls = []
    monkeypatch.setitem(attention.XSA_VARIANTS, "damp", lambda y, v, a: calls.append(a) or damp(y, v, a))
    train(run.config(), tmp_path / run.run_id, data_dir=smoke_data, max_steps=2, progress=False)
    assert calls and set(calls) == {0.5}
    summary = read_json(tmp_path / run.run_id / "summary.json")
    assert (summary["arm"], summary["xsa_variant"], summary["xsa_alpha"]) == ("smoke_damp0.5", "damp", 0.5)
    assert load_run(tmp_path / run.run_id)["arm"] == "smoke_damp0.5"
    layout = pipeline.Layout(tmp_path, tmp_path / "paper", "smoke")
    assert layout.run_dir(run) == tmp_path / "runs" / run.run_id
    with torch.no_grad():  # and the variant really is what the model runs
        m = model.GPT(run.config().model)
        assert m.blocks[0].attn.xsa_variant == "damp"


def test_a_learnable_xsa_gate_is_a_config_field_a_parameter_and_an_adamw_group(smoke_data, tmp_path):
    """A variant with a learnable parameter: config.GPTConfig.xsa_gate (and its AdamW group in
    config.ADAM_GROUPS with betas and decay), the parameter in attention.CausalSelfAttention (a strength
    per head, initialised at alpha), its group in GPT.param_groups and its rate in optim.build_optimizers.
    The committed records predate all of it and stay the runs they were (tests/test_records_by_value.py)."""
    import torch

    from xsa.stack import model
    from xsa.stack.optim import build_optimizers
    from xsa.train import train

    run = Run.of("smoke", xsa_alpha=0.5, xsa_gate=True)
    assert run.run_id == "smoke_xsa0.5-gate_s0" and Run.from_config(run.config()) == run
    with pytest.raises(ConfigError, match="xsa_gate"):
        make_config("smoke", xsa_gate=True)  # no XSA layer to gate
    torch.manual_seed(0)
    gated = model.GPT(run.config().model)
    gated.init_weights()
    torch.manual_seed(0)
    fixed = model.GPT(make_config("smoke", xsa_alpha=0.5).model)
    fixed.init_weights()
    gates = [b.attn.xsa_gate for b in gated.blocks]
    assert all(g.shape == (2,) and torch.equal(g, torch.full((2,), 0.5)) for g in gates)
    fixed.load_state_dict({k: v for k, v in gated.state_dict().items() if "xsa_gate" not in k})
    x = torch.randint(0, 2048, (2, 32))
    with torch.no_grad():  # at its initial value the gate is the fixed alpha (another op order: 1e-6)
        assert torch.allclose(gated(x), fixed(x), rtol=0, atol=1e-5)
    adamw = build_optimizers(gated, run.config())[0]
    group = next(g for g in adamw.param_groups if g["name"] == "xsa_gate")
    assert group["params"] == gates and group["betas"] == (0.8, 0.95)
    train(run.config(), tmp_path / run.run_id, data_dir=smoke_data, max_steps=3, progress=False)
    from xsa.runs.load import load_model
    trained, _, _ = load_model(tmp_path / run.run_id)
    assert not torch.equal(trained.blocks[0].attn.xsa_gate.detach(), torch.full((2,), 0.5))  # it learns


# --- every run trained by hand ------------------------------------------------------------------

def _run_of_command(command: str):
    from xsa import train
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "xsa.train"]
    return train.run_of_args(train.parser().parse_args(argv[3:]))


def test_the_readme_command_of_a_robust_run_names_its_committed_folder():
    readme = (REPO_ROOT / "README.md").read_text()
    command = ("python -m xsa.train --preset cpu-w64-d4 --set cpu_compile=true --set matrix_lr=0.08 "
               "--alpha 1 --seed 100")
    assert command in " ".join(readme.split())
    run = _run_of_command(command)
    assert run.run_id == "cpu-w64-d4_xsa1-compiled-mlr0.08_s100"
    assert TrainConfig.from_dict(read_json(REPO_ROOT / "results" / "runs" / run.run_id / "config.json")) == run.config()


@pytest.mark.parametrize("study", ["default", "robust"])
def test_every_committed_run_of_a_study_is_trained_by_hand_into_its_folder(study):
    """Run.command(), parsed by python -m xsa.train, names the run's committed folder and trains
    its recorded config: every field a study sets has a command-line spelling."""
    runs = [r for r in get_study(study).runs if (REPO_ROOT / "results" / "runs" / r.run_id / "config.json").exists()]
    assert runs
    for run in runs:
        by_hand = _run_of_command(run.command())
        assert by_hand.run_id == run.run_id
        recorded = TrainConfig.from_dict(read_json(REPO_ROOT / "results" / "runs" / run.run_id / "config.json"))
        assert by_hand.config() == recorded


def test_train_refuses_a_field_given_twice_or_a_seed_by_set():
    from xsa import train
    for argv, message in ((["--set", "xsa_alpha=1", "--alpha", "1"], "give it once"),
                          (["--set", "seed=3"], "--seed"), (["--set", "matrix_lr"], "FIELD=VALUE"),
                          (["--set", "n_layer=3", "--set", "n_layer=4"], "given twice")):
        with pytest.raises(ValueError, match=message):
            train.run_of_args(train.parser().parse_args(["--preset", "smoke", *argv]))
    with pytest.raises(ConfigError, match="not_a_field"):
        train.run_of_args(train.parser().parse_args(["--preset", "smoke", "--set", "not_a_field=1"]))


def test_a_model_that_cannot_fit_is_refused_before_it_is_built():
    """A mistyped depth is an error naming it at once, not a process that grows for minutes."""
    import torch

    from xsa.stack.model import build
    from xsa.stack.presets import make_config
    huge = make_config("smoke", n_layer=99_999_999_999).model
    with pytest.raises(ConfigError, match="n_layer=99999999999.*GiB"):
        build(huge, 0, torch.device("cpu"))
    build(make_config("smoke").model, 0, torch.device("cpu"))  # a model that fits is built


def test_train_help_names_the_compiled_cpu_path():
    from xsa import train
    text = train.parser().format_help()
    assert "cpu (fp32, eager)" not in text and "cpu_compile" in text
