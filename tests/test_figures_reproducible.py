"""The committed figures are what the records draw, to the byte, on any CPU and at any thread count.

The figures are drawn from numbers the estimates fix (as results/estimates/*.json holds them), never
from a machine's last bits (a LAPACK fit or a vector logarithm differs between an AVX-512 and an AVX2
host), so `make paper` on a fresh clone leaves results/figures as git holds it. Each test rebuilds
every figure of the default study from the committed records into a temporary folder (the records
read through links, the estimates written to a copy) and compares the bytes with results/figures.
"""

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xsa.base.records import REPO_ROOT

RESULTS = REPO_ROOT / "results"
WRITTEN = ("estimates", "tables", "figures")  # what a build writes: copied or made, never the committed ones

BUILD = """
import sys
from pathlib import Path
import torch
torch.set_num_threads(int(sys.argv[3]))
from xsa import report
from xsa.studies.registry import get_study
results = Path(sys.argv[1])
report.build(get_study("default", results), results, out_dir=Path(sys.argv[2]))
"""


def view_of_results(tmp: Path) -> Path:
    """A results folder whose records are the committed ones (links) and whose estimates are a copy."""
    view = tmp / "results"
    view.mkdir()
    for p in RESULTS.iterdir():
        if p.name not in WRITTEN:
            (view / p.name).symlink_to(p)
    shutil.copytree(RESULTS / "estimates", view / "estimates")
    return view


def differing(out: Path) -> tuple[list[str], list[str]]:
    """(figures whose bytes differ from the committed ones, committed figures not drawn)."""
    drawn = {p.name for p in (out / "figures").iterdir()}
    committed = {p.name for p in (RESULTS / "figures").iterdir()}
    changed = sorted(n for n in drawn & committed
                     if not filecmp.cmp(out / "figures" / n, RESULTS / "figures" / n, shallow=False))
    return changed, sorted(committed - drawn)


needs_records = pytest.mark.skipif(not (RESULTS / "figures" / "scale.png").exists(), reason="no committed figures")


@needs_records
def test_every_committed_figure_is_rebuilt_to_the_byte(tmp_path):
    from xsa import report
    from xsa.studies.registry import get_study
    view = view_of_results(tmp_path)
    report.build(get_study("default", view), view, out_dir=tmp_path / "out")
    changed, missing = differing(tmp_path / "out")
    assert changed == [] and missing == [], (changed, missing)


@needs_records
def test_the_figures_are_the_same_bytes_at_another_thread_count(tmp_path):
    """The same build in a process with three BLAS and torch threads (the study runs one)."""
    view = view_of_results(tmp_path)
    threads = {k: "3" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    env = {**os.environ, **threads, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", BUILD, str(view), str(tmp_path / "out"), "3"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    changed, missing = differing(tmp_path / "out")
    assert changed == [] and missing == [], (changed, missing)


def test_the_scale_figures_line_is_drawn_from_fixed_logarithms():
    """The fitted line's ends come from logarithms rounded to 12 decimals, which no libm's last bit moves
    for the axis ends and fixed values the figure uses (none within 1e-3 of a rounding boundary)."""
    import math
    from decimal import Decimal

    from xsa.report.scale_section import _log2
    for x in (0.7, 20, 1, 1.2):
        scaled = abs(Decimal(math.log2(x))) * 10 ** 12  # exact: a double is a finite decimal
        assert abs(scaled - int(scaled) - Decimal("0.5")) > Decimal("0.001"), x
        assert _log2(x) == round(math.log2(x), 12)
