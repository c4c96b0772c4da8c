"""The README's "Extending" table, row by row: every file and hook a row names exists, and each row's
extension is made here through the files and hooks the row names. Nothing here trains; the rows'
other tests (named beside these in the table) train where it matters."""

import dataclasses
import importlib
import json
import re

import pytest
import torch

from xsa import prereg, validation
from xsa.layers import floor_of
from xsa.checks import run_schemas, schemas
from xsa.books import verdicts
from xsa.checks.metrics import METRICS, Metric
from xsa.base.records import REPO_ROOT
from xsa.stack import attention, config, model, optim, spec
from xsa.stack.config import GPTConfig, TrainConfig
from xsa.stack.presets import make_config
from xsa.stack.spec import Arm, Run
from xsa.studies import registry
from xsa.studies.scale import CHECKS, RateCheck
from xsa.studies.sink import sink_study
from xsa.train import parser, run_of_args

from test_house_rules import LAZY_REASONS, MAX_FUNCTION_LINES, MAX_MODULE_LINES
from test_model import running_mean
from test_wings import MAX_WING_FILES


def table_rows() -> dict[str, tuple[str, str]]:
    """{extension: (files, tests)}: the rows of the README's Extending table."""
    section = (REPO_ROOT / "README.md").read_text().split("## Extending", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 3 and cells[0] not in ("extension", "---"):
            rows[cells[0]] = (cells[1], cells[2])
    return rows


ROWS = table_rows()


def row(start: str) -> tuple[str, str]:
    return next(cells for name, cells in ROWS.items() if name.startswith(start))


ROOTS = ("xsa/", "paper/", "tests/", "results/")  # the folders a row names from the repository root


def named_files_and_hooks(files: str) -> list[tuple[str, str | None]]:
    """(repository path, hook or None) of every file a row names: `stack/model.py` is xsa/stack/model.py,
    `stack/config.XSA_VARIANTS` the name XSA_VARIANTS of xsa/stack/config.py; a path under one of ROOTS
    from the repository root. A placeholder (`studies/<name>.py`), a class's method (`Arm.of`) or code
    (`claim(key, word)`) names no file."""
    out = []
    for token in re.findall(r"`([^`]+)`", files):
        if re.fullmatch(r"[\w/]+\.(py|md\.j2|json)", token):
            out.append((token if token.startswith(ROOTS) else f"xsa/{token}", None))
        elif m := re.fullmatch(r"([a-z_/]+)\.([A-Za-z_]\w*)", token):
            if (REPO_ROOT / "xsa" / f"{m[1]}.py").exists() or "/" in m[1]:
                out.append((f"xsa/{m[1]}.py", m[2]))
    return out


def test_the_table_has_its_rows():
    assert len(ROWS) >= 10, list(ROWS)


@pytest.mark.parametrize("extension", list(ROWS), ids=lambda e: e[:40])
def test_every_file_and_hook_a_row_names_exists(extension):
    """A row that names a file that moved (the variants' functions left stack/model.py for
    stack/attention.py) or a hook a module no longer has fails here, naming it."""
    files, tests = ROWS[extension]
    named = named_files_and_hooks(files)
    assert named, f"{extension}: names no file"
    for path, hook in named:
        assert (REPO_ROOT / path).is_file(), f"{extension}: {path} does not exist"
        if hook:
            module = importlib.import_module(path[:-len(".py")].replace("/", "."))
            assert hasattr(module, hook), f"{extension}: {path} has no {hook}"
    assert "tests/test_extending.py::" in tests, f"{extension}: no test of this file backs it"


# --- a stateless attention variant ------------------------------------------------------------------

def test_a_stateless_variant_is_a_name_and_a_function(monkeypatch):
    """Its name in config.XSA_VARIANTS and its function in attention.XSA_VARIANTS: the run spec names
    it, the model runs it at the XSA layers, and the validation stage decodes it with the KV cache."""
    def damp(y, v, alpha):
        return (1 - alpha) * y
    monkeypatch.setattr(config, "XSA_VARIANTS", (*config.XSA_VARIANTS, "damp"))
    monkeypatch.setitem(attention.XSA_VARIANTS, "damp", damp)
    run = Run.of("smoke", xsa_alpha=0.5, xsa_variant="damp")
    assert run.run_id == "smoke_damp0.5_s0" and Run.from_config(run.config()) == run
    calls = []
    monkeypatch.setitem(attention.XSA_VARIANTS, "damp", lambda y, v, a: calls.append(a) or damp(y, v, a))
    gpt = model.GPT(run.config().model)
    with torch.no_grad():
        gpt(torch.zeros(1, 8, dtype=torch.long))
    assert calls == [0.5] * run.config().model.n_layer
    assert validation.check_kv_cache(variant="damp").passed


def test_a_variant_that_reads_other_tokens_is_off_by_what_the_row_says(monkeypatch):
    monkeypatch.setattr(config, "XSA_VARIANTS", (*config.XSA_VARIANTS, "running_mean"))
    monkeypatch.setitem(attention.XSA_VARIANTS, "running_mean", running_mean)
    measured = validation.check_kv_cache(variant="running_mean").measured
    assert f"logits off by {measured:.2f}" in row("a stateless attention variant")[0]


# --- attention arms with parameters of their own ----------------------------------------------------

def test_a_learnable_parameter_reaches_its_adamw_group_through_the_files_named():
    """xsa_gate and attn_sink, each a vector per layer: the field and its AdamW betas and decay
    (config), the parameter with its init and rate (attention.LEARNED, which model and optim read for
    its group), its label (spec), and its schema from its type (checks/run_schemas)."""
    for field, arm in (("xsa_gate", dict(xsa_alpha=0.5, xsa_gate=True)), ("attn_sink", dict(attn_sink=True))):
        cfg = make_config("smoke", **arm)
        gpt = model.GPT(cfg.model)
        params = [getattr(b.attn, field) for b in gpt.blocks]
        assert all(isinstance(p, torch.nn.Parameter) and p.ndim == 1 for p in params), field
        assert isinstance(gpt.blocks[0].attn, attention.CausalSelfAttention)
        assert gpt.param_groups()[field] == params
        group = next(g for g in optim.build_optimizers(gpt, cfg)[0].param_groups if g["name"] == field)
        assert group["params"] == params and group["lr"] > 0
        assert (group["betas"], group["weight_decay"]) == (cfg.adam_betas[field], cfg.adam_weight_decay[field])
        assert field in config.ADAM_GROUPS and field in run_schemas.MODEL["properties"]
        assert Run.of("smoke", **arm).run_id != Run.of("smoke", **{**arm, field: False}).run_id


def test_every_attention_field_names_its_arm(monkeypatch):
    """Every field of config.XSA_FIELDS leaves the run id's other-overrides part (spec.arm_name) and is
    labelled by the attention arm instead: each, set away from its default, names an arm of its own, so a
    field added there without its label in spec.py would give two arms one folder."""
    monkeypatch.setattr(config, "XSA_VARIANTS", (*config.XSA_VARIANTS, "other"))
    on = dict(xsa_alpha=1.0)
    changed = dict(xsa_alpha=0.5, xsa_layers="last:1", xsa_value="plain", xsa_variant="other", xsa_gate=True,
                   **{field: True for field in config.ARM_LABELS})
    assert set(changed) == set(config.XSA_FIELDS), "a new attention field: give it a value here"
    names = {Run.of("smoke", **on).run_id} | {Run.of("smoke", **{**on, k: v}).run_id for k, v in changed.items()}
    assert len(names) == len(changed) + 1, names
    assert set(spec.arm_record(make_config("smoke", attn_sink=True))) >= set(config.XSA_FIELDS)


def test_each_arm_of_the_sink_study_from_config_to_run_label_and_records():
    """The sink study's arms, each from its config to its run id (config.ARM_LABELS, and back), its config
    record (the schema of checks/run_schemas.py), its arm's fields in the diagnostics record
    (checks/schemas.py), the model it builds (the gate a block matrix, the sink a vector) and the
    validation checks with every arm on."""
    arms = {r.arm.name: r for r in sink_study().runs}
    mechanisms = {word: field for field, word in config.ARM_LABELS.items()}
    assert mechanisms == {"attngate": "attn_gate", "sink": "attn_sink"}
    seen = set()
    for name, run in arms.items():
        cfg = run.config()
        assert Run.from_config(cfg) == run
        assert schemas.problems("config", {**cfg.to_dict(), "data_dir": "/data"}, name) == []
        on = {field for word, field in mechanisms.items() if f"-{word}" in name}
        assert on == {field for field in mechanisms.values() if getattr(cfg.model, field)}, name
        seen |= on
        gpt = model.GPT(cfg.model)
        attn, groups = gpt.blocks[0].attn, gpt.param_groups()
        assert (attn.attn_gate is not None, attn.attn_sink is not None) == ("attn_gate" in on, "attn_sink" in on)
        if attn.attn_gate is not None:
            assert any(p is attn.attn_gate.weight for p in groups["matrix"])
        if attn.attn_sink is not None:
            assert any(p is attn.attn_sink for p in groups["attn_sink"])
    assert seen == set(mechanisms.values())
    assert set(mechanisms.values()) <= set(schemas.DIAGNOSTICS["properties"]) & set(run_schemas.MODEL["properties"])
    assert {validation.check_attention_arms_off, validation.check_sink_weight} <= set(validation.CHECKS)
    assert validation.ARMS_ON == {field: True for field in mechanisms.values()}


# the files of xsa/ that may name an attention arm's field: the field and its label (stack/config.py), its
# parameter, use, init and rate (stack/attention.py), a measure of its own and that measure's schema
# (diagnostics.py, checks/schemas.py), and the study that runs it (studies/sink.py); everything else
# reads the tables config.ARM_LABELS and attention.LEARNED
ARM_FILES = {"stack/config.py", "stack/attention.py", "diagnostics.py", "checks/schemas.py", "studies/sink.py"}
MAX_ARM_FILES = 5


def xsa_sources() -> dict[str, str]:
    """{path under xsa/: text} of every module of the package."""
    root = REPO_ROOT / "xsa"
    return {path.relative_to(root).as_posix(): path.read_text() for path in sorted(root.rglob("*.py"))}


def arm_spread(field: str, sources: dict[str, str]) -> list[str]:
    """What is wrong with where a field is named (as a word) among `sources`: each file beyond ARM_FILES,
    and more than MAX_ARM_FILES files in all. Empty where the field stays in its files."""
    named = sorted(path for path, text in sources.items() if re.search(rf"\b{field}\b", text))
    problems = [f"{field} is named in {path}, not a file of an attention arm" for path in named
                if path not in ARM_FILES]
    if len(named) > MAX_ARM_FILES:
        problems.append(f"{field} is named in {len(named)} files ({', '.join(named)}), more than {MAX_ARM_FILES}")
    return problems


def test_an_attention_arm_is_named_in_at_most_five_files():
    """A new way for a head to attend to nothing is its field and label (config), its parameter and its
    entry in attention.LEARNED: the run id, the init, the optimizer groups, the record schemas and the
    validation checks read those tables, so no other file names the field. A sixth file that does
    (here planted in stack/model.py and in a new module) fails, naming it."""
    sources = xsa_sources()
    assert len(ARM_FILES) <= MAX_ARM_FILES and all(path in sources for path in ARM_FILES)
    for field in config.ARM_LABELS:
        assert arm_spread(field, sources) == [], field
    planted = {**sources, "stack/model.py": sources["stack/model.py"] + "\n# init attn_sink here\n"}
    assert arm_spread("attn_sink", planted) == ["attn_sink is named in stack/model.py, not a file of an attention arm"]
    everywhere = {**{path: "attn_gate = True" for path in ARM_FILES}, "stack/arms.py": "x.attn_gate"}
    assert arm_spread("attn_gate", everywhere) == [
        "attn_gate is named in stack/arms.py, not a file of an attention arm",
        f"attn_gate is named in 6 files ({', '.join(sorted(everywhere))}), more than 5"]
    assert arm_spread("attn_gate", {"stack/model.py": "attn_gate_mean"}) == []  # a word, not a part of one


# --- a registered study with its own analysis code --------------------------------------------------

@pytest.mark.parametrize("study,package", [("sink", "xsa.studies.sink"), ("optimizer", "xsa.studies.optimizer"),
                                           ("factorial", "xsa.studies.factorial.")])
def test_every_study_with_analysis_code_has_its_modules_and_registrations(study, package, capsys):
    modules = ([f"{package}design", f"{package}analysis", f"{package}prereg"] if package.endswith(".")
               else [package, f"{package}_analysis", f"{package}_prereg"])
    for name in modules:
        importlib.import_module(name)
        assert floor_of(name) is not None, name
    assert study in registry.STUDIES and study in prereg.DOCUMENTS
    assert registry.get_study(study).name == study
    with pytest.raises(SystemExit):  # python -m xsa.prereg --study NAME takes it: the refusal lists it
        prereg.main(["--study", "not-a-study"])
    assert study in capsys.readouterr().err.split("choose from ", 1)[1]


# --- a new config field -----------------------------------------------------------------------------

@pytest.mark.parametrize("field,value,acts,label", [("cpu_compile", True, "xsa/stack/step.py", "compiled"),
                                                     ("diag_every", 2, "xsa/train.py", "diag2")])
def test_a_config_field_is_set_by_hand_acts_where_named_and_has_its_schema(field, value, acts, label):
    run = run_of_args(parser().parse_args(["--preset", "smoke", "--set", f"{field}={json.dumps(value)}"]))
    assert getattr(run.config(), field) == value and run.run_id == f"smoke_base-{label}_s0"
    assert re.search(rf"\bcfg\.{field}\b", (REPO_ROOT / acts).read_text()), f"{acts} reads no cfg.{field}"
    assert field in run_schemas.CONFIG["properties"]
    assert schemas.problems("config", {**run.config().to_dict(), "data_dir": "/data"}, "x") == []
    default = {f.name: f.default for f in dataclasses.fields(TrainConfig)}[field]
    assert Run.of("smoke", **{field: default}).run_id == "smoke_base_s0"  # the default: the old behaviour


def test_every_config_field_is_settable_by_hand():
    """`--set FIELD=VALUE` reaches every field but the run's name parts (preset, seed): nothing is
    added to the command line for a new field."""
    fields = {f.name for cls in (TrainConfig, GPTConfig) for f in dataclasses.fields(cls)} - {"preset", "seed", "model"}
    smoke = make_config("smoke")
    for field in fields:
        def value(cfg):
            return getattr(cfg.model if field in GPTConfig.__dataclass_fields__ else cfg, field)
        run = run_of_args(parser().parse_args(["--preset", "smoke", "--set", f"{field}={json.dumps(value(smoke))}"]))
        assert json.dumps(value(run.config())) == json.dumps(value(smoke)), field


# --- a new study arm with its own comparison --------------------------------------------------------

def test_a_new_arm_and_its_comparison_are_made_in_the_registry_alone(monkeypatch):
    base = Arm.of("smoke")
    arm = base.with_(xsa_alpha=1.0, xsa_layers="last:1")
    pair = registry.Paired("last layer vs baseline", base, arm)
    sweep = registry.Sweep.over("alpha", arm, "xsa_alpha", (0.5, 1.0), seed_arm=base)
    study = registry.Study(name="mine", scale="smoke scale", runs=tuple(a.run(s) for a in pair.arms() for s in (0, 1)),
                           main=(pair,), comparisons=(sweep, registry.Contrast("c", pair, pair)))
    monkeypatch.setitem(registry.STUDIES, "mine", lambda: study)
    got = registry.get_study("mine")
    assert got.comparison("alpha") is sweep and got.primary == "last layer vs baseline"
    assert [r.run_id for r in got.runs] == ["smoke_base_s0", "smoke_base_s1", "smoke_xsa1-last1_s0",
                                            "smoke_xsa1-last1_s1"]
    assert sweep.values() == [0.0, 0.5, 1.0]  # the baseline at its own alpha, then the sweep's


# --- a new module -----------------------------------------------------------------------------------

def test_the_module_rules_the_table_states_are_the_house_rules():
    files = row("a new module")[0]
    assert f"over {MAX_MODULE_LINES} lines" in files and f"function over {MAX_FUNCTION_LINES}" in files
    assert all(f"# lazy: {reason}" in files for reason in LAZY_REASONS)
    assert f"more than {MAX_WING_FILES} files" in files
    assert floor_of("xsa.not_placed") is None  # a wing on no floor: an error of the house rules
    assert floor_of("xsa.stack.attention") == floor_of("xsa.stack.timers") == floor_of("xsa.stack")  # a module of a wing


# --- a new evaluation metric ------------------------------------------------------------------------

def test_a_metric_entry_holds_what_the_table_names():
    """One Metric: name, label, header, unit, relative or absolute, where a run records it, and its
    place among the main table's columns (main)."""
    assert {f.name for f in dataclasses.fields(Metric)} >= {"name", "label", "header", "unit", "relative",
                                                             "recorded", "main"}
    new = Metric("x_rate", "x rate", "x", "share", False, "diagnostics.json:x_rate", main=9)
    assert (new.file, new.key) == ("diagnostics.json", "x_rate")
    assert all(m.file in ("summary.json", "eval.json", "diagnostics.json", "metrics.jsonl") for m in METRICS.values())
    places = [m.main for m in METRICS.values() if m.main]
    assert len(set(places)) == len(places)  # a place each


# --- a registered check of a scale level -------------------------------------------------------------

def test_a_rate_check_is_one_entry_registered_as_a_study_and_a_document():
    assert CHECKS and all(isinstance(c, RateCheck) for c in CHECKS)
    assert {f.name for f in dataclasses.fields(RateCheck)} >= {"name", "level", "preset", "key", "seeds", "final"}
    for check in CHECKS:
        assert check.name in registry.STUDIES and check.name in prereg.DOCUMENTS and check.name in registry.ADAPTIVE


# --- a new sentence or verdict ----------------------------------------------------------------------

def test_a_verdict_is_one_of_its_kinds_outcomes_and_the_template_picks_by_key():
    template = (REPO_ROOT / "paper" / "text" / "default.md.j2").read_text()
    assert "claim(" in template and ".verdict ==" in template
    with pytest.raises(ValueError, match="not one of"):
        verdicts._verdict("k", "direction", "sideways", "a rule")
    assert verdicts._verdict("k", "direction", "lowers", "a rule").verdict in verdicts.OUTCOMES["direction"]
