"""Every record the paper reads matches the schema of its kind (xsa/checks/schemas.py): each committed
record passes, and a planted bad value of each kind is refused naming its file and field, never in a
traceback; the paper stage's record check (integrity.py) reports the same problems and stops. The GPU
quick check's record is checked on one its writer wrote (tests/data/gpu_quick_check_dry.json, from
`python -m xsa.gpu_check --quick --dry`), the archive manifest on xsa/archive.sha256. A run's config.json
and every line of its metrics.jsonl are checked too (xsa/checks/run_schemas.py): the lines by the quick
test of xsa/checks/schema_parts.py, which must never pass a line the validator refuses."""

import copy
import dataclasses
import fnmatch
import hashlib
import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from xsa import report
from xsa.stack.config import RECORD_EXTRAS, GPTConfig, TrainConfig
from xsa.stack.presets import PRESETS, make_config
from xsa.base.records import REPO_ROOT
from xsa.checks import integrity, run_schemas, schema_parts, schemas
from xsa.checks.integrity import archive_problems, validate
from xsa.studies.registry import get_study

# where each kind of record is committed (an archived study's runs are run records too)
COMMITTED = {"summary": ("results/runs/*/summary.json", "results/archive/*/runs/*/summary.json"),
             "provenance": ("results/runs/*/provenance.json", "results/archive/*/runs/*/provenance.json"),
             "throughput": ("results/throughput/*.json",),
             "estimates": ("results/estimates/*.json",),
             "eval": ("results/runs/*/eval.json", "results/chat_check/*.json"),  # CORE; ChatCORE
             "diagnostics": ("results/runs/*/diagnostics.json",),
             "config": ("results/runs/*/config.json", "results/archive/*/runs/*/config.json")}
RUN = "cpu-w64-d4_xsa1_s3"  # a scored run of the default study's primary comparison
CHAT = "results/chat_check/cpu-w64-d4_base_s0.json"  # the committed ChatCORE record (with its SFT)
SOURCES = {"summary": f"results/runs/{RUN}/summary.json", "provenance": f"results/runs/{RUN}/provenance.json",
           "throughput": "results/throughput/cpu-w64-d4.json", "estimates": "results/estimates/robust.json",
           "eval": f"results/runs/{RUN}/eval.json", "chat": CHAT, "diagnostics": f"results/runs/{RUN}/diagnostics.json",
           "gpu_check": "tests/data/gpu_quick_check_dry.json", "config": f"results/runs/{RUN}/config.json"}
KIND = {"chat": "eval"}  # a source's kind, where its name is not one
BIG = "9" * 300  # a 300-digit number


