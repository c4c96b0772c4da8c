"""
The pipeline's jobs (xsa/pipeline.py runs them): what each stage of a study runs, with which
parameters and outputs, and when a job is already done.

A job is skipped when its outputs exist for the same inputs: training compares the run folder's
config, read by value, with the study's; evaluate and diagnostics the trained weights' hash and
their own parameters; the study-wide stages a hash of their parameters, their notebook's code and
(validation) the package sources. A half-finished training run of the same config resumes; one that
diverged (its folder holds diverged.json for the same config, xsa/runs/diverged.py) is done.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from xsa.stack.checkpoint import state_path
from xsa.stack.config import TrainConfig
from xsa.runs.diverged import read_diverged
from xsa.runs.layout import NOTEBOOKS, Layout
from xsa.base.records import REPO_ROOT, read_json
from xsa.stack.spec import Run
from xsa.studies.registry import Study

STAGES = ("validation", "data", "train", "evaluate", "diagnostics", "throughput", "paper")
# parameters that name a place on disk: they differ between machines, so they are not inputs
PATH_PARAMS = {"out_dir", "runs", "out", "results_dir", "bundle", "table_out"}


class StageError(RuntimeError):
    """A stage failed; the message names it and where its executed notebook is."""


@dataclass
class Job:
    stage: str
    name: str  # run id, preset, or the study name for study-wide stages
    params: dict
    outputs: list[Path]
    upstream: dict = field(default_factory=dict)  # what else the outputs depend on (hashes)
    always: bool = False  # the paper is cheap and reads every record: always rebuilt
    index: int = 0  # decides the shard: a run's jobs of every stage carry the run's index in the study

    def inputs(self) -> str:
        params = {k: v for k, v in self.params.items() if k not in PATH_PARAMS}
        blob = json.dumps({"stage": self.stage, "params": params, "upstream": self.upstream},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class Context:
    study: Study
    layout: Layout
    notebooks: Path
    force: bool = False
    shard: tuple[int, int] = (0, 1)  # (K, N): this process runs job i when i % N == K
    leave_out: tuple[str, ...] = ()  # run ids the paper leaves out on purpose (it names them)
    interim: bool = False  # the paper may read a robustness study still training (it says so)

    def mine(self, index: int) -> bool:
        return index % self.shard[1] == self.shard[0]

    def record(self, job: Job) -> Path:
        return self.layout.executed(job.stage, job.name)


# -----------------------------------------------------------------------------
# What each stage runs

# the presentation layer: nothing the validation checks depends on it
NOT_VALIDATED = ("xsa/pipeline.py", "xsa/studies/jobs.py", "xsa/layers.py", "xsa/runs/plot.py", "xsa/base/stats.py",
                 "xsa/studies/__init__.py", "xsa/studies/registry.py", "xsa/studies/scale.py", "xsa/prereg",
                 "xsa/studies/prereg_", "xsa/report/", "xsa/studies/factorial/")


def source_hash() -> str:
    """Hash of the package sources: the validation checks rerun whenever the code they check changes."""
    h = hashlib.sha256()
    for path in sorted((REPO_ROOT / "xsa").rglob("*.py")):
        if path.relative_to(REPO_ROOT).as_posix().startswith(NOT_VALIDATED):
            continue
        h.update(path.relative_to(REPO_ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def notebook_hash(path: Path) -> str | None:
    """Hash of a notebook's code: a stage whose notebook changed is rerun."""
    if not path.exists():
        return None
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    code = "\0".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def recorded_config(run_dir: Path):
    """The config a run folder was trained with, read by value (fields it predates at their
    defaults), or None where the folder holds no run."""
    path = run_dir / "config.json"
    return TrainConfig.from_dict(read_json(path), str(path)) if path.exists() else None


def config_changes(recorded, wanted) -> str:
    """The fields where a recorded config differs from the one asked for, for an error message."""
    flat = lambda c: {**{k: v for k, v in c.to_dict().items() if k != "model"},
                      **{f"model.{k}": v for k, v in c.to_dict()["model"].items()}}
    a, b = flat(recorded), flat(wanted)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return "; ".join(f"{k} (recorded {a.get(k)!r}, asked {b.get(k)!r})" for k in keys) or "none"


def trained(run_dir: Path) -> bool:
    """Whether a run folder holds a run trained to its horizon."""
    summary = run_dir / "summary.json"
    return summary.exists() and read_json(summary).get("complete", False)


def diverged(run_dir: Path, config: TrainConfig) -> bool:
    """Whether the run folder holds the divergence record of this config (compared by value)."""
    record = read_diverged(run_dir)
    if record is None or not isinstance(record.get("config"), dict):
        return False
    return TrainConfig.from_dict(record["config"], str(run_dir / "diverged.json")) == config


def trained_weights(run_dir: Path) -> str | None:
    summary = run_dir / "summary.json"
    return read_json(summary).get("final_weights_sha256") if summary.exists() else None


