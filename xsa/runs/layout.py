"""
Where a study's outputs go, in one place (the pipeline and the notebooks run by hand both ask it):
run records under <results>/runs/<run id>/, throughput records under <results>/throughput/, each
stage's executed notebook under <results>/executed/<study>/, and the default study's tables,
figures and paper in <results>/tables, <results>/figures and <paper>/ (any other study's under
<results>/<study>/ and <paper>/<study>/, so a smoke run never replaces the committed paper).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xsa.base.records import REPO_ROOT
from xsa.stack.spec import Run

# the notebook of each stage that runs one (the data stage is a function of the pipeline)
NOTEBOOKS = {
    "validation": "00_validation.ipynb",
    "train": "01_train.ipynb",
    "evaluate": "02_evaluate.ipynb",
    "diagnostics": "03_diagnostics.ipynb",
    "throughput": "04_throughput.ipynb",
    "paper": "05_paper.ipynb",
}


@dataclass(frozen=True)
class Layout:
    """Every output path of a study, in one place."""
    results: Path
    paper_root: Path
    study: str

    def run_dir(self, run: Run) -> Path:
        return self.results / "runs" / run.run_id

    def throughput(self, preset: str) -> Path:
        return self.results / "throughput" / f"{preset}.json"

    @property
    def outputs(self) -> Path:
        """Where the study's tables/ and figures/ go (the default study owns results/ itself)."""
        return self.results if self.study == "default" else self.results / self.study

    @property
    def paper(self) -> Path:
        return self.paper_root if self.study == "default" else self.paper_root / self.study

    def executed(self, stage: str, job_name: str) -> Path:
        """The executed notebook of a job (study-wide stages: one per study)."""
        stem = Path(NOTEBOOKS[stage]).stem
        folder = self.results / "executed" / self.study
        return folder / f"{stem}.ipynb" if stage in ("validation", "paper") else folder / stem / f"{job_name}.ipynb"

    def beside(self, stage: str, job_name: str, what: str) -> Path:
        """A job's extra outputs (per-run tables and figures) beside its executed notebook."""
        return self.executed(stage, job_name).with_suffix("").with_name(f"{job_name}_{what}")


def default_layout(study: str = "default") -> Layout:
    """The layout of the repository's own results/ and paper/ (what notebooks run by hand and
    `python -m xsa.<stage>` write to when no path is given)."""
    return Layout(REPO_ROOT / "results", REPO_ROOT / "paper", study)
