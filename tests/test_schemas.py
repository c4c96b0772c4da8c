"""Every record the paper reads matches the schema of its kind (xsa/report/schemas.py): each committed
record passes, and a planted bad value of each kind is refused naming its file and field, never in a
traceback; the paper stage's record check (integrity.py) reports the same problems and stops."""

import fnmatch
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from xsa import report
from xsa.records import REPO_ROOT
from xsa.report import schemas
from xsa.report.integrity import validate
from xsa.studies import get_study

# where each kind of record is committed (an archived study's runs are run records too)
COMMITTED = {"summary": ("results/runs/*/summary.json", "results/archive/*/runs/*/summary.json"),
             "provenance": ("results/runs/*/provenance.json", "results/archive/*/runs/*/provenance.json"),
             "throughput": ("results/throughput/*.json",),
             "estimates": ("results/estimates/*.json",)}
RUN = "cpu-w64-d4_xsa1_s3"  # a scored run of the default study's primary comparison
SOURCES = {"summary": f"results/runs/{RUN}/summary.json", "provenance": f"results/runs/{RUN}/provenance.json",
           "throughput": "results/throughput/cpu-w64-d4.json", "estimates": "results/estimates/robust.json"}
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
    assert len(files) >= (100 if kind in ("summary", "provenance") else 4), files  # the walk found them
    assert [p for f in files for p in schemas.check_file(kind, REPO_ROOT / f)] == []


def test_a_field_a_writer_leaves_null_passes():
    prov = json.loads((REPO_ROOT / SOURCES["provenance"]).read_text())
    prov.update(git_commit=None, git_dirty=None, wall_time_s=None, cpu_time_s=None, seed=None)
    assert schemas.problems("provenance", prov, "provenance.json") == []
    summary = json.loads((REPO_ROOT / SOURCES["summary"]).read_text())
    summary.update(tok_per_s=None, mfu=None, learned_gates=None, train_loss_final=None, new_field={"x": 1})
    assert schemas.problems("summary", summary, "summary.json") == []


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


@pytest.mark.parametrize("kind, edit, expected", BAD, ids=[f"{k}-{e if isinstance(e, str) else e[0]}"[:50]
                                                          for k, _, e in BAD])
def test_a_planted_bad_value_is_refused_naming_its_file_and_field(tmp_path, kind, edit, expected):
    path = planted(tmp_path, kind, edit)
    found = schemas.check_file(kind, path)  # a list, never a traceback
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
