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
`--overwrite` can move the old folder aside (RUNS/.replaced/, never deleted) and start a new one
while its owner holds the lock. The kernel drops the lock when its process exits, however it exits
(kill -9 included): there is no stale lock to clear by hand.

One folder, one lock: the lock is keyed by the folder's resolved path (a symlinked path to a folder
locks the folder), and after flock the file locked must still be the one at the lock's path (a lock
file deleted or replaced meanwhile is not a lock: take it again). The folder itself, once it exists,
is flocked the same way (a training takes it as it creates the folder, hold_folder), so a lock file
deleted under a training lets no second owner in. The lock file is opened without
following a symlink, must be a regular file of one link, and its holder note is rewritten only in a
file that holds nothing else (a file this module did not make is never truncated).
"""

from __future__ import annotations

import datetime
import fcntl
import os
import socket
import stat
import sys
from contextlib import contextmanager
from pathlib import Path

REPLACED = ".replaced"  # under the runs folder: run folders that --overwrite moved aside
# this process's own_run blocks: resolved folder -> a stack of (shared, fds of the folder's flocks)
_HELD: dict[Path, list[tuple[bool, list[int]]]] = {}


class RunFolderBusy(RuntimeError):
    """Another process owns the run folder; the message names it."""


def lock_path(run_dir) -> Path:
    run_dir = Path(run_dir).resolve()  # through symlinks: one folder, one lock
    return run_dir.parent / f".{run_dir.name}.lock"


def _open_lock(path: Path) -> tuple[int, bool]:
    """(fd, whether this call made the file) of the lock file, never through a symlink; ValueError
    naming it if it is anything but a regular file of one link."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), True
    except FileExistsError:
        pass
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError as e:
        if os.path.islink(path):
            raise ValueError(f"lock: {path} is a symlink, not a lock file; nothing was changed (remove it)") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise ValueError(f"lock: {path} is not a lock file (a regular file of one link); nothing was changed "
                         "(remove it)")
    return fd, False


def _same_file(fd: int, path: Path) -> bool:
    """Whether fd is open on the file at path now (not deleted, not replaced)."""
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _note(fd: int, made: bool, what: str) -> None:
    """Write who holds the lock into the lock file: one this call made, or one that holds only an
    earlier holder's note (never another file's content)."""
    if not made:
        old = os.pread(fd, 4096, 0)
        if old and not old.startswith(b"pid "):
            return
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    note = f"pid {os.getpid()} on {socket.gethostname()}, {what} since {now}: {' '.join(sys.argv)}"
    os.ftruncate(fd, 0)  # readers share the file: the last one to start is the one named
    os.pwrite(fd, (note + "\n").encode(), 0)


def _busy_message(run_dir, path: Path) -> str:
    return (f"{run_dir} is in use by another process ({_holder(path)}); "
            f"nothing was changed: wait for it to finish, or use another folder")


def _lock_folder(folder: Path, shared: bool, run_dir, path: Path) -> int | None:
    """flock the folder itself (where it exists) as its lock file is: fd, or None if it is not there."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunFolderBusy(_busy_message(run_dir, path)) from None
    return fd


def hold_folder(run_dir) -> None:
    """Create the run folder (if needed) and flock it under this process's own_run of it: from then on
    a second owner is kept out by the folder itself, whatever happens to the lock file. A training
    (the exclusive owner) also removes the temporary files killed atomic writes left there."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    key = run_dir.resolve()
    if _HELD.get(key):
        shared, fds = _HELD[key][-1]
        if not any(_same_file(f, key) for f in fds):  # not the folder own_run already holds
            fd = _lock_folder(key, shared, run_dir, lock_path(run_dir))
            if fd is not None:
                fds.append(fd)
        if not shared:  # the one writer now: a temporary file here (ckpt/ and sft/ included) is a killed atomic write's
            for tmp in run_dir.rglob(".*.tmp"):
                tmp.unlink(missing_ok=True)


def move_aside(run_dir) -> Path:
    """Move a run folder that --overwrite replaces to RUNS/.replaced/<run id>.<UTC time> (under its
    lock): the old record is kept, never deleted. Returns where it went."""
    run_dir = Path(run_dir)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    dest = run_dir.parent / REPLACED / f"{run_dir.name}.{stamp}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.rename(run_dir, dest)
    return dest


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
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        fd = None
    folder = Path(run_dir).resolve()
    if fd is None or not _same_file(fd, path):  # no lock file, or a replaced one: ask the folder
        if fd is not None:
            os.close(fd)
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return False
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
    path, folder = lock_path(run_dir), Path(run_dir).resolve()
    existing = next(p for p in (path.parent, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"out: {existing} is a file, so {run_dir} cannot be a run folder (nothing was changed)")
    for _ in range(100):  # a lock file deleted or replaced between open and flock: take it again
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, made = _open_lock(path)
        except OSError as e:
            if shared:  # a folder no one can write to has no writer to keep out: read it unlocked
                yield None
                return
            raise ValueError(f"out: cannot write the lock of {run_dir} at {path} ({e.strerror})") from None
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunFolderBusy(_busy_message(run_dir, path)) from None
        if _same_file(fd, path):
            break
        os.close(fd)
    else:
        raise RunFolderBusy(f"{run_dir}: its lock file {path} keeps being replaced; nothing was changed")
    fds = [fd]
    try:
        held = _lock_folder(folder, shared, run_dir, path)
        fds += [held] if held is not None else []
        _note(fd, made, what)
        _HELD.setdefault(folder, []).append((shared, fds))
        try:
            yield path
        finally:
            _HELD[folder].pop()
    finally:
        for f in fds:
            os.close(f)  # releases the locks
