"""
The paper pipeline: run a study's stage notebooks in order through papermill, then build paper/.

    python -m xsa.pipeline --study default            # the CPU-scale study (make paper)
    python -m xsa.pipeline --study smoke              # the whole pipeline in minutes (make paper STUDY=smoke)
    python -m xsa.pipeline --study default --stages train evaluate --force
    python -m xsa.pipeline --study default --shard 0/2 &  python -m xsa.pipeline --study default --shard 1/2

Stages, in order (the list is data: STAGES): validation, data, train (one notebook per run),
evaluate and diagnostics (one per run), throughput (one per preset), paper. Each executed notebook
is kept as the record of its stage under <results>/executed/<study>/. A job (xsa/studies/jobs.py) is skipped
when its outputs exist for the same inputs: training compares the run record's config by value, the
other stages a hash of their parameters and upstream record stored in the executed notebook.
`--force` reruns. A half-finished training run resumes from its checkpoint. A failing stage keeps its
executed notebook (with the error in it) and the pipeline stops with exit status 1, naming it.

Paths: the pipeline owns them (`Layout`). Run records go to <results>/runs/<run id>/, throughput
records to <results>/throughput/; the default study's tables, figures and paper to
<results>/tables, <results>/figures and <paper>/, any other study's to <results>/<study>/ and
<paper>/<study>/, so a smoke run never replaces the committed paper. Every path reaches a notebook as
a parameter, and a parameter the notebook does not declare in its `parameters` cell stops the
pipeline before the notebook runs.

`--shard K/N` runs job i of every stage only if i % N == K, so N processes share a machine's cores
(on a small CPU, two one-thread processes train faster than one two-thread process). A run's
evaluate and diagnostics jobs have the run's index, so they land in the shard that trained it;
the study-wide stages (validation, paper) belong to shard 0. Build the data first (--stages
validation data), and the paper after every shard has finished (--stages paper).

The paper stage builds only from a whole record set (xsa/checks/integrity.py): a damaged or
missing record stops it before it writes; `--leave-out RUN_ID ...` leaves runs out on purpose,
and the paper names them.

`--device cuda` (make gpu-study passes it) checks before any stage that the stages will find that
device: the notebooks pick theirs by auto-detection, in this same environment, and would otherwise
fall back to the CPU without a word where torch sees no GPU (a driver older than its CUDA build).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import warnings
from pathlib import Path

from xsa.base.common import autodetect_device
from xsa.data import ensure_data
from xsa.data.climbmix import tokens_read
from xsa.studies.jobs import (STAGES, Context, Job, StageError, config_changes, diverged, is_done, jobs_for, prepare_train,
                      recorded_config, train_config, trained)
from xsa.stack.checkpoint import model_path
from xsa.runs.layout import NOTEBOOKS, Layout, default_layout  # noqa: F401 (default_layout: the notebooks)
from xsa.report.export import export_paper, paper_runs, stable_notebook
from xsa.checks.paper_checks import check_paper_stage
from xsa.base.records import REPO_ROOT, atomic_write_text, git_state, read_json
from xsa.checks.integrity import known_runs  # leave_out may name the robustness study's runs
from xsa.base.runlock import RunFolderBusy, busy, own_run
from xsa.studies.registry import ADAPTIVE, get_study


# -----------------------------------------------------------------------------
# Running and recording

def check_parameters(job: Job, notebook: Path) -> None:
    """Refuse parameters the notebook does not declare: papermill would only warn, and the notebook
    would run with its own default (an XSA run in a baseline's folder, say)."""
    import papermill as pm  # lazy: start-up time (--help and --status run no notebook)
    declared = set(pm.inspect_notebook(str(notebook)))
    unknown = sorted(set(job.params) - declared)
    if unknown:
        raise StageError(f"stage {job.stage} ({job.name}): {notebook} does not declare the parameter(s) "
                         f"{', '.join(unknown)} in its parameters cell (it declares: {', '.join(sorted(declared))})")


def check_outputs(job: Job) -> None:
    """After a job: its outputs exist, and a train job's run record is the config it asked for."""
    missing = [str(p) for p in job.outputs if not p.exists()]
    if missing:
        raise StageError(f"stage {job.stage} ({job.name}) finished without writing {', '.join(missing)}")
    if job.stage == "train":
        got = recorded_config(Path(job.params["out_dir"]))
        if got != train_config(job):
            raise StageError(f"stage train ({job.name}): {job.params['out_dir']} records another config than "
                             f"the study asked for ({config_changes(got, train_config(job))})")
        if not read_json(job.outputs[0]).get("complete", False):
            raise StageError(f"stage train ({job.name}): the run stopped before its horizon (complete: false)")


# stages whose figures are drawn again from their records or kept as files beside the notebook
NO_IMAGES = ("train", "evaluate", "diagnostics", "throughput")


def compact(nb, stage: str):
    """The executed notebook as it is kept: each run of stream outputs merged into one and every
    carriage-return overwrite dropped (nbconvert's CoalesceStreamsPreprocessor), so a progress bar's
    thousands of refreshes become its last state; and for a per-run or per-preset stage, its images
    dropped: they are drawn from the records git keeps (metrics.jsonl, diagnostics.json) whenever the
    notebook runs, and the throughput stage saves its figure as files beside it. Applying it twice
    changes nothing."""
    from nbconvert.preprocessors import CoalesceStreamsPreprocessor  # lazy: start-up time (--help, --status)
    nb = CoalesceStreamsPreprocessor().preprocess(nb, {})[0]
    if stage in NO_IMAGES:
        for cell in nb.cells:
            if cell.get("outputs"):
                cell.outputs = [o for o in cell.outputs if not any(k.startswith("image/") for k in o.get("data", {}))]
    return nb


def compact_records(folder: Path) -> tuple[int, int, int]:
    """Rewrite every executed notebook under `folder` through compact (atomically, a notebook at a time):
    (notebooks, bytes before, bytes after)."""
    import nbformat  # lazy: start-up time (--help and --status run no notebook)
    count = before = after = 0
    for path in sorted(Path(folder).rglob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        stage = nb.metadata.get("xsa", {}).get("stage", "")
        text = stable_notebook(compact(nb, stage))
        count, before, after = count + 1, before + path.stat().st_size, after + len(text.encode())
        if text != path.read_text(encoding="utf-8"):
            atomic_write_text(path, text)
    return count, before, after


def execute(job: Job, ctx: Context) -> Path:
    """Run the job's notebook with papermill; stamp the executed copy with the job's inputs."""
    import nbformat  # lazy: start-up time (--help and --status run no notebook)
    import papermill as pm  # lazy: start-up time (--help and --status run no notebook)

    notebook = ctx.notebooks / NOTEBOOKS[job.stage]
    if not notebook.exists():
        raise StageError(f"stage {job.stage}: notebook {notebook} does not exist "
                         f"(choose the stages to run with --stages)")
    check_parameters(job, notebook)
    record = ctx.record(job)
    record.parent.mkdir(parents=True, exist_ok=True)
    # papermill writes its output as the notebook runs: into a temporary file beside the record, so a
    # killed build or a full disk never leaves a tracked record (the paper's) half-written; the record is
    # replaced only by a whole notebook (a failing one too: it shows the error)
    running = record.with_name(f".{record.name}.{os.getpid()}.tmp")
    try:
        try:
            with warnings.catch_warnings():  # the temporary name is no .ipynb, on purpose (gitignored)
                warnings.filterwarnings("ignore", message="The specified file .* does not end in")
                pm.execute_notebook(str(notebook), str(running), parameters=job.params, kernel_name="python3",
                                    cwd=str(REPO_ROOT), progress_bar=False, log_output=False)
        except Exception as e:  # papermill saved the notebook with the failing cell before raising
            if running.exists():
                os.replace(running, record)
            raise failed(job, record, e) from None
        nb = nbformat.read(str(running), as_version=4)
        try:
            check_outputs(job)
        except StageError:
            os.replace(running, record)
            raise
    finally:
        running.unlink(missing_ok=True)
    nb = compact(nb, job.stage)
    if "papermill" in nb.metadata:  # the record's own path, not the temporary one papermill wrote to
        nb.metadata["papermill"]["output_path"] = str(record)
    nb.metadata["xsa"] = {"stage": job.stage, "job": job.name, "inputs": job.inputs()}
    atomic_write_text(record, stable_notebook(nb))  # no run times or absolute paths: a rerun changes nothing
    return record


def failed(job: Job, record: Path, e: Exception) -> StageError:
    """The stage's failure, naming its executed notebook, with the error's last lines."""
    msg = str(e).strip().splitlines()
    # a damaged record set lists every file: keep the whole list, not only its last lines
    tail = next((msg[i:] for i, line in enumerate(msg) if line.lstrip().startswith("RecordError:")), msg[-6:])
    return StageError(f"stage {job.stage} ({job.name}) failed; its executed notebook is {record}\n  "
                      + "\n  ".join(tail))


def run_data(ctx: Context, stages) -> None:
    """Build (or find) the study's data, unless every run that reads it is already up to date:
    a fresh clone with committed records rebuilds the paper without building the corpus."""
    readers = [s for s in ("train", "evaluate", "diagnostics") if s in stages]
    if not ctx.force and all(is_done(job, ctx) for s in readers for job in jobs_for(s, ctx)):
        print("[data] every run that reads the data is up to date: not needed", flush=True)
        return
    for subset in ctx.study.data_subsets():
        t0 = time.time()
        # ClimbMix is downloaded for what the study's most-reading run reads (the registry corpora are whole)
        horizon = max(tokens_read(r.config()) for r in ctx.study.runs if r.config().data == subset)
        try:
            path = ensure_data(subset, tokens=horizon)
        except Exception as e:
            raise StageError(f"stage data (subset {subset!r}) failed: {type(e).__name__}: {e}") from None
        print(f"[data] {subset}: {path} ({time.time() - t0:.0f} s)", flush=True)


def run_stage(stage: str, ctx: Context, stages=STAGES) -> Path | None:
    if stage == "data":
        run_data(ctx, stages)
        return None
    if stage == "train" and redeclare(ctx):  # an adaptive study: the next run is the first pending one
        return run_adaptive_train(ctx)
    jobs, last = [j for j in jobs_for(stage, ctx) if ctx.mine(j.index)], None
    for i, job in enumerate(jobs, 1):
        tag = f"[{stage} {i}/{len(jobs)}] {job.name}"
        if is_done(job, ctx):
            print(f"{tag}: up to date, skipped", flush=True)
            last = ctx.record(job)
            continue
        run_dir = Path(job.params["runs"][0]) if stage in ("evaluate", "diagnostics") else None
        if run_dir and not trained(run_dir):
            print(f"{tag}: not trained to its horizon yet, skipped (run the train stage first)", flush=True)
            continue
        if run_dir and not model_path(run_dir).exists():
            # a record trained elsewhere: git holds the run's record, never its weights
            print(f"{tag}: its weights ({model_path(run_dir)}) are not in this checkout, skipped "
                  f"(the training log's final evaluation still records the per-layer diagnostics)", flush=True)
            continue
        last = run_job(tag, job, ctx)
    return last


def run_job(tag: str, job: Job, ctx: Context) -> Path:
    """Run one job that is not up to date (a training resumes where it can), saying so."""
    if job.stage == "train":
        check_clean(job, ctx)
        prepare_train(job, ctx)
    how = " (resuming)" if job.params.get("resume") else ""
    print(f"{tag}: running{how} -> {ctx.record(job)}", flush=True)
    t0 = time.time()
    try:
        record = execute(job, ctx)
    except StageError:
        # a run that diverged wrote its divergence record (xsa/runs/diverged.py): an outcome of the study
        # (a learning-rate sweep reaches rates that diverge), not a failure of the pipeline
        if job.stage != "train" or not diverged(Path(job.params["out_dir"]), train_config(job)):
            raise
        print(f"{tag}: diverged after {time.time() - t0:.0f} s (recorded in its diverged.json)", flush=True)
        return ctx.record(job)
    print(f"{tag}: done in {time.time() - t0:.0f} s", flush=True)
    return record


def check_clean(job: Job, ctx: Context) -> None:
    """A registered study's run trains from a commit: uncommitted code changes stop it, unless
    XSA_ALLOW_DIRTY=1 says so on purpose (its provenance then records git_dirty: true)."""
    if ctx.study.preregistered and os.environ.get("XSA_ALLOW_DIRTY") != "1" and git_state()["git_dirty"]:
        raise StageError(f"stage train ({job.name}): the code has uncommitted changes, and a run of the registered "
                         f"study {ctx.study.name!r} trains from a commit (commit them, or set XSA_ALLOW_DIRTY=1 to "
                         "train anyway; the run's provenance then says git_dirty: true)")


def redeclare(ctx: Context) -> bool:
    """Read an adaptive study's declared runs again from the records (xsa/studies/rules.py); False for a
    fixed study."""
    if ctx.study.name not in ADAPTIVE:
        return False
    ctx.study = get_study(ctx.study.name, ctx.layout.results)
    return True


def run_adaptive_train(ctx: Context) -> Path | None:
    """Train an adaptive study in its declared order, declaring it again after every run: a run its
    rules add ahead of the rest (the precision rule's next seeds, the arms at a newly selected LR)
    trains next, as the pre-registration's priorities say, not at the end of the pass."""
    last, done = None, 0
    while True:
        # a run another process trains now (a shard whose share the new declaration moved) is its
        pending = [j for j in jobs_for("train", ctx)
                   if ctx.mine(j.index) and not is_done(j, ctx) and not busy(j.params["out_dir"])]
        if not pending:
            print(f"[train] {ctx.study.name}: no run of this shard left to train ({done} this pass)",
                  flush=True)
            return last
        tag = f"[train {done + 1}, {len(pending)} pending] {pending[0].name}"
        try:
            last = run_job(tag, pending[0], ctx)
        except StageError:
            # two processes picked the same run at once and the other took its folder first: it is the other's
            if not busy(pending[0].params["out_dir"]):
                raise
            print(f"{tag}: taken by another process as it started, skipped", flush=True)
            continue
        done += 1
        redeclare(ctx)


# -----------------------------------------------------------------------------

def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N) with 0 <= K < N."""
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"shard: {text!r} is not K/N (e.g. 0/2)") from None
    if not 0 <= k < n:
        raise ValueError(f"shard: {text!r} needs 0 <= K < N")
    return k, n


def check_device(device: str) -> None:
    """Stop before any stage unless this machine has `device` (ValueError, one line): for CUDA, a GPU
    torch sees and can run on, with what torch.compile needs (xsa.gpu_check.cuda_problems), not merely
    a CUDA build."""
    if device.startswith("cuda"):
        from xsa.gpu_check import cuda_problems  # lazy: start-up time (its parts import the evaluations)
        problems = cuda_problems()
        if problems:
            raise ValueError(f"--device {device}: {'; '.join(problems)}")
    autodetect_device(device)  # a name that is no device, or an MPS this machine lacks


@contextlib.contextmanager
def paper_lock(paper: Path):
    """Hold the paper folder's lock (flock on PAPER/../.<name>.lock, gitignored; the kernel drops it
    however the process ends) while the paper stage builds; StageError naming the holder if it is held."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(own_run(paper, "the paper stage"))
        except RunFolderBusy as e:
            raise StageError(f"stage paper: {e}") from None
        yield


