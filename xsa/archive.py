"""
Restore an earlier study's run records from git history, so the report reads them instead of
quoting them.

    python -m xsa.archive --commit 30bc3ae      # -> results/archive/30bc3ae/runs/<run id>/*.json

The project's first CPU study (commit 30bc3ae: 4 and 6 heads of 64 at widths 256 and 384, on the
stack of that time, three seeds) was replaced by the current presets; its records left results/
with it. This copies each run's config.json, summary.json and provenance.json exactly as that
commit holds them (`git show`, byte for byte), so the rows the paper prints for it are computed
from its records (xsa/books/archive.py). Nothing is retrained; the configs are of an older stack
and are read as plain data, not as today's TrainConfig.

Every archived file's sha256 is committed beside this module (xsa/archive.sha256, in sha256sum's
format), so the bytes are checked, not trusted: git is read with replace objects off (`git replace`
cannot substitute a record), every file must match its manifest line, and a new archive is written
to a temporary folder that is renamed into place only when whole. An existing archive is never
overwritten with different bytes: a mismatch stops with an error naming the file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from xsa.base.records import REPO_ROOT, atomic_write_bytes

FILES = ("config.json", "summary.json", "provenance.json")
ARCHIVE = "archive"  # under results/
MANIFEST = Path(__file__).with_name("archive.sha256")
COMMIT = re.compile(r"^[0-9a-f]{7,40}$")  # an abbreviated or full commit hash, never a ref that moves


def manifest(commit: str) -> dict[str, str]:
    """{path under results/archive/<commit>/: sha256} of an archive the project declares."""
    out = {}
    for line in MANIFEST.read_text().splitlines():
        digest, _, rel = line.partition("  ")
        if rel.startswith(f"{commit}/"):
            out[rel[len(commit) + 1:]] = digest
    return out


def _git(*args: str) -> bytes:
    env = {**os.environ, "GIT_NO_REPLACE_OBJECTS": "1"}  # the bytes the commit holds, not a replacement
    done = subprocess.run(["git", "--no-replace-objects", *args], cwd=REPO_ROOT, capture_output=True,
                          timeout=120, env=env)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.decode().strip() or 'failed'}")
    return done.stdout


def check_commit(commit: str) -> dict[str, str]:
    """The manifest of `commit`, after checking it is a commit hash (not an option, not a moving ref
    such as HEAD) that the project declares an archive of; SystemExit naming it otherwise."""
    if not COMMIT.match(commit or ""):
        raise SystemExit(f"--commit: {commit!r} is not a commit hash (7 to 40 hex digits); refs such as HEAD move")
    wanted = manifest(commit)
    if not wanted:
        known = sorted({line.split("  ", 1)[1].split("/", 1)[0] for line in MANIFEST.read_text().splitlines()})
        raise SystemExit(f"--commit: {commit} is not an archive of {MANIFEST.name} (declared: {', '.join(known)})")
    return wanted


def restore(commit: str, results: Path) -> list[Path]:
    """Write the run records of `commit` under results/archive/<commit>/; return the files written."""
    wanted = check_commit(commit)
    out_root = Path(results) / ARCHIVE / commit
    fresh = not out_root.exists()
    if fresh:  # built whole beside its place, then renamed into it
        out_root.parent.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(dir=out_root.parent, prefix=f".{commit}.building-"))
    else:
        build = out_root
    written = []
    try:
        for rel, digest in sorted(wanted.items()):
            data = _git("show", f"{commit}:results/{rel}")
            if hashlib.sha256(data).hexdigest() != digest:
                raise SystemExit(f"{commit}:results/{rel}: its bytes do not match {MANIFEST.name}; not archived")
            dest = build / rel
            if dest.exists():
                if dest.read_bytes() != data:
                    raise SystemExit(f"{out_root / rel}: differs from {commit}:results/{rel}; not overwritten")
                continue
            atomic_write_bytes(dest, data)
            written.append(out_root / rel)
        if fresh:
            os.rename(build, out_root)
    finally:
        if fresh and build.exists():
            shutil.rmtree(build)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xsa.archive", description=__doc__.split("\n\n")[0].strip(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commit", required=True, help="the commit (its hash) whose results/runs records to restore")
    p.add_argument("--results", default=str(REPO_ROOT / "results"), help="results folder (default: results/)")
    args = p.parse_args(argv)
    try:
        check_commit(args.commit)
    except SystemExit as e:
        p.error(str(e))  # exit status 2
    try:
        written = restore(args.commit, Path(args.results))
    except OSError as e:  # a place that takes no folder (/proc, a read-only disk): one line naming it
        p.error(f"--results {args.results}: cannot write the archive there ({e.strerror or e}: "
                f"{e.filename or args.results})")
    print(f"archive {args.commit}: {len(written)} file(s) written under {Path(args.results) / ARCHIVE / args.commit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