def committed(kind: str) -> list[str]:
    files = subprocess.run(["git", "ls-files", "results"], cwd=REPO_ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    return [f for f in files if any(fnmatch.fnmatch(f, p) for p in COMMITTED[kind])]


def test_the_schemas_are_json_schemas():
    for schema in schemas.SCHEMAS.values():
        schemas.Validator.check_schema(schema)


@pytest.mark.parametrize("kind", sorted(COMMITTED))
def test_every_committed_record_of_each_kind_passes(kind):
    files = committed(kind)
    assert len(files) >= {"summary": 100, "provenance": 100, "diagnostics": 100, "eval": 40,
                          "config": 400}.get(kind, 4), files
    assert [p for f in files for p in schemas.check_file(kind, REPO_ROOT / f)] == []


def test_a_field_a_writer_leaves_null_passes():
    prov = json.loads((REPO_ROOT / SOURCES["provenance"]).read_text())
    prov.update(git_commit=None, git_dirty=None, wall_time_s=None, cpu_time_s=None, seed=None)
    assert schemas.problems("provenance", prov, "provenance.json") == []
    summary = json.loads((REPO_ROOT / SOURCES["summary"]).read_text())
    summary.update(tok_per_s=None, mfu=None, learned_gates=None, train_loss_final=None, new_field={"x": 1})
    assert schemas.problems("summary", summary, "summary.json") == []
    ev = json.loads((REPO_ROOT / SOURCES["eval"]).read_text())  # a language-modelling task has no margin
    ev.update(core_margin_bpb=None, core_bpb=None)
    ev["tasks"]["arc_easy"].update(margin_bpb=None, correct_bpb=None)
    ev["core_detail"].update(max_per_task=None, trained={"step": None, "num_iterations": None, "complete": False})
    assert schemas.problems("eval", ev, "eval.json") == []
    chat = json.loads((REPO_ROOT / CHAT).read_text())  # a ChatCORE record alone, as evaluate_run_chat writes one
    assert "core" not in chat and schemas.problems("eval", chat, "eval.json") == []


def gpu_record() -> dict:
    """The dry record as a GPU writes it: the GPU's memory and capability, CUDA and triton versions, peak
    memory in bytes (or out of memory), the datasheet's peak, a part that raised, parts that found NaN."""
    rec = json.loads((REPO_ROOT / SOURCES["gpu_check"]).read_text())
    parts = rec["parts"]
    parts["versions"].update(cuda="12.8", triton="3.5.0", gpu_memory_bytes=150_000_000_000, capability="9.0",
                             device="NVIDIA H200", device_type="cuda", datasheet_peak_flops=989e12)
    parts["timing"].update(baseline_mfu_datasheet=0.31, xsa_mfu_datasheet=0.3, timer="CUDA events")
    parts["memory"] = {"ok": True, "seconds": 40.2, "peak_mem_bytes": {"d12@32": 61_000_000_000,
                                                                        "d24-nanochat@16": "out of memory"}}
    parts["resume"].update(lost_state_diff=math.inf)  # a tensor the steps did not move, moved without its state
    # what a failing check finds is recorded as found: a NaN loss, a NaN cosine (its part's ok is false)
    parts["steps"].update(ok=False, losses=[2.8, math.nan, math.inf, math.nan])
    parts["precision"].update(ok=False, loss_bf16=math.nan, loss_diff=math.nan, grad_cos_min=math.nan)
    parts["sdpa"] = {"ok": False, "error": "RuntimeError: no kernel", "traceback": "Traceback ...", "seconds": 0.1}
    return rec


def test_the_gpu_quick_checks_record_passes_as_its_writer_writes_it(tmp_path):
    assert schemas.check_file("gpu_check", REPO_ROOT / SOURCES["gpu_check"]) == []  # the dry mode's, as written
    path = tmp_path / "quick.json"
    path.write_text(json.dumps(gpu_record()))  # Infinity, as the writer (allow_nan) writes it
    assert schemas.check_file("gpu_check", path) == []


def test_the_archive_manifest_passes_and_a_damaged_line_is_named(tmp_path):
    assert schemas.manifest_problems() == []  # xsa/archive.sha256 as committed
    lines = schemas.MANIFEST.read_text().splitlines()
    lines[0] = lines[0][:60] + lines[0][64:]  # a sha256 four digits short
    lines[1] = lines[1].replace("  ", " ", 1)  # one space: no path
    lines[2] = lines[2].replace("summary.json", "model.pt")
    lines[4] = lines[3]  # a path listed twice
    path = tmp_path / "archive.sha256"
    path.write_text("\n".join(lines) + "\n")
    found = schemas.manifest_problems(path)
    for expected in ("1: sha256: '512a9e6e", "is not a 64-hex sha256", "2: path: '' is not a path <commit>/runs/",
                     "3: path: '30bc3ae/runs/cpu-d4_adamw_base_s0/model.pt' is not a path",
                     "5: path: '30bc3ae/runs/cpu-d4_adamw_base_s1/config.json' is listed twice (first on line 4)"):
        assert any(p.startswith(f"{path}:") and expected in p for p in found), (expected, found)
    assert len(found) == 5, found  # line 2: neither its sha256 nor its path
    path.write_text("")
    assert schemas.manifest_problems(path) == [f"{path}: empty (it declares no archive)"]
    assert schemas.manifest_problems(tmp_path / "gone") == [f"{tmp_path / 'gone'}: missing"]


def planted(tmp_path, kind: str, edit) -> Path:
    """A committed record of `kind` with `edit` applied, written under tmp_path with the file name it
    has in results/ ("<BIG>" becomes a 300-digit number: JSON holds one, Python's json never writes it)."""
    source = REPO_ROOT / SOURCES[kind]
    path = tmp_path / source.parent.name / source.name
    path.parent.mkdir()
    record = json.loads(source.read_text())
    edit(record)
    path.write_text(json.dumps(record).replace('"<BIG>"', BIG))
    return path


def estimate(**change):
    return lambda r: r["estimates"][2].update(change)


BAD = [  # (kind, edit, the field and what is wrong with it)
    ("summary", lambda r: r.update(cpu_time_s=-3.0), "cpu_time_s: -3.0 is less than the minimum of 0"),
    ("summary", lambda r: r.update(wall_time_s="<BIG>"), ("wall_time_s: 9999", "is greater than the maximum of 1000")),
    ("summary", lambda r: r.update(val_bpb="2.0"), "val_bpb: '2.0' is not of type 'number'"),
    ("summary", lambda r: r.update(val_bpb=float("nan")), "val_bpb: nan is not finite"),
    ("summary", lambda r: r.update(val_bpb=25.0), "val_bpb: 25.0 is greater than or equal to the maximum of 20"),
    ("summary", lambda r: r.update(steps=-1), "steps: -1 is less than the minimum of 0"),
    ("summary", lambda r: r.update(seed=1.5), "seed: 1.5 is not of type 'integer'"),
    ("summary", lambda r: r.update(complete="yes"), "complete: 'yes' is not of type 'boolean'"),
    ("summary", lambda r: r.pop("val_bpb"), "'val_bpb' is a required property"),
    ("provenance", lambda r: r.update(cpu_time_s=-1.0), "cpu_time_s: -1.0 is less than the minimum of 0"),
    ("provenance", lambda r: r.update(wall_time_s=float("inf")), "wall_time_s: inf is not finite"),
    ("provenance", lambda r: r.update(git_commit="HEAD"), "git_commit: 'HEAD' is not a 40-hex git commit"),
    ("provenance", lambda r: r.update(git_dirty="no"), "git_dirty: 'no' is not of type 'boolean', 'null'"),
    ("provenance", lambda r: r.update(date="2026-13-02T07:55:27+00:00"), "date: '2026-13-02T07:55:27+00:00' is not an ISO"),
    ("provenance", lambda r: r.update(config_hash=7), "config_hash: 7 is not of type 'string'"),
    ("throughput", lambda r: r.update(overhead_ci95=r["overhead_ci95"][::-1]),
     "overhead_ci95: [0.02062966574967114, 0.0036478451153427738] is reversed"),
    ("throughput", lambda r: r.update(overhead_ratio="0.012"), "overhead_ratio: '0.012' is not of type 'number'"),
    ("throughput", lambda r: r.update(overhead_ratio=-1.5), "overhead_ratio: -1.5 is less than or equal to the minimum of -1"),
    ("throughput", lambda r: r["arms"]["xsa"]["step_times_s"].__setitem__(3, -0.5),
     "arms.xsa.step_times_s.3: -0.5 is less than the minimum of 0"),
    ("throughput", lambda r: r["arms"]["xsa"].update(step_time_min_s=9.0),
     "arms.xsa: step_time_min_s 9.0 is above step_time_max_s"),
    ("throughput", lambda r: r["provenance"].update(cpu_time_s=-2.0), "provenance.cpu_time_s: -2.0 is less than"),
    ("estimates", estimate(p=1.5), "estimates.2.p: 1.5 is greater than the maximum of 1"),
    ("estimates", estimate(p_holm=-0.01), "estimates.2.p_holm: -0.01 is less than the minimum of 0"),
    ("estimates", estimate(lo=0.3, hi=0.1), "estimates.2: lo 0.3 is above hi 0.1"),
    ("estimates", estimate(n=-1), "estimates.2.n: -1 is less than the minimum of 0"),
    ("estimates", estimate(n=2.5), "estimates.2.n: 2.5 is not of type 'integer'"),
    ("estimates", estimate(value=float("inf")), "estimates.2.value: inf is not finite"),
    ("estimates", estimate(hi="0.1"), "estimates.2.hi: '0.1' is not of type 'number', 'null'"),
]


def task(label: str, **change):
    return lambda r: r["tasks"][label].update(change)


def layer(i: int, **change):
    return lambda r: r["layers"][i].update(change)


def gpu(part_name: str, **change):
    return lambda r: r["parts"][part_name].update(change)


def first_head(metric: str, value):
    return lambda r: r["layers"][0]["heads"][metric].__setitem__(0, value)


BAD += [  # the records of the evaluation, diagnostics and GPU check stages
    ("eval", lambda r: r.update(core=float("nan")), "core: nan is not finite"),
    ("eval", lambda r: r.update(core="0.01"), "core: '0.01' is not of type 'number'"),
    ("eval", task("arc_easy", accuracy=1.5), "tasks.arc_easy.accuracy: 1.5 is greater than the maximum of 1"),
    ("eval", task("arc_easy", accuracy=-0.25), "tasks.arc_easy.accuracy: -0.25 is less than the minimum of 0"),
    ("eval", task("arc_easy", centered=1.2), "tasks.arc_easy.centered: 1.2 is greater than the maximum of 1"),
    ("eval", task("arc_easy", n="200"), "tasks.arc_easy.n: '200' is not of type 'integer'"),
    ("eval", task("arc_easy", correct_bpb=-2.5), "tasks.arc_easy.correct_bpb: -2.5 is less than or equal to the minimum"),
    ("eval", lambda r: r.update(core_bpb=45.0), "core_bpb: 45.0 is greater than or equal to the maximum of 20"),
    ("eval", lambda r: r.update(core_bpb=-3.0), "core_bpb: -3.0 is less than or equal to the minimum of 0"),
    ("eval", lambda r: r.update(core=0.5), "core: 0.5 is not the mean centered accuracy of its tasks"),
    ("eval", lambda r: r.pop("core_detail"), "'core_detail' is a dependency of 'core'"),
    ("eval", lambda r: r.pop("tasks"), "'tasks' is a dependency of 'core'"),
    ("eval", lambda r: r.pop("core"), "holds none of 'core' and 'chatcore'"),
    ("eval", lambda r: r["core_detail"]["provenance"].update(cpu_time_s=-5.0),
     "core_detail.provenance.cpu_time_s: -5.0 is less than the minimum of 0"),
    ("eval", lambda r: r["core_detail"].update(max_len=0), "core_detail.max_len: 0 is less than the minimum of 1"),
    ("chat", lambda r: r.update(chatcore=float("inf")), "chatcore: inf is not finite"),
    ("chat", lambda r: r.update(chatcore=0.9), "chatcore: 0.9 is not the mean centered accuracy of its chat_tasks"),
    ("chat", lambda r: r["chat_tasks"]["GSM8K"].update(accuracy=float("nan")), "chat_tasks.GSM8K.accuracy: nan is not finite"),
    ("chat", lambda r: r.pop("chat_detail"), "'chat_detail' is a dependency of 'chatcore'"),
    ("chat", lambda r: r["sft"].update(wall_time_s=-1.0), "sft.wall_time_s: -1.0 is less than the minimum of 0"),
    ("chat", lambda r: r["sft"].update(row_fill=1.3), "sft.row_fill: 1.3 is greater than the maximum of 1"),
    ("chat", lambda r: r["sft"].update(heldout_loss_after="low"), "sft.heldout_loss_after: 'low' is not of type 'number'"),
    ("diagnostics", layer(1, cos_z_v=1.5), "layers.1.cos_z_v: 1.5 is greater than the maximum of 1"),
    ("diagnostics", first_head("cos_y_v", -1.2), "layers.0.heads.cos_y_v.0: -1.2 is less than the minimum of -1"),
    ("diagnostics", layer(0, entropy=-0.1), "layers.0.entropy: -0.1 is less than the minimum of 0"),
    ("diagnostics", layer(0, diag_mass=float("nan")), "layers.0.diag_mass: nan is not finite"),
    ("diagnostics", layer(2, diag_mass=1.7), "layers.2.diag_mass: 1.7 is greater than the maximum of 1"),
    ("diagnostics", layer(2, diag_mass=0.3), "layers.2.diag_mass: 0.3 is not the mean of its heads"),
    ("diagnostics", first_head("entropy", 9.0), "layers.0.heads.entropy.0: 9.0 nats is above ln 512"),
    ("diagnostics", layer(3, layer="3"), "layers.3.layer: '3' is not of type 'integer'"),
    ("diagnostics", lambda r: r.pop("layers"), "'layers' is a required property"),
    ("diagnostics", lambda r: r.update(layers=[]), "layers: [] should be non-empty"),
    ("diagnostics", lambda r: r["provenance"].update(wall_time_s=-1.0), "provenance.wall_time_s: -1.0 is less than"),
    ("diagnostics", lambda r: r["batch"].update(seq_len=0), "batch.seq_len: 0 is less than the minimum of 1"),
    ("gpu_check", gpu("precision", grad_cos_min=1.5), "parts.precision.grad_cos_min: 1.5 is greater than the maximum of 1"),
    ("gpu_check", gpu("timing", xsa_step_s=-0.1), "parts.timing.xsa_step_s: -0.1 is less than the minimum of 0"),
    ("gpu_check", gpu("timing", baseline_optimizer_share=1.5), "parts.timing.baseline_optimizer_share: 1.5 is greater"),
    ("gpu_check", gpu("compile", first_step_s=float("nan")), "parts.compile.first_step_s: nan is not finite"),
    ("gpu_check", gpu("compile", params=12.5), "parts.compile.params: 12.5 is not of type 'integer'"),
    ("gpu_check", gpu("xsa_cos", mean_abs_cos_per_layer=[0.5, 0.0002]),
     "parts.xsa_cos.mean_abs_cos_per_layer.0: 0.5 is above the layer's maximum"),
    ("gpu_check", gpu("memory", peak_mem_bytes={"d12@32": -5}), "parts.memory.peak_mem_bytes.d12@32: -5 is less than"),
    ("gpu_check", gpu("memory", peak_mem_bytes={"d12@32": "lots"}), "'lots' is neither a byte count nor 'out of memory'"),
    ("gpu_check", gpu("resume", lost_state_diff=-0.5), "parts.resume.lost_state_diff: -0.5 is less than the minimum of 0"),
    ("gpu_check", gpu("precision", per_matrix={"lm_head.weight": -1.01}), "parts.precision.per_matrix.lm_head.weight: -1.01"),
    ("gpu_check", gpu("decode", replies_agree=2.0), "parts.decode.replies_agree: 2.0 is greater than the maximum of 1"),
    ("gpu_check", gpu("steps", ok="yes"), "parts.steps.ok: 'yes' is not of type 'boolean'"),
    ("gpu_check", lambda r: r["parts"]["sdpa"].pop("seconds"), "parts.sdpa: 'seconds' is a required property"),
    ("gpu_check", lambda r: r.pop("parts"), "'parts' is a required property"),
    ("gpu_check", lambda r: r.update(elapsed_s="<BIG>"), ("elapsed_s: 9999", "is greater than the maximum of 1000")),
]




def model(**change):
    return lambda r: r["model"].update(change)


BAD += [  # a run's config.json (xsa/checks/run_schemas.py)
    ("config", lambda r: r.update(matrix_lr=-0.02), "matrix_lr: -0.02 is less than or equal to the minimum of 0"),
    ("config", lambda r: r.update(embedding_lr=0.0), "embedding_lr: 0.0 is less than or equal to the minimum of 0"),
    ("config", lambda r: r.update(unembedding_lr=float("nan")), "unembedding_lr: nan is not finite"),
    ("config", lambda r: r.update(adamw_matrix_lr=float("inf")), "adamw_matrix_lr: inf is not finite"),
    ("config", lambda r: r.update(scalar_lr="0.5"), "scalar_lr: '0.5' is not of type 'number'"),
    ("config", lambda r: r.update(weight_decay=-0.1), "weight_decay: -0.1 is less than the minimum of 0"),
    ("config", lambda r: r.update(warmdown_ratio=1.5), "warmdown_ratio: 1.5 is greater than the maximum of 1"),
    ("config", lambda r: r.update(muon_momentum_final="0.9"), "muon_momentum_final: '0.9' is not of type 'number', 'null'"),
    ("config", model(xsa_alpha=1.5), "model.xsa_alpha: 1.5 is greater than the maximum of 1"),
    ("config", model(xsa_alpha=-0.25), "model.xsa_alpha: -0.25 is less than the minimum of 0"),
    ("config", model(xsa_alpha=float("nan")), "model.xsa_alpha: nan is not finite"),
    ("config", model(n_layer=0), "model.n_layer: 0 is less than the minimum of 1"),
    ("config", model(n_embd=64.5), "model.n_embd: 64.5 is not of type 'integer'"),
    ("config", model(n_head=True), "model.n_head: True is not of type 'integer'"),
    ("config", model(xsa_layers="every"), "model.xsa_layers: 'every' is not a layer spec (all, none, last:K"),
    ("config", model(xsa_value="both"), "model.xsa_value: 'both' is not one of ['mixed', 'plain']"),
    ("config", model(smear="yes"), "model.smear: 'yes' is not of type 'boolean'"),
    ("config", model(init_resid_lambdas=[1.15]), "model.init_resid_lambdas: [1.15] is too short"),
    ("config", lambda r: r.update(device_batch_size=-8), "device_batch_size: -8 is less than the minimum of 1"),
    ("config", lambda r: r.update(eval_every=0), "eval_every: 0 is less than the minimum of 1"),
    ("config", lambda r: r.update(warmup_steps=-1), "warmup_steps: -1 is less than the minimum of 0"),
    ("config", lambda r: r.update(seed=-1), "seed: -1 is less than the minimum of 0"),
    ("config", lambda r: r.update(seed="<BIG>"), ("seed: 9999", "is greater than or equal to the maximum of 9223372036854775808")),
    ("config", lambda r: r.update(optimizer="sgd"), "optimizer: 'sgd' is not one of ['muon', 'adamw']"),
    ("config", lambda r: r.update(data="climb"), "data: 'climb' is not one of"),
    ("config", lambda r: r.update(preset=""), "preset: '' should be non-empty"),
    ("config", lambda r: r.update(cpu_compile=1), "cpu_compile: 1 is not of type 'boolean'"),
    ("config", lambda r: r["adam_betas"].update(lm_head=[0.8, 1.5]), "adam_betas.lm_head.1: 1.5 is greater than the maximum of 1"),
    ("config", lambda r: r["adam_betas"].update(lm_heads=[0.8, 0.9]), "adam_betas: 'lm_heads' is not one of ['lm_head'"),
    ("config", lambda r: r["adam_weight_decay"].update(embedding=-0.001),
     "adam_weight_decay.embedding: -0.001 is less than the minimum of 0"),
    ("config", lambda r: r.update(data_dir=7), "data_dir: 7 is not of type 'string'"),
    ("config", lambda r: r.pop("model"), "'model' is a required property"),
    ("config", lambda r: r.pop("num_tokens"), "'num_tokens' is a required property"),
]


@pytest.mark.parametrize("kind, edit, expected", BAD, ids=[f"{k}-{e if isinstance(e, str) else e[0]}"[:50]
                                                          for k, _, e in BAD])
def test_a_planted_bad_value_is_refused_naming_its_file_and_field(tmp_path, kind, edit, expected):
    path = planted(tmp_path, kind, edit)
    found = schemas.check_file(KIND.get(kind, kind), path)  # a list, never a traceback
    assert found and all(p.startswith(f"{path}: ") for p in found), found
    parts = (expected,) if isinstance(expected, str) else expected
    assert any(all(x in p for x in parts) for p in found), found
    assert all(len(p) < 400 for p in found), found  # a 300-digit value is cut, not printed whole


@pytest.mark.parametrize("kind", sorted(COMMITTED))
@pytest.mark.parametrize("data", [b'{"val_bpb": 2.0', b"not json", b'{"a": ' + b"1" * 5000 + b"}", b"\xff{}"],
                         ids=["torn", "text", "5000-digit int", "not UTF-8"])
def test_a_file_that_is_not_json_is_one_problem_naming_it(tmp_path, kind, data):
    path = tmp_path / "record.json"
    path.write_bytes(data)
    found = schemas.check_file(kind, path)
    assert len(found) == 1 and found[0].startswith(f"{path}: not a JSON file ("), found
    assert schemas.check_file(kind, tmp_path / "gone.json") == [f"{tmp_path / 'gone.json'}: missing"]


def test_every_config_field_has_a_schema_and_every_presets_config_passes():
    """A field added to the config gets its schema here; what the code makes of each preset (and its
    XSA arm: alpha 1 at every layer) is a config the schema passes."""
    assert set(run_schemas.CONFIG["properties"]) == {f.name for f in dataclasses.fields(TrainConfig)} | set(RECORD_EXTRAS)
    assert set(run_schemas.MODEL["properties"]) == {f.name for f in dataclasses.fields(GPTConfig)}
    for name in PRESETS:
        for arm in ({}, {"xsa_alpha": 1.0, "xsa_layers": "all"}):
            record = {**make_config(name, **arm).to_dict(), "data_dir": "/data"}
            assert schemas.problems("config", record, name) == [], name


# -- metrics.jsonl, a line at a time

LOG = REPO_ROOT / "results" / "runs" / RUN / "metrics.jsonl"  # 385 lines: step 0 (an evaluation), 1, ..., 384
STUDIES = ("cpu-w64-d4_", "cpu-w128-d4-s1097_", "cpu-w64-d4-s1536_")  # run ids of three studies


def committed_logs() -> list[str]:
    files = subprocess.run(["git", "ls-files", "results"], cwd=REPO_ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    return [f for f in files if f.endswith("/metrics.jsonl")]  # results/runs/*/ (and any archived run's)


def test_every_line_of_every_committed_metrics_file_passes():
    files = committed_logs()
    assert len(files) >= 400 and all(any(f"/{p}" in f for f in files) for p in STUDIES), len(files)
    assert [p for f in files for p in schemas.check_lines("metrics", REPO_ROOT / f)] == []


def test_the_validator_itself_passes_the_committed_lines_of_three_studies():
    """The check above takes the quick test's shortcut; here the validator judges lines of runs of
    three studies (every evaluation, every 7th log line) and finds nothing either."""
    files = committed_logs()
    for prefix in STUDIES:
        runs = sorted(f for f in files if f"/{prefix}" in f)
        for f in (runs[0], runs[-1]):
            lines = (REPO_ROOT / f).read_text().splitlines()
            for i, line in enumerate(lines):
                if i % 7 == 0 or '"val_bpb"' in line:
                    record = json.loads(line)
                    assert run_schemas.QUICK["metrics"](record), (f, i + 1)
                    assert list(schemas.VALIDATORS["metrics"].iter_errors(record)) == [], (f, i + 1)


def line(n: int, edit):
    """Edit line n (from 1) of the log."""
    def damage(lines):
        record = json.loads(lines[n - 1])
        edit(record)
        lines[n - 1] = json.dumps(record)
    return n, damage


def raw(n: int, text: str):
    """Replace line n of the log with `text`."""
    return n, lambda lines: lines.__setitem__(n - 1, text)


def drop(*keys):
    return lambda r: [r.pop(k) for k in keys]


# lines of the log: 1 is step 0 (val bpb and diagnostics, no loss), 11 step 10 (a log step), 49 step 48 (both)
BAD_LINES = [  # ((the line, the damage), what is wrong with it)
    (line(11, lambda r: r.update(train_loss=float("nan"))), "train_loss: nan is not finite"),
    (line(11, lambda r: r.update(train_loss=-0.5)), "train_loss: -0.5 is less than the minimum of 0"),
    (line(11, lambda r: r.update(train_loss_ema=float("inf"))), "train_loss_ema: inf is not finite"),
    (line(11, lambda r: r.update(train_loss="7.09")), "train_loss: '7.09' is not of type 'number'"),
    (line(11, lambda r: r.update(step=-10)), "step: -10 is less than the minimum of 0"),
    (line(11, lambda r: r.update(step=10.5)), "step: 10.5 is not of type 'integer'"),
    (line(11, lambda r: r.update(step="10")), "step: '10' is not of type 'integer'"),
    (line(11, lambda r: r.update(lr_mult=-0.1)), "lr_mult: -0.1 is less than the minimum of 0"),
    (line(11, lambda r: r.update(lr_mult=1.5)), "lr_mult: 1.5 is greater than the maximum of 1"),
    (line(11, lambda r: r.update(tok_per_s=-2843.5)), "tok_per_s: -2843.5 is less than the minimum of 0"),
    (line(11, lambda r: r.update(mfu=-0.4)), "mfu: -0.4 is less than the minimum of 0"),
    (line(11, lambda r: r.update(mfu_datasheet="n/a")), "mfu_datasheet: 'n/a' is not of type 'number', 'null'"),
    (line(11, drop("train_loss_ema")), "'train_loss_ema' is a dependency of 'train_loss'"),
    (line(11, drop("step")), "'step' is a required property"),
    (line(11, drop("train_loss", "train_loss_ema", "lr_mult", "tok_per_s")), "holds none of 'train_loss' and 'val_bpb'"),
    (line(49, lambda r: r.update(val_bpb=0.0)), "val_bpb: 0.0 is less than or equal to the minimum of 0"),
    (line(49, lambda r: r.update(val_bpb=25.0)), "val_bpb: 25.0 is greater than or equal to the maximum of 20"),
    (line(49, lambda r: r.update(val_bpb=None)), "val_bpb: None is not of type 'number'"),
    (line(49, drop("val_bpb")), "'val_bpb' is a dependency of 'diag'"),
    (line(1, lambda r: r["diag"]["cos_z_v"].__setitem__(2, 1.5)), "diag.cos_z_v.2: 1.5 is greater than the maximum of 1"),
    (line(1, lambda r: r["diag"]["entropy"].__setitem__(0, -1.0)), "diag.entropy.0: -1.0 is less than the minimum of 0"),
    (line(1, lambda r: r["diag"]["diag_mass"].__setitem__(3, float("nan"))), "diag.diag_mass.3: nan is not finite"),
    (line(1, lambda r: r["diag"].update(first_mass=[])), "diag.first_mass: [] should be non-empty"),
    (line(1, lambda r: r.update(diag=[0.1, 0.2])), "diag: [0.1, 0.2] is not of type 'object'"),
    (raw(11, "[10, 7.09]"), "[10, 7.09] is not of type 'object'"),
    (raw(11, '{"step": 10, "train_loss": 7.09, "lr_m'), "not a JSON line ("),  # garbled
    (raw(11, '{"step": 10, "train_loss": 7.0\x009}'), "not a JSON line ("),  # a NUL byte in a number
    (raw(11, ""), "not a JSON line ("),  # a blank line
]


@pytest.mark.parametrize("damage, expected", BAD_LINES, ids=[f"{d[0]}-{e[:40]}" for d, e in BAD_LINES])
def test_a_damaged_metrics_line_is_refused_naming_file_line_and_field(tmp_path, damage, expected):
    n, edit = damage
    lines = LOG.read_text().splitlines()
    edit(lines)
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines) + "\n")
    found = schemas.check_lines("metrics", path)
    assert found and all(p.startswith(f"{path}:{n}: ") for p in found), found  # that line, and only it
    assert any(expected in p for p in found), found


