"""
Restore an earlier study's run records from git history, so the report reads them instead of
quoting them.

    python -m xsa.archive --commit 30bc3ae      # -> results/archive/30bc3ae/runs/<run id>/*.json

The project's first CPU study (commit 30bc3ae: 4 and 6 heads of 64 at widths 256 and 384, on the
stack of that time, three seeds) was replaced by the current presets; its records left results/
with it. This copies each run's config.json, summary.json and provenance.json exactly as that
commit holds them (`git show`, byte for byte), so the rows the paper prints for it are computed
from its records (xsa/report/archive.py). Nothing is retrained; the configs are of an older stack
and are read as plain data, not as today's TrainConfig. An existing archive is never overwritten
with different bytes: a mismatch stops with an error naming the file.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from xsa.records import REPO_ROOT, atomic_write_bytes

FILES = ("config.json", "summary.json", "provenance.json")
ARCHIVE = "archive"  # under results/


def _git(*args: str) -> bytes:
    done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.decode().strip() or 'failed'}")
    return done.stdout


def restore(commit: str, results: Path) -> list[Path]:
    """Write the run records of `commit` under results/archive/<commit>/runs/; return the files written."""
    names = _git("ls-tree", "-r", "--name-only", commit, "--", "results/runs").decode().split()
    wanted = [n for n in names if n.count("/") == 3 and n.rsplit("/", 1)[1] in FILES]
    if not wanted:
        raise SystemExit(f"commit {commit}: no run records under results/runs")
    out_root = Path(results) / ARCHIVE / commit / "runs"
    written = []
    for name in wanted:
        data = _git("show", f"{commit}:{name}")
        dest = out_root / Path(name).relative_to("results/runs")
        if dest.exists():
            if dest.read_bytes() != data:
                raise SystemExit(f"{dest}: differs from {commit}:{name}; not overwritten")
            continue
        atomic_write_bytes(dest, data)
        written.append(dest)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xsa.archive", description=__doc__.split("\n\n")[0].strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commit", required=True, help="the commit whose results/runs records to restore")
    p.add_argument("--results", default=str(REPO_ROOT / "results"), help="results folder (default: results/)")
    args = p.parse_args(argv)
    written = restore(args.commit, Path(args.results))
    print(f"archive {args.commit}: {len(written)} file(s) written under {Path(args.results) / ARCHIVE / args.commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
