"""
The launcher of the sandbox (xsa/evaluate/sandbox.py): `python -I launcher.py CONFIG`, started as
the caller inside the namespaces. It reads the program, builds the fresh root, sets the limits,
gives up root, guards, and runs it; with `serve`, it then answers the harness's calls of one of the
program's functions (the harness runs the tests, in its own process).

It imports nothing of the package: `-I` keeps the caller's environment and paths out, and once the
program runs, only the standard library of the interpreter is there to be read.
"""

from __future__ import annotations

import builtins
import ctypes
import functools
import json
import math
import os
import posix
import resource
import shutil
import subprocess
import sys
from pathlib import Path

FILE_LIMIT = 1 << 20  # bytes any one file (stdout and stderr too) may grow to
HOME_MB = 16  # the tmpfs home: its pages are memory that RLIMIT_AS does not count

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers; elsewhere chroot
SYSTEM_DIRS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
DEVICES = ["null", "zero", "full", "random", "urandom"]


def _launch(config: dict) -> None:
    code = compile(Path(config["program"]).read_text(), "program.py", "exec")
    os.unlink(config["program"])  # read: nothing of it stays on disk
    started = os.open(config["started"], os.O_WRONLY)  # opened now: the new root does not show it
    _libc()  # loaded now: once unprivileged, the interpreter's files may be out of reach
    uid = config["uid"]
    runs_as = os.getuid() if uid is None else uid
    # RLIMIT_NPROC counts every task of the uid: allow `processes` beyond those already running.
    others = sum(n for owner, n in tasks() if owner == runs_as) - (uid is None)  # less this launcher
    if config["new_root"]:
        _enter_new_root(config["new_root"], config["home"], runs_as)
    os.chdir(config["home"])
    _set_limits(config, nproc=others + config["processes"])
    if uid is not None:  # after the limits: once unprivileged, they cannot be raised again
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _no_new_privs()
    if config["guard"]:
        _guard()
    os.write(started, b"1")  # the parent's clock starts now
    os.close(started)
    main = type(sys)("__main__")
    main.__file__ = "program.py"
    sys.modules["__main__"], sys.argv = main, ["program.py"]
    exec(code, main.__dict__)
    if config["serve"]:
        _serve(main.__dict__.get(config["serve"]), config["requests"], config["replies"])


def _serve(function, requests: int, replies: int) -> None:
    """Answer the harness's calls of `function`: one line per call, the arguments' repr in, the
    repr of ("ok", result) or ("error", what was raised) out, until the harness closes `requests`.
    The tests never enter this process, so nothing here can turn into a pass: a reply is only a
    value, which the harness's own tests judge."""
    names = {"__builtins__": {}, "inf": math.inf, "nan": math.nan, "set": set, "frozenset": frozenset}
    with os.fdopen(requests, "r", encoding="utf-8") as calls:
        for line in calls:
            try:
                if not callable(function):
                    raise NameError("the program does not define the function the tests call")
                reply = ("ok", function(*eval(line, names)))
                text = repr(reply)
            except BaseException as error:  # SystemExit too: a reply, never the end of the tests
                text = repr(("error", f"{type(error).__name__}: {error}"[:500]))
            data = (text + "\n").encode("utf-8", errors="replace")
            while data:
                data = data[os.write(replies, data):]