def run_pipeline(study: str, stages=STAGES, results="results", paper="paper", notebooks=None,
                 force: bool = False, shard: str = "0/1", leave_out=(), interim: bool = False,
                 device: str | None = None) -> dict:
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise StageError(f"stages: unknown stage {unknown[0]!r} (choose from {', '.join(STAGES)})")
    if device:
        check_device(device)
    layout = Layout(Path(results).resolve(), Path(paper).resolve(), study)
    ctx = Context(get_study(study, layout.results), layout, Path(notebooks or REPO_ROOT / "notebooks").resolve(),
                  force, parse_shard(shard), tuple(leave_out or ()), interim)
    if "paper" in stages:
        check_paper_stage(ctx.study, layout.paper, ctx.leave_out, known_runs(ctx.study, layout.results))
    where = f" (shard {shard})" if ctx.shard[1] > 1 else ""
    print(f"study {study}: {len(ctx.study.runs)} runs, {ctx.study.scale}; stages: {', '.join(stages)}{where}",
          flush=True)
    # one paper build at a time: a second one stops at once, naming the first, instead of both
    # rewriting the same tables, figures, executed notebook and paper
    with paper_lock(layout.paper) if "paper" in stages else contextlib.nullcontext():
        paper_nb = None
        for stage in [s for s in STAGES if s in stages]:  # always in pipeline order
            record = run_stage(stage, ctx, stages)
            if stage == "paper":
                paper_nb = record
        if paper_nb is None:
            return {}
        out = export_paper(paper_nb, ctx.layout.paper, paper_runs(ctx.study))
    print(f"paper: {out['html']}\n       {out['md']}")
    if out["pdf"]:
        print(f"       {out['pdf']} (PDF engine: {out['pdf_engine']})")
    else:
        what = ("the committed one is kept as it is, and may not be this build's" if out.get("kept") else
                "was not written")
        print(f"paper: no PDF: no PDF engine on this machine, so {ctx.layout.paper / 'paper.pdf'} {what} "
              "(make browser installs Debian's chromium; or install pandoc and texlive-xetex), then make report")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xsa.pipeline", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", default="default", help="study to run (smoke, default, gpu); see xsa/studies/registry.py")
    p.add_argument("--stages", nargs="+", default=list(STAGES), metavar="STAGE",
                   help=f"stages to run, a subset of: {' '.join(STAGES)} (default: all)")
    p.add_argument("--force", action="store_true", help="rerun stages even when their outputs are up to date")
    p.add_argument("--shard", default="0/1", metavar="K/N",
                   help="run only job i of each stage with i %% N == K, to share the cores between N processes")
    p.add_argument("--results", default=str(REPO_ROOT / "results"), help="results folder (default: results/)")
    p.add_argument("--paper", default=str(REPO_ROOT / "paper"), help="where the paper goes (default: paper/)")
    p.add_argument("--notebooks", default=None, help="folder of the stage notebooks (default: notebooks/)")
    p.add_argument("--status", action="store_true",
                   help="print how many of the study's declared runs are trained; exit 0 when all are, 3 when not "
                        "(an adaptive study declares more runs as records land: `make study` trains until 0)")
    p.add_argument("--leave-out", nargs="+", default=[], metavar="RUN_ID",
                   help="paper stage: leave these runs out on purpose (the paper names them); any other "
                        "run with a missing or damaged record stops the paper (runs of the study or of its "
                        "robustness study)")
    p.add_argument("--interim", action="store_true",
                   help="paper stage: build while the robustness study still trains (its runs without a "
                        "record are allowed, and its open rows say interim); by default every declared run "
                        "must be whole")
    p.add_argument("--device", default=None, metavar="DEVICE",
                   help="the device the stages must find (cpu, cuda, cuda:N, mps), checked before any stage; "
                        "the notebooks auto-detect it (default: no check)")
    p.add_argument("--compact-records", nargs="+", metavar="FOLDER", default=None,
                   help="rewrite the executed notebooks under these folders as the pipeline now keeps them "
                        "(progress bars at their last state, a per-run stage without images) and exit")
    args = p.parse_args(argv)
    try:  # before anything, --status included: 0/0 is no share of the jobs
        parse_shard(args.shard)
    except ValueError as e:
        p.error(f"--{e}")
    if args.compact_records:
        executed = (Path(args.results) / "executed").resolve()
        for folder in args.compact_records:
            if not Path(folder).is_dir():
                p.error(f"--compact-records: {folder} is not a folder")
            if not Path(folder).resolve().is_relative_to(executed):  # the pipeline's records, nobody else's files
                p.error(f"--compact-records: {folder} is not inside {executed}, where the pipeline keeps its records")
            n, before, after = compact_records(Path(folder))
            print(f"{folder}: {n} executed notebooks, {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB", flush=True)
        return 0
    if args.status:
        if Path(args.results).exists() and not Path(args.results).is_dir():
            p.error(f"--results {args.results}: a file, not a results folder")
        try:
            study = get_study(args.study, Path(args.results).resolve())
        except ValueError as e:
            p.error(str(e))  # exit status 2, naming the study
        layout = Layout(Path(args.results).resolve(), Path(args.paper).resolve(), args.study)
        # a run that diverged is final too: its record is its divergence (xsa/runs/diverged.py)
        gone = sum(diverged(layout.run_dir(r), r.config()) for r in study.runs)
        done = sum(trained(layout.run_dir(r)) for r in study.runs) + gone
        print(f"study {args.study}: {done} of {len(study.runs)} declared runs trained"
              + (f" ({gone} of them diverged)" if gone else ""), flush=True)
        return 0 if done == len(study.runs) else 3
    try:
        run_pipeline(args.study, args.stages, args.results, args.paper, args.notebooks, args.force, args.shard,
                     args.leave_out, args.interim, args.device)
    except (StageError, ValueError, OSError) as e:  # an OSError (a full disk) names its file
        print(f"pipeline stopped: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