def jobs_for(stage: str, ctx: Context) -> list[Job]:
    """The jobs of one stage. Built when the stage starts, since they hash what earlier stages wrote."""
    jobs = _jobs(stage, ctx)
    # training is keyed by its config alone, evaluate and diagnostics by the weights and their own
    # parameters, so run records outlive notebook edits; the study-wide stages rerun when theirs change
    if stage not in ("train", "evaluate", "diagnostics"):
        code = notebook_hash(ctx.notebooks / NOTEBOOKS[stage])
        for job in jobs:
            job.upstream["notebook"] = code
    return jobs


def _jobs(stage: str, ctx: Context) -> list[Job]:
    s, study_name, lay = ctx.study, ctx.study.name, ctx.layout
    if stage == "validation":
        return [Job(stage, study_name, dict(s.validation), [], upstream={"source": source_hash()})]
    if stage == "train":
        return [Job(stage, run.run_id,
                    dict(run=run.to_dict(), out_dir=str(lay.run_dir(run)), resume=False, overwrite=False),
                    [lay.run_dir(run) / "summary.json"], index=i)
                for i, run in enumerate(s.runs)]
    if stage == "diagnostics" and s.diagnostics is None:
        return []
    if stage in ("evaluate", "diagnostics"):
        chat = {a.name for a in s.chat_arms}
        jobs = []
        for i, run in enumerate(s.runs):
            if stage == "evaluate" and not s.evaluated(run):
                continue
            rd = lay.run_dir(run)
            if stage == "evaluate":
                evals = ["core", "chat"] if run.arm.name in chat else ["core"]
                params = dict(runs=[str(rd)], bundle=os.environ.get("XSA_EVAL_BUNDLE"), evaluations=evals,
                              table_out=str(lay.beside(stage, run.run_id, "tasks")), **s.evaluate)
                out = rd / "eval.json"
            else:
                params = dict(runs=[str(rd)], out_dir=str(lay.beside(stage, run.run_id, "figures")), **s.diagnostics)
                out = rd / "diagnostics.json"
            # keyed by what the stage reads, the trained weights, and its own parameters: not by the
            # training config's hash, which a new config field would change
            jobs.append(Job(stage, run.run_id, params, [out], index=i, upstream={"weights": trained_weights(rd)}))
        return jobs
    if stage == "throughput":
        opts = {k: v for k, v in s.throughput.items() if k != "presets"}
        return [Job(stage, p, dict(preset=p, out=str(lay.throughput(p)),
                                   out_dir=str(lay.beside(stage, p, "figures")), **opts), [lay.throughput(p)], index=i)
                for i, p in enumerate(s.throughput.get("presets", []))]
    if stage == "paper":
        chosen = dict(leave_out=list(ctx.leave_out)) if ctx.leave_out else {}  # the notebook's default: none
        if ctx.interim:
            chosen["interim"] = True
        return [Job(stage, study_name, dict(study=study_name, results_dir=str(lay.results),
                                            out_dir=str(lay.outputs), **chosen), [], always=True)]
    raise ValueError(f"stage: unknown stage {stage!r} (choose from {', '.join(STAGES)})")


# -----------------------------------------------------------------------------
# Skipping and resuming

def train_config(job: Job):
    """The TrainConfig a train job asks for."""
    return Run.from_dict(job.params["run"]).config()


def recorded_inputs(job: Job, ctx: Context) -> str | None:
    record = ctx.record(job)
    if not record.exists():
        return None
    return json.loads(record.read_text()).get("metadata", {}).get("xsa", {}).get("inputs")


def up_to_date(job: Job, ctx: Context) -> bool:
    """Whether the job's recorded inputs are the ones it asks for: a run folder's config compared by
    value with the study's (TrainConfig.from_dict fills fields the record predates), any other job's
    recorded input hash with its own."""
    if job.stage == "train":
        return recorded_config(Path(job.params["out_dir"])) == train_config(job)
    return recorded_inputs(job, ctx) == job.inputs()


def is_done(job: Job, ctx: Context) -> bool:
    if job.always or ctx.force:
        return False
    if job.stage == "train" and diverged(Path(job.params["out_dir"]), train_config(job)):
        return True  # a final record: trained again only with --force, never counted as a failure
    if not all(p.exists() for p in job.outputs):
        return False
    if job.stage == "train" and not read_json(job.outputs[0]).get("complete", False):
        return False  # stopped early (--max-steps): resumed to the full horizon, never counted as done
    return up_to_date(job, ctx)


def prepare_train(job: Job, ctx: Context) -> None:
    """Resume an interrupted run of the same config; refuse to replace a different one without --force."""
    run_dir = Path(job.params["out_dir"])
    recorded = recorded_config(run_dir)
    if recorded is None:
        return
    if ctx.force:
        job.params["overwrite"] = True
    elif recorded == train_config(job):  # a killed run, or one stopped early (complete: false)
        if state_path(run_dir).exists():
            job.params["resume"] = True
        else:  # killed before its first checkpoint: nothing to keep, start it again
            job.params["overwrite"] = True
    else:
        raise StageError(f"stage train ({job.name}): {run_dir} holds a run of another config "
                         f"({config_changes(recorded, train_config(job))}); rerun with --force to replace it")