def _set_limits(config: dict, nproc: int) -> None:
    for limit, value in [(resource.RLIMIT_AS, config["memory"]), (resource.RLIMIT_CPU, config["cpu"]),
                         (resource.RLIMIT_FSIZE, FILE_LIMIT), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_NOFILE, 256), (resource.RLIMIT_NPROC, nproc)]:
        resource.setrlimit(limit, (value, value))


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source, target, fstype=None, flags=0, data=None) -> None:
    enc = lambda s: s.encode() if s is not None else None
    _check(_libc().mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _bind(source: str, target: str, flags: int) -> None:
    _mount(source, target, flags=MS_BIND | MS_REC)
    _mount(None, target, flags=MS_BIND | MS_REMOUNT | flags)  # bind flags apply only on a remount


def _enter_new_root(new: str, home: str, uid: int) -> None:
    """Build the fresh root described in the module docstring under `new` and move into it."""
    os.umask(0o022)
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path in _visible_dirs():
        if os.path.islink(path):  # /bin -> usr/bin on merged-/usr systems; a virtual environment's link
            # to its folder elsewhere: a link to where it resolves (which is bound too), under its own parents
            os.makedirs(os.path.dirname(new + path), exist_ok=True)
            os.symlink(os.path.realpath(path), new + path)
        elif os.path.isdir(path):
            os.makedirs(new + path, exist_ok=True)
            _bind(path, new + path, MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.makedirs(new + "/dev")
    for name in DEVICES:
        Path(new, "dev", name).touch()
        _bind(f"/dev/{name}", f"{new}/dev/{name}", MS_NOSUID)
    os.makedirs(new + home)
    _mount("tmpfs", new + home, "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=0700,uid={uid},gid={uid},size={HOME_MB}m,nr_inodes=4096")
    os.chdir(new)
    if os.uname().machine in PIVOT_ROOT:  # pivot_root(".", ".") then detach the old root
        _check(_libc().syscall(PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
        _check(_libc().umount2(b".", MNT_DETACH), "umount old root")
    else:  # chroot: final once the uid has no capabilities
        os.chroot(".")
    os.chdir("/")
    _mount(None, "/", flags=MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _visible_dirs() -> list[str]:
    """System directories, then the interpreter's prefixes not already under one of them."""
    dirs = [d for d in SYSTEM_DIRS if os.path.lexists(d)]
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for prefix in sorted(prefixes | {os.path.realpath(p) for p in prefixes}):
        if not any(prefix == d or prefix.startswith(d + "/") for d in map(os.path.realpath, dirs)):
            dirs.append(prefix)
    return dirs


def _no_new_privs() -> None:
    _check(_libc().prctl(38, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _guard() -> None:
    """nanochat's reliability guard, extended to processes, signals, sockets and ctypes."""
    def blocked(name):
        def refuse(*args, **kwargs):
            raise PermissionError(f"{name} is blocked by the sandbox")
        return refuse

    os_names = ["system", "popen", "fork", "forkpty", "kill", "killpg", "remove",
                "unlink", "rmdir", "removedirs", "rename", "renames", "replace", "truncate", "chmod", "fchmod",
                "lchmod", "chown", "fchown", "lchown", "chroot", "setuid", "setgid", "posix_spawn",
                "posix_spawnp", "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe",
                "spawnv", "spawnve", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnvp", "spawnvpe"]
    for module, names in [(os, os_names), (posix, os_names), (shutil, ["rmtree", "move", "chown"]),
                          (subprocess, ["Popen", "run", "call", "check_call", "check_output", "getoutput",
                                        "getstatusoutput"])]:
        for name in names:
            if hasattr(module, name):
                setattr(module, name, blocked(f"{module.__name__}.{name}"))
    builtins.help = blocked("help")
    for name in ["socket", "_socket", "ssl", "ctypes", "_ctypes", "_posixsubprocess", "multiprocessing",
                 "resource", "pty", "ipdb", "joblib", "psutil", "tkinter"]:
        sys.modules[name] = None  # importing it now raises ImportError


def tasks() -> list[tuple[int, int]]:
    """(real uid, thread count) of every process."""
    tasks = []
    for entry in Path("/proc").iterdir():
        try:
            lines = (entry / "status").read_text().splitlines()
            status = dict(line.split(":", 1) for line in lines if ":" in line)
            tasks.append((int(status["Uid"].split()[0]), int(status["Threads"])))
        except (OSError, KeyError, ValueError):
            pass
    return tasks


if __name__ == "__main__":
    _launch(json.loads(sys.argv[1]))
