"""The pipeline: skipping by inputs hash, --force, failures, training resume, the paper export,
and the smoke study end to end (with byte-identical tables and figures when the paper is rebuilt)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from xsa.studies import jobs

from xsa import pipeline
from xsa.report.export import pdf_engine
from xsa.base.records import REPO_ROOT, atomic_write_json
from xsa.studies.registry import get_study

from conftest import stub_notebook

TRAIN_PARAMS = "run = {}\nout_dir = None\nresume = False\noverwrite = False"
PAPER_PARAMS = "study = 'smoke'\nresults_dir = None\nout_dir = None"


def context(tmp_path, study="smoke", force=False) -> jobs.Context:
    layout = pipeline.Layout(tmp_path, tmp_path / "paper", study)
    return jobs.Context(get_study(study), layout, REPO_ROOT / "notebooks", force)


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "xsa.pipeline", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=600)


def test_skip_force_and_failure(tmp_path):
    log = tmp_path / "ran.log"
    good = tmp_path / "good"
    stub_notebook(good, "00_validation.ipynb", f"open({str(log)!r}, 'a').write('ran\\n')")
    args = ["--study", "smoke", "--stages", "validation", "--notebooks", str(good),
            "--results", str(tmp_path / "results"), "--paper", str(tmp_path / "paper")]
    record = tmp_path / "results" / "executed" / "smoke" / "00_validation.ipynb"

    out = cli(*args)
    assert out.returncode == 0, out.stderr
    assert log.read_text() == "ran\n" and record.exists()
    assert json.loads(record.read_text())["metadata"]["xsa"]["stage"] == "validation"

    out = cli(*args)  # same inputs: skipped
    assert out.returncode == 0 and "up to date, skipped" in out.stdout
    assert log.read_text() == "ran\n"

    out = cli(*args, "--force")
    assert out.returncode == 0 and log.read_text() == "ran\nran\n"

    bad = tmp_path / "bad"
    stub_notebook(bad, "00_validation.ipynb", "raise RuntimeError('stub stage failure')")
    out = cli(*[a if a != str(good) else str(bad) for a in args])
    assert out.returncode == 1
    assert "stage validation" in out.stderr and str(record) in out.stderr
    executed = nbformat.read(record, as_version=4)  # the failing notebook is kept, with its error
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors and errors[0].evalue == "stub stage failure"
    assert "xsa" not in executed.metadata  # not stamped: the next run retries it
    out = cli(*[a if a != str(good) else str(bad) for a in args])
    assert out.returncode == 1 and "up to date" not in out.stdout


def test_missing_notebook_and_unknown_stage_name_the_stage(tmp_path):
    out = cli("--study", "smoke", "--stages", "throughput", "--notebooks", str(tmp_path),
              "--results", str(tmp_path / "r"))
    assert out.returncode == 1 and "stage throughput" in out.stderr and "04_throughput.ipynb" in out.stderr
    out = cli("--study", "smoke", "--stages", "trian", "--results", str(tmp_path / "r"))
    assert out.returncode == 1 and "'trian'" in out.stderr
    out = cli("--study", "nope", "--results", str(tmp_path / "r"))
    assert out.returncode == 1 and "'nope'" in out.stderr
    out = cli("--study", "nope", "--status", "--results", str(tmp_path / "r"))
    assert out.returncode == 2 and "'nope'" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_make_passes_its_values_to_the_shell_as_data(tmp_path):
    """RUN, LEAVE_OUT and STUDY reach the shell quoted: a value is never run as a command."""
    import shutil
    if not shutil.which("make"):
        pytest.skip("no make")
    marker = tmp_path / "ran"
    for target, var in (("reproduce", "RUN"), ("report", "LEAVE_OUT"), ("report", "STUDY")):
        out = subprocess.run(["make", "-n", "-o", ".venv/.xsa-installed", "-o", "tcmalloc", target,
                              f"{var}=x; touch {marker}"], cwd=REPO_ROOT, capture_output=True, text=True)
        script = "\n".join(x for x in out.stdout.splitlines() if "xsa." in x)
        assert script, out.stdout + out.stderr
        # the recipe as the shell would run it, with the python command made harmless
        subprocess.run(["sh", "-c", script.replace(".venv/bin/python", "true")], capture_output=True,
                             env={**os.environ, var: f"x; touch {marker}", "STUDY": os.environ.get("STUDY", "default")
                                  if var != "STUDY" else f"x; touch {marker}"})
        assert not marker.exists(), (target, var, script)


@pytest.mark.parametrize("target,var", [("gpu-study", "GPU_STUDY"), ("gpu-study", "NGPU"), ("gpu-study", "DEVICE_BATCH"),
                                        ("paper", "SHARDS"), ("paper", "THREADS")])
def test_make_runs_no_value_as_a_command(tmp_path, target, var):
    """The GPU study's and the shards' values reach the shell as data: make itself runs the recipe,
    with the python command made harmless (PY=true), and a value is never run as a command."""
    import shutil
    if not shutil.which("make"):
        pytest.skip("no make")
    marker = tmp_path / "ran"
    values = dict(NGPU="1", GPU_STUDY="gpu", SHARDS="1", THREADS="1", STUDY="default")
    values[var] = f"1; touch {marker}; x=$(touch {marker})"
    out = subprocess.run(["make", "-o", ".venv/.xsa-installed", "-o", "tcmalloc", "-o", "browser", target, "PY=true",
                          *(f"{k}={v}" for k, v in values.items())], cwd=REPO_ROOT, capture_output=True, text=True)
    assert not marker.exists(), (target, var, out.stdout + out.stderr)
    if var in ("NGPU", "DEVICE_BATCH", "SHARDS", "THREADS"):  # a count that is no number is refused, named
        assert out.returncode != 0 and f"{var}=" in out.stderr and "not a whole number" in out.stderr


def test_shards_split_the_runs_between_processes(tmp_path):
    log = tmp_path / "ran.log"
    stubs = tmp_path / "stubs"
    # a stub that records where it ran and writes the record a train job must leave
    stub_notebook(stubs, "01_train.ipynb", f"open({str(log)!r}, 'a').write(out_dir + '\\n')\n"
                  "from xsa.stack.spec import Run\nfrom xsa.base.records import atomic_write_json\n"
                  "c = Run.from_dict(run).config()\n"
                  "atomic_write_json(out_dir + '/config.json', c.to_dict())\n"
                  "atomic_write_json(out_dir + '/summary.json', {'complete': True})", params=TRAIN_PARAMS)
    runs = get_study("smoke").runs
    base = ["--study", "smoke", "--stages", "train", "--notebooks", str(stubs), "--results", str(tmp_path / "r")]
    for k in (1, 0):
        out = cli(*base, "--shard", f"{k}/2")
        assert out.returncode == 0, out.stderr
        assert f"(shard {k}/2)" in out.stdout
    ran = [Path(line).name for line in log.read_text().splitlines()]
    assert ran == [runs[1].run_id, runs[0].run_id]  # each run once, in the shard that owns its index
    for bad in ("2/2", "1", "a/b", "-1/2", "0/0"):  # refused as argparse refuses bad input: exit 2, naming it
        out = cli(*base, f"--shard={bad}")
        assert out.returncode == 2 and "shard" in out.stderr and repr(bad) in out.stderr


def test_train_resumes_or_refuses(tmp_path):
    study = get_study("smoke")
    ctx = context(tmp_path)
    job = jobs.jobs_for("train", ctx)[1]
    run = study.runs[1]
    run_dir = Path(job.params["out_dir"])
    jobs.prepare_train(job, ctx)  # nothing there yet: a fresh run
    assert not job.params["resume"] and not job.params["overwrite"]
    # killed before its first checkpoint: config.json only -> start again
    atomic_write_json(run_dir / "config.json", {**run.config().to_dict(), "data_dir": "x"})
    assert not jobs.is_done(job, ctx)
    jobs.prepare_train(job, ctx)
    assert job.params["overwrite"] and not job.params["resume"]
    # killed after a checkpoint -> resume
    job = jobs.jobs_for("train", ctx)[1]
    (run_dir / "ckpt").mkdir()
    (run_dir / "ckpt" / "state.pt").write_bytes(b"")
    jobs.prepare_train(job, ctx)
    assert job.params["resume"] and not job.params["overwrite"]
    # stopped early (--max-steps): not done, resumed
    atomic_write_json(run_dir / "summary.json", {"val_bpb": 1.0, "complete": False})
    assert not jobs.is_done(job, ctx)
    # finished: skipped
    atomic_write_json(run_dir / "summary.json", {"val_bpb": 1.0, "complete": True})
    assert jobs.is_done(job, ctx)
    # a different config in the folder: refused without --force, replaced with it
    other = study.runs[0].config().to_dict()
    atomic_write_json(run_dir / "config.json", {**other, "data_dir": "x"})
    assert not jobs.is_done(job, ctx)
    job = jobs.jobs_for("train", ctx)[1]
    with pytest.raises(jobs.StageError, match="--force"):
        jobs.prepare_train(job, ctx)
    ctx.force = True
    jobs.prepare_train(job, ctx)
    assert job.params["overwrite"] and not job.params["resume"]


def test_paper_export_embeds_figures(tmp_path):
    nbs = tmp_path / "nbs"
    stub_notebook(nbs, "05_paper.ipynb",
                  "import io, matplotlib\nfrom matplotlib.figure import Figure\nfrom IPython.display import Image, Markdown, display\n"
                  "fig = Figure(); fig.add_subplot().plot([1, 2])\n"
                  "buf = io.BytesIO(); fig.savefig(buf, format='png')\n"
                  "display(Markdown('# Stub paper'), Image(data=buf.getvalue()))", params=PAPER_PARAMS)
    out = cli("--study", "smoke", "--stages", "paper", "--notebooks", str(nbs),
              "--results", str(tmp_path / "results"), "--paper", str(tmp_path / "paper"))
    assert out.returncode == 0, out.stderr
    paper = tmp_path / "paper" / "smoke"  # a study other than the default: its own folder
    html = (paper / "paper.html").read_text()
    assert "data:image/png;base64," in html and "Stub paper" in html
    md = (paper / "paper.md").read_text()
    assert "Stub paper" in md and "paper_files/" in md
    if pdf_engine():
        assert (paper / "paper.pdf").read_bytes()[:5] == b"%PDF-"
        assert "PDF engine" in out.stdout
    else:
        assert "no PDF" in out.stdout


STAGE_NOTEBOOKS = [REPO_ROOT / "notebooks" / n for n in pipeline.NOTEBOOKS.values()]


@pytest.mark.slow
@pytest.mark.skipif(not all(p.exists() for p in STAGE_NOTEBOOKS),
                    reason="the smoke study needs every stage notebook: "
                    + ", ".join(p.name for p in STAGE_NOTEBOOKS if not p.exists()) + " missing")
def test_smoke_study_end_to_end(tmp_path):
    results, paper = tmp_path / "results", tmp_path / "paper"
    repo_results = sorted((REPO_ROOT / "results").rglob("*"))
    source = jobs.source_hash()
    env = {}
    bundle = REPO_ROOT.parent / "shared" / "eval_bundle"
    if bundle.exists():
        env["XSA_EVAL_BUNDLE"] = str(bundle)
    out = cli("--study", "smoke", "--results", str(results), "--paper", str(paper), env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    html = (paper / "smoke" / "paper.html").read_text()
    # the figures a one-seed toy study has records for (gap, forest, tasks, diagnostics, ...)
    assert html.count("data:image/png;base64,") >= 5 and "smoke scale" in html and "Zhai" in html
    for run in get_study("smoke").runs:
        for name in ("config", "summary", "provenance", "eval", "diagnostics"):
            assert (results / "runs" / run.run_id / f"{name}.json").exists(), (run.run_id, name)
    assert not (results / "tables").exists()  # the smoke study never writes the default study's place
    outputs = sorted((results / "smoke" / "tables").iterdir()) + sorted((results / "smoke" / "figures").iterdir())
    before = {p.name: p.read_bytes() for p in outputs}
    # everything is up to date: a second run only rebuilds the paper, byte for byte the same
    out = cli("--study", "smoke", "--results", str(results), "--paper", str(paper), env=env)
    assert out.returncode == 0, out.stderr
    # only the paper reruns (and the validation, if the package's code changed meanwhile: never in CI)
    reruns = 1 + (jobs.source_hash() != source)
    assert out.stdout.count(": running") == reruns and "[paper 1/1] smoke: running" in out.stdout, out.stdout
    assert {p.name: p.read_bytes() for p in outputs} == before
    assert sorted((REPO_ROOT / "results").rglob("*")) == repo_results, "a stage wrote into the repo's results/"


def test_undeclared_parameter_stops_the_stage(tmp_path):
    stubs = tmp_path / "stubs"
    # a notebook whose parameters cell lost `run` (renamed): the pipeline refuses before it runs
    stub_notebook(stubs, "01_train.ipynb", "raise AssertionError('must not run')",
                  params="runs = {}\nout_dir = None\nresume = False\noverwrite = False")
    out = cli("--study", "smoke", "--stages", "train", "--notebooks", str(stubs), "--results", str(tmp_path / "r"))
    assert out.returncode == 1 and "does not declare" in out.stderr and "run" in out.stderr
    assert not (tmp_path / "r" / "runs").exists()


def test_train_job_must_leave_the_run_it_asked_for(tmp_path):
    stubs = tmp_path / "stubs"
    # a notebook that trains another config into the folder (a renamed parameter left at its default)
    stub_notebook(stubs, "01_train.ipynb", "from xsa.stack.spec import Run\nfrom xsa.base.records import atomic_write_json\n"
                  "c = Run.of('smoke', seed=5).config()\natomic_write_json(out_dir + '/config.json', c.to_dict())\n"
                  "atomic_write_json(out_dir + '/summary.json', {'complete': True})", params=TRAIN_PARAMS)
    out = cli("--study", "smoke", "--stages", "train", "--notebooks", str(stubs), "--results", str(tmp_path / "r"))
    assert out.returncode == 1 and "records another config" in out.stderr and "seed (recorded 5, asked 0)" in out.stderr


def diagnostics_must_not_run(tmp_path, summary: dict):
    """A diagnostics notebook that fails if it runs, and the smoke study's first run with `summary`
    as its record (no weights): (stubs folder, run folder)."""
    stubs = tmp_path / "stubs"
    stub_notebook(stubs, "03_diagnostics.ipynb", "raise AssertionError('must not run')",
                  params="runs = []\nout_dir = None")
    run = get_study("smoke").runs[0]
    d = tmp_path / "r" / "runs" / run.run_id
    atomic_write_json(d / "config.json", run.config().to_dict())
    atomic_write_json(d / "summary.json", summary)
    return stubs, d


def test_downstream_stages_skip_runs_not_trained_yet(tmp_path):
    """Evaluation can run beside training: a run still training (or stopped early) is skipped with
    a word, never evaluated from a half-trained model."""
    stubs, d = diagnostics_must_not_run(tmp_path, {"complete": False})
    out = cli("--study", "smoke", "--stages", "diagnostics", "--notebooks", str(stubs), "--results", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("not trained to its horizon yet, skipped") == 2


def test_downstream_stages_skip_a_record_whose_weights_are_not_here(tmp_path):
    """A fresh clone holds the committed records, never the weights: a run trained elsewhere is
    skipped with a word naming the missing file, and the pass goes on (exit 0)."""
    stubs, d = diagnostics_must_not_run(tmp_path, {"complete": True, "final_weights_sha256": "0" * 64})
    out = cli("--study", "smoke", "--stages", "diagnostics", "--notebooks", str(stubs), "--results", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    assert f"its weights ({d / 'ckpt' / 'model.pt'}) are not in this checkout, skipped" in out.stdout
    assert not (d / "diagnostics.json").exists()


def test_an_adaptive_study_trains_next_what_its_rules_add(tmp_path, monkeypatch):
    """The pass declares the study again after every run: a run the rules insert ahead of the rest
    trains before them, not at the end of the pass."""
    from xsa import pipeline
    from xsa.studies import registry as studies
    from xsa.runs.layout import Layout
    from xsa.base.records import atomic_write_json
    from xsa.stack.spec import Arm
    arm = Arm.of("smoke")
    summary = lambda s: tmp_path / "runs" / arm.run(s).run_id / "summary.json"

    def declare(results):  # once seed 0 has its record, the rule puts seed 5 before seed 1
        seeds = (0, 5, 1) if summary(0).exists() else (0, 1)
        return studies.Study(name="grow", scale="test scale", runs=tuple(arm.run(s) for s in seeds), main=())

    def train(job, ctx):  # the record a finished training leaves, without training
        run = arm.run(job.params["run"]["seed"])
        atomic_write_json(Path(job.params["out_dir"]) / "config.json", run.config().to_dict())
        atomic_write_json(Path(job.params["out_dir"]) / "summary.json", {"complete": True, "val_bpb": 3.0})
        order.append(run.seed)

    order = []
    monkeypatch.setitem(studies.STUDIES, "grow", declare)
    monkeypatch.setattr(studies, "ADAPTIVE", {*studies.ADAPTIVE, "grow"})
    monkeypatch.setattr(pipeline, "ADAPTIVE", studies.ADAPTIVE)
    monkeypatch.setattr(pipeline, "execute", train)
    monkeypatch.setattr(pipeline, "prepare_train", lambda job, ctx: None)
    ctx = jobs.Context(studies.get_study("grow", tmp_path), Layout(tmp_path, tmp_path / "paper", "grow"),
                           tmp_path / "notebooks")
    pipeline.run_stage("train", ctx)
    assert order == [0, 5, 1]


def test_a_registered_study_refuses_to_train_from_uncommitted_code(monkeypatch):
    from xsa import pipeline
    from xsa.studies.jobs import Job, StageError
    from xsa.studies.registry import get_study
    ctx = type("Ctx", (), {"study": get_study("factorial")})()
    job = Job("train", "r", {}, [])
    monkeypatch.setattr(pipeline, "git_state", lambda: {"git_commit": "a", "git_dirty": True})
    monkeypatch.delenv("XSA_ALLOW_DIRTY", raising=False)
    with pytest.raises(StageError, match="uncommitted changes.*XSA_ALLOW_DIRTY"):
        pipeline.check_clean(job, ctx)
    monkeypatch.setenv("XSA_ALLOW_DIRTY", "1")
    pipeline.check_clean(job, ctx)
    monkeypatch.delenv("XSA_ALLOW_DIRTY")
    ctx.study = get_study("smoke")  # an unregistered study trains from any tree
    pipeline.check_clean(job, ctx)
    monkeypatch.setattr(pipeline, "git_state", lambda: {"git_commit": "a", "git_dirty": False})
    ctx.study = get_study("factorial")
    pipeline.check_clean(job, ctx)