def test_a_torn_empty_or_unreadable_metrics_file_is_one_problem(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(LOG.read_text()[:-40])  # a killed writer: the last line cut, no newline
    assert schemas.check_lines("metrics", path) == [f"{path}:385: torn last line (no newline: a killed writer)"]
    path.write_text("")
    assert schemas.check_lines("metrics", path) == [f"{path}: empty (no line)"]
    path.write_bytes(b'{"step": 0, "val_bpb": 3.1}\n\xff\n')
    found = schemas.check_lines("metrics", path)
    assert len(found) == 1 and found[0].startswith(f"{path}: not a text file ("), found
    assert schemas.check_lines("metrics", tmp_path / "gone") == [f"{tmp_path / 'gone'}: missing"]


# -- the quick test (xsa/checks/schema_parts.py): a shortcut that never passes what the validator refuses

POP = object()
ODD = [float("nan"), float("inf"), -float("inf"), -1, -1e-9, 0, 0.0, 0.5, 1, 1.0, 1.5, 25.0, 2**63, 10.0, "x", "",
       "all", True, False, None, [], {}, [1.5], {"step": 1}, POP]


def leaves(value, where=()):
    """The path of `value` and of everything in it."""
    yield where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        yield from leaves(v, where + (k,))


def mutated(record, where, new):
    if not where:
        return copy.deepcopy(new) if new is not POP else {}
    out = copy.deepcopy(record)
    holder = out
    for k in where[:-1]:
        holder = holder[k]
    if new is POP:
        holder.pop(where[-1])
    else:
        holder[where[-1]] = copy.deepcopy(new)
    return out


def quick_cases(kind: str) -> list:
    if kind == "config":
        return [json.loads((REPO_ROOT / SOURCES["config"]).read_text()),
                json.loads((REPO_ROOT / "results/archive/30bc3ae/runs/cpu-d4_base_s1/config.json").read_text())]
    lines = LOG.read_text().splitlines()
    return [json.loads(lines[i]) for i in (0, 10, 48, -1)]  # step 0, a log step, an evaluation, the last


@pytest.mark.parametrize("kind", sorted(run_schemas.QUICK))
def test_the_quick_test_never_passes_what_the_validator_refuses(kind):
    quick, validator = run_schemas.QUICK[kind], schemas.VALIDATORS[kind]
    assert quick is not None
    refused = 0
    for record in quick_cases(kind):
        assert quick(record)  # a committed record takes the shortcut
        for where in leaves(record):
            for new in ODD:
                m = mutated(record, where, new)
                if quick(m):
                    assert validator.is_valid(m), (where, new)
                else:
                    refused += 1
    assert refused > 100, refused


def test_a_schema_with_a_keyword_the_quick_test_does_not_know_has_none():
    assert schema_parts.accepts({"type": "object", "if": {"required": ["a"]}}) is None
    assert schema_parts.accepts({"type": "array", "items": {"type": "number", "multipleOf": 2}}) is None
    assert schema_parts.accepts({"properties": {"a": {"type": "number"}}, "patternProperties": {"^b": {}}}) is None
    assert schema_parts.accepts({"enum": [[1]]}) is None  # a list's equality is not Python's (True == 1)
    test = schema_parts.accepts({"type": "object", "properties": {"a": schema_parts.integer(minimum=1)}})
    assert test({"a": 2}) and not test({"a": 0}) and not test({"a": True}) and not test([])


# -- the paper stage: validate() names the same problems and writes nothing

STUDY = get_study("default")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A copy of the committed records; each test plants one file and puts it back."""
    root = tmp_path_factory.mktemp("committed") / "results"
    for part in ("runs", "throughput", "archive"):
        shutil.copytree(REPO_ROOT / "results" / part, root / part)
    return root


GPU_ESTIMATES = {"study": "gpu", "estimates": [{"key": "x", "value": 0.01, "lo": 0.0, "hi": 0.02, "p": 1.5,
                                                 "runs": []}]}

DAMAGES = [  # (file under results/, edit, what the paper stage must say about it)
    (f"runs/{RUN}/summary.json", lambda r: r.update(cpu_time_s=-3.0), "cpu_time_s: -3.0 is less than the minimum of 0"),
    (f"runs/{RUN}/summary.json", lambda r: r.update(wall_time_s=1e300), "wall_time_s: 1e+300 is greater than the maximum"),
    (f"runs/{RUN}/provenance.json", lambda r: r.update(git_commit="HEAD"), "git_commit: 'HEAD' is not a 40-hex git commit"),
    ("throughput/cpu-w64-d4.json", lambda r: r.update(overhead_ci95=r["overhead_ci95"][::-1]),
     "overhead_ci95: [0.02062966574967114, 0.0036478451153427738] is reversed"),
    ("throughput/cpu-w64-d4.json", lambda r: r["arms"]["xsa"].update(tok_per_s="fast"), "arms.xsa.tok_per_s: 'fast'"),
    ("estimates/gpu.json", lambda r: r.update(GPU_ESTIMATES), "estimates.0.p: 1.5 is greater than the maximum of 1"),
    (f"runs/{RUN}/eval.json", task("arc_easy", accuracy=1.5), "tasks.arc_easy.accuracy: 1.5 is greater than the maximum"),
    (f"runs/{RUN}/eval.json", lambda r: r.update(core=0.5), "core: 0.5 is not the mean centered accuracy of its tasks"),
    (f"runs/{RUN}/diagnostics.json", layer(1, cos_z_v=-1.5), "layers.1.cos_z_v: -1.5 is less than the minimum of -1"),
    (f"runs/{RUN}/diagnostics.json", lambda r: r.update(layers=[]), "layers: [] should be non-empty"),
    (f"runs/{RUN}/config.json", lambda r: r.update(matrix_lr=-0.02), "matrix_lr: -0.02 is less than or equal to the min"),
    (f"runs/{RUN}/config.json", model(xsa_alpha="1"), "model.xsa_alpha: '1' is not of type 'number'"),
    (f"runs/{RUN}/config.json", lambda r: r.update(data_dir=None), "data_dir: None is not of type 'string'"),
]


@pytest.mark.parametrize("rel, edit, expected", DAMAGES, ids=[f"{r.split('/')[-1]}-{e[:30]}" for r, _, e in DAMAGES])
def test_the_paper_stage_refuses_a_record_its_schema_refuses(results, rel, edit, expected):
    path = results / rel
    before = path.read_bytes() if path.exists() else None
    record = json.loads(before) if before is not None else {}
    edit(record)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(record))
    try:
        with pytest.raises(report.RecordError, match="nothing was written") as e:
            validate(STUDY, results)
    finally:  # the shared copy is whole again for the next test
        path.write_bytes(before) if before is not None else path.unlink()
    assert any(line.strip().startswith(f"{path}: ") and expected in line for line in str(e.value).splitlines()), e.value


LOG_DAMAGES = [  # (line of the run's metrics.jsonl, edit, what the paper stage must say about that line)
    (11, lambda r: r.update(train_loss=-0.5), "train_loss: -0.5 is less than the minimum of 0"),
    (11, lambda r: r.update(lr_mult=1.5), "lr_mult: 1.5 is greater than the maximum of 1"),
    (2, lambda r: r.update(step=True), "step: True is not of type 'integer'"),
    (49, lambda r: r.update(val_bpb="2.3"), "val_bpb: '2.3' is not of type 'number'"),
    (1, lambda r: r["diag"]["cos_y_v"].__setitem__(0, 1.5), "diag.cos_y_v.0: 1.5 is greater than the maximum of 1"),
    (11, lambda r: r.pop("train_loss_ema"), "'train_loss_ema' is a dependency of 'train_loss'"),
]


def refused(results, path, text: str) -> str:
    """validate()'s message with `path` holding `text` (put back after)."""
    before = path.read_bytes()
    path.write_text(text)
    try:
        with pytest.raises(report.RecordError, match="nothing was written") as e:
            validate(STUDY, results)
    finally:
        path.write_bytes(before)
    return str(e.value)


@pytest.mark.parametrize("n, edit, expected", LOG_DAMAGES, ids=[f"{n}-{e[:30]}" for n, _, e in LOG_DAMAGES])
def test_the_paper_stage_refuses_a_metrics_line_its_schema_refuses(results, n, edit, expected):
    path = results / "runs" / RUN / "metrics.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[n - 1])
    edit(record)
    lines[n - 1] = json.dumps(record)
    message = refused(results, path, "\n".join(lines) + "\n")
    assert any(x.strip().startswith(f"{path}:{n}: ") and expected in x for x in message.splitlines()), message


def test_the_paper_stage_refuses_an_empty_metrics_file(results):
    path = results / "runs" / RUN / "metrics.jsonl"
    assert f"{path}: empty (no line: not even the evaluation at step 0)" in refused(results, path, "")


def archived_problems(results, monkeypatch, rel: str, edit) -> tuple[Path, list[str]]:
    """archive_problems() with the archived record `rel` edited and its manifest line changed with it."""
    path = results / "archive" / "30bc3ae" / rel
    before = path.read_bytes()
    record = json.loads(before)
    edit(record)
    path.write_text(json.dumps(record))
    real = integrity.manifest
    monkeypatch.setattr(integrity, "manifest", lambda commit: {**real(commit),
                                                               rel: hashlib.sha256(path.read_bytes()).hexdigest()})
    try:
        return path, archive_problems(STUDY, results)
    finally:
        path.write_bytes(before)


def test_the_paper_stage_checks_an_archived_config_by_value(results, monkeypatch):
    path, found = archived_problems(results, monkeypatch, "runs/cpu-d8_base_s1/config.json",
                                    lambda r: r.update(matrix_lr=-0.02))
    assert found == [f"{path}: matrix_lr: -0.02 is less than or equal to the minimum of 0"], found


def test_the_paper_stage_checks_the_archive_manifest_and_the_archived_records(results, tmp_path, monkeypatch):
    """The robustness table's archived rows: a damaged manifest line is named; an archived record that
    matches its manifest line (the record and its line changed together) is still checked by value."""
    damaged = tmp_path / "archive.sha256"
    damaged.write_text(schemas.MANIFEST.read_text().replace("  ", " ", 1))
    monkeypatch.setattr(integrity, "MANIFEST", damaged)
    assert f"{damaged}:1: path: '' is not a path <commit>/runs/" in "\n".join(archive_problems(STUDY, results))
    monkeypatch.undo()
    path, found = archived_problems(results, monkeypatch, "runs/cpu-d8_base_s1/summary.json",
                                    lambda r: r.update(cpu_time_s=-3.0))
    assert found == [f"{path}: cpu_time_s: -3.0 is less than the minimum of 0"], found
