"""
One owner per run folder.

Two trainings into one folder at once both finished with exit 0 and left one record of two runs
(every step twice, or the config of one run with the metrics of both). So whatever writes a run
folder holds a lock on it for its whole life:

- a training holds it exclusively: a second training, an evaluation or diagnostics of the folder
  stop at once, naming the holder;
- an evaluation or diagnostics holds it shared: they read the trained weights and write their own
  record (eval.json merges the CORE and chat results under its own lock), so they may run side by
  side, but never beside a training of the same folder.

The lock is flock(2) on a file beside the folder (RUNS/.<run id>.lock, gitignored), not in it, so
`--overwrite` can delete and recreate the folder while its owner holds the lock. The kernel drops
the lock when its process exits, however it exits (kill -9 included): there is no stale lock to
clear by hand.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import socket
import sys
from contextlib import contextmanager
from pathlib import Path


class RunFolderBusy(RuntimeError):
    """Another process owns the run folder; the message names it."""


def lock_path(run_dir) -> Path:
    run_dir = Path(run_dir).absolute()
    return run_dir.parent / f".{run_dir.name}.lock"


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "a process that did not say what it is"
    except OSError:
        return "another process"


def busy(run_dir) -> bool:
    """Whether another process holds the run folder's lock now (a training: exclusively)."""
    path = lock_path(run_dir)
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


@contextmanager
def own_run(run_dir, what: str, shared: bool = False):
    """Hold the run folder's lock while the block runs (`what`: what this process does, for the
    message another process gets). Raises RunFolderBusy at once if it is held the other way, and
    ValueError naming the path if the lock cannot be made (a read-only disk, a file in the way)."""
    path = lock_path(run_dir)
    existing = next(p for p in (path.parent, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"out: {existing} is a file, so {run_dir} cannot be a run folder (nothing was changed)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        if shared:  # a folder no one can write to has no writer to keep out: read it unlocked
            yield None
            return
        raise ValueError(f"out: cannot write the lock of {run_dir} at {path} ({e.strerror})") from None
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderBusy(f"{run_dir} is in use by another process ({_holder(path)}); "
                                f"nothing was changed: wait for it to finish, or use another folder") from None
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        note = f"pid {os.getpid()} on {socket.gethostname()}, {what} since {now}: {' '.join(sys.argv)}"
        os.ftruncate(fd, 0)  # readers share the file: the last one to start is the one named
        os.pwrite(fd, (note + "\n").encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock
