"""
Running untrusted generated code (HumanEval's programs) in a best-effort Linux sandbox.

run_program(code) -> Outcome, a (passed, status) pair that also records which protections were
active (`layers`) and how long the program ran (`seconds`). A run passes only if the program
exits with status 0 AND prints a random per-run token that the harness appends after it:
leaving early (os._exit(0), SystemExit(0)) is a failure. The wall clock starts when the program
does (starting the interpreter may take up to STARTUP seconds on a busy machine) and, at its
end, the program and everything it started are killed before run_program returns. Output is
read from files, so no descendant holding a pipe can keep the caller waiting.

The layers, each applied where the machine allows: the first run probes the combinations,
strongest first, and keeps the first that works, so on a weaker machine the sandbox degrades
instead of failing; `Outcome.layers` and protections() name what is active.

  pid-namespace    (util-linux `unshare`, as root or through a user namespace) the program is
                   init of a fresh PID namespace: when it exits or is killed the kernel kills
                   every process in it, setsid and double forks included. Without it,
                   descendants are looked up in /proc every 20 ms while the program runs and
                   killed at the end, and so is every process of a separate uid; a child
                   orphaned between two looks then escapes when running as the caller.
  net-namespace    no network: a loopback interface that is down, so no TCP or UDP, not even to
                   127.0.0.1, and none of the host's abstract unix sockets.
  ipc-namespace    none of the host's SysV IPC or POSIX message queues.
  mount-namespace  a fresh root: a read-only tmpfs holding read-only nosuid bind mounts of the
                   system directories (/usr, /bin, /lib...) and the interpreter's prefixes (its
                   stdlib and installed packages), five /dev nodes, and the one writable place,
                   a 16 MiB tmpfs home that is the cwd, HOME and TMPDIR. Nothing else of the host
                   is there: no /etc, /home, /tmp, /proc, no repository beyond its virtual
                   environment, no data, no devices.
  separate-uid     (a root caller) the program runs as a fresh uid and gid that no account and
                   no other process has, without supplementary groups: file permissions apply
                   to it, RLIMIT_NPROC counts only its processes, it can signal only them.
  nproc            RLIMIT_NPROC: at most `processes` processes and threads at once, the program
                   included, so a fork bomb gets EAGAIN. The kernel exempts real root: this
                   needs separate-uid or a caller who is not root.
  rlimits          RLIMIT_AS of memory_mb / processes each, so the memory cap holds however the
                   program forks; RLIMIT_CPU; RLIMIT_FSIZE 1 MiB (stdout and stderr too);
                   RLIMIT_CORE 0; RLIMIT_NOFILE.
  no-new-privs     setuid binaries cannot raise the program's privileges.
  empty-env        nothing inherited from the caller's environment.
  guard            (guard=True) nanochat's in-process guard, taken further: os.system, fork,
                   exec, kill, file removal, subprocess, sockets, ctypes... raise. Python code
                   can undo it; it turns the obvious attempts into clear errors, and the layers
                   above are the protection.

What it does not guarantee. It is not a hardened container: there is no seccomp filter, so the
whole syscall surface of the kernel is reachable (nested user namespaces included) and a kernel
bug is an escape. Without the mount namespace the program sees the host's files with the
permissions of its uid (world-readable files, world-writable folders such as /tmp) and, run as
the caller, everything the caller can reach. Without the net namespace only the guard stands
between the program and the network. The token is in the program's own memory: code that looks
for it on purpose can forge a pass; the sentinel stops programs that merely leave early.
Linux only.
"""

from __future__ import annotations

import functools
import grp
import json
import os
import pwd
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

FILE_LIMIT = 1 << 20  # bytes any one file (stdout and stderr too) may grow to
STARTUP = 60  # seconds the launcher may take to start the program (a busy machine is slow)
HOME_MB = 16  # the tmpfs home: its pages are memory that RLIMIT_AS does not count
# Imports a module the launcher has not, and reads the stdlib: the sandbox's uid must reach them.
PROBE = "import fractions, os\nopen(os.__file__).read()\n"


class Outcome(tuple):
    """(passed, status), unpacking like the pair it always was; `layers` names the protections
    that were active, `seconds` is the time on the program's clock (from its start until it and
    everything it started were gone)."""

    def __new__(cls, passed: bool, status: str, layers: tuple[str, ...] = (), seconds: float = 0.0):
        outcome = super().__new__(cls, (passed, status))
        outcome.layers, outcome.seconds = layers, seconds
        return outcome


@dataclass(frozen=True)
class Tier:
    """One combination of OS layers: the namespaces unshare creates, and whether a root caller
    runs the program as a fresh uid."""
    namespaces: tuple[str, ...]
    separate_uid: bool

    def command(self) -> list[str]:
        if not self.namespaces:
            return []
        flags = ["--pid", "--fork", "--kill-child", "--net", "--ipc"]
        flags += ["--mount"] if "mount" in self.namespaces else []
        flags += ["--user", "--map-root-user"] if "user" in self.namespaces else []  # non-root callers
        return [shutil.which("unshare"), *flags, "--"]

    def layers(self, guard: bool) -> tuple[str, ...]:
        names = [f"{ns}-namespace" for ns in ("pid", "net", "ipc", "mount") if ns in self.namespaces]
        names += ["separate-uid"] if self.separate_uid else []
        names += ["nproc"] if self.separate_uid or os.geteuid() != 0 else []
        names += ["rlimits", "no-new-privs", "empty-env"] + (["guard"] if guard else [])
        return tuple(names)


def run_program(code: str, timeout: float = 5.0, memory_mb: int = 512, processes: int = 1,
                guard: bool = True) -> Outcome:
    """Run `code` in the sandbox -> Outcome (passed, status), status "passed", "timeout", or
    the last line of stderr. `processes` counts the program's processes and threads together
    (1: it may start neither); `memory_mb` is shared among them."""
    if processes < 1:
        raise ValueError("processes counts the program itself: at least 1")
    return _run(code, _tier(), timeout, memory_mb, processes, guard)


def protections() -> tuple[str, ...]:
    """The layers run_program applies on this machine (with the guard on)."""
    return _tier().layers(guard=True)


# -----------------------------------------------------------------------------
# The parent: prepare a fresh folder, start the launcher, enforce the wall clock, clean up

def _run(code: str, tier: Tier, timeout: float, memory_mb: int, processes: int, guard: bool) -> Outcome:
    token = secrets.token_hex(16)
    uid = _fresh_uid() if tier.separate_uid else None
    with tempfile.TemporaryDirectory(prefix="xsa-sandbox-", ignore_cleanup_errors=True) as tmp:
        base = Path(tmp)
        home = _make_home(base, uid, mounted="mount" in tier.namespaces)
        program = base / "program.py"  # root-only: the launcher reads it before giving up root
        program.write_text(f"{code}\nprint({token!r})\n")
        program.chmod(0o600)
        (base / "started").touch(mode=0o600)
        config = dict(program=str(program), started=str(base / "started"), home=str(home), uid=uid, guard=guard,
                      new_root=str(base / "root") if "mount" in tier.namespaces else None,
                      memory=(memory_mb << 20) // processes,  # per process: the total holds across forks
                      cpu=int(timeout) + 1, processes=processes)
        command = tier.command() + [sys.executable, "-I", __file__, json.dumps(config)]
        # Output goes to files, not pipes: a descendant holding a pipe open cannot keep us waiting.
        with open(base / "stdout", "wb") as out, open(base / "stderr", "wb") as err:
            proc = subprocess.Popen(command, cwd=home, env=_environment(home), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
        tracked: dict[int, str] = {}
        try:
            timed_out, start = _wait(proc, base / "started", timeout, tracked, track="pid" not in tier.namespaces)
        finally:
            _kill_everything(proc, tier, uid, tracked)
        seconds = time.monotonic() - start
        stdout = (base / "stdout").read_bytes()
        stderr = (base / "stderr").read_bytes().decode(errors="replace")
    if timed_out:
        passed, status = False, "timeout"
    elif proc.returncode == 0:
        passed = token.encode() in stdout
        status = "passed" if passed else "exited before its tests finished"
    else:
        passed, status = False, _last_line(stderr, proc.returncode)[:200]
    return Outcome(passed, status, tier.layers(guard), seconds)


def _make_home(base: Path, uid: int | None, mounted: bool) -> Path:
    """The program's cwd, HOME and TMPDIR. With a mount namespace the launcher mounts a tmpfs
    over it; otherwise a fresh uid must be able to reach and own it."""
    home = base / "home"
    home.mkdir()
    if mounted:
        (base / "root").mkdir()  # where the launcher builds the fresh root
    if uid is not None and not mounted:
        base.chmod(0o711)  # traversable, not listable: program.py and the output stay private
        os.chown(home, uid, uid)
        home.chmod(0o700)
    return home


def _environment(home: Path) -> dict[str, str]:
    # Nothing inherited. One thread for numeric libraries: threads count against `processes`.
    return {"HOME": str(home), "TMPDIR": str(home), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


def _fresh_uid() -> int:
    """A uid (and gid) no account, group or running process has, so the run's processes are
    exactly the processes of this uid: RLIMIT_NPROC counts only them, the fallback kill finds
    them all."""
    in_use = {uid for uid, _ in _tasks()}
    while True:
        uid = random.randrange(1 << 30, (1 << 31) - 1)
        if uid not in in_use and not _named(pwd.getpwuid, uid) and not _named(grp.getgrgid, uid):
            return uid


def _named(lookup, number: int) -> bool:
    try:
        lookup(number)
        return True
    except KeyError:
        return False


def _last_line(stderr: str, returncode: int) -> str:
    lines = stderr.strip().splitlines()
    if lines:
        return lines[-1]
    if returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exit {returncode}"


def _wait(proc, started: Path, timeout: float, tracked: dict, track: bool) -> tuple[bool, float]:
    """Wait for the launcher -> (timed out?, when the program started). The clock starts when
    the launcher writes to `started`: a slow start on a busy machine is not the program's time
    (the start itself gets STARTUP seconds). With `track`, note each descendant (pid and start
    time) as it appears: an orphan is reparented away from us, so it must be seen while its
    parent is still ours."""
    start = time.monotonic()
    deadline, running = start + STARTUP, False
    while True:
        if not running and started.stat().st_size:
            start, running = time.monotonic(), True
            deadline = start + timeout
        left = deadline - time.monotonic()
        if left <= 0:
            return True, start
        try:
            proc.wait(timeout=left if running and not track else min(left, 0.02))
            return False, start
        except subprocess.TimeoutExpired:
            if track:
                tracked.update(_descendants([proc.pid]))


def _kill_everything(proc, tier: Tier, uid: int | None, tracked: dict) -> None:
    if "pid" in tier.namespaces and _kill_namespace(proc):
        return
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher's group, while its pid is still ours
        proc.wait()
    _kill_tracked(tracked)
    if uid is not None and os.path.exists("/bin/sh"):
        # kill(-1) as the run's own uid reaches every process of that uid, tracked or not.
        subprocess.run(["/bin/sh", "-c", "kill -KILL -1"], user=uid, group=uid, extra_groups=[], env={},
                       cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_namespace(proc) -> bool:
    """Kill the PID namespace -> is it empty? Killing its init (unshare's only child) makes the
    kernel kill the rest, and unshare exits only after reaping init, which exits only once the
    namespace is empty: unshare's exit is the proof."""
    if proc.poll() is None:
        for pid in _children(proc.pid):
            _signal(pid, signal.SIGKILL)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return False
    return True


def _kill_tracked(tracked: dict) -> None:
    """Kill what `tracked` saw and its descendants, until a look finds none of them alive."""
    for _ in range(5):
        tracked.update(_descendants(tracked))
        alive = [pid for pid, start in tracked.items() if _start_time(pid) == start]  # not a reused pid
        if not alive:
            return
        for pid in alive:
            _signal(pid, signal.SIGKILL)


# -----------------------------------------------------------------------------
# /proc: the process table

def _stat(pid) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (which may hold spaces): [0] state,
    [1] parent, [19] start time."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _parent(pid) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def _start_time(pid) -> str | None:
    fields = _stat(pid)
    return fields[19] if fields and fields[0] != "Z" else None  # a zombie is already dead


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN: look through the table
        return [child for child in _descendants([pid]) if _parent(child) == pid]


def _descendants(roots) -> dict[int, str]:
    """{pid: start time} of every living descendant of `roots` (children of children...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (parent := _parent(entry.name)) is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = {}, list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and (start := _start_time(child)):
                found[child] = start
                todo.append(child)
    return found


def _tasks() -> list[tuple[int, int]]:
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


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


# -----------------------------------------------------------------------------
# Which layers work here: probe once, strongest first

def _tiers() -> list[Tier]:
    root = os.geteuid() == 0
    namespaces = [("pid", "net", "ipc", "mount"), ("pid", "net", "ipc")] if shutil.which("unshare") else []
    if not root:  # unprivileged callers get namespaces through a user namespace
        namespaces = [(*ns, "user") for ns in namespaces]
    return [Tier(ns, drop) for drop in ([True, False] if root else [False]) for ns in [*namespaces, ()]]


@functools.cache
def _tier() -> Tier:
    for tier in _tiers():
        try:
            outcome = _run(PROBE, tier, timeout=10, memory_mb=512, processes=1, guard=True)
        except OSError as error:  # unshare or the interpreter cannot even start
            outcome = Outcome(False, str(error))
        if outcome[0]:
            return tier
    raise RuntimeError(f"the sandbox cannot run Python here: {outcome[1]}")


# -----------------------------------------------------------------------------
# The launcher: `python -I sandbox.py CONFIG`, started as the caller (inside the namespaces), it
# reads the program, builds the fresh root, sets the limits, gives up root, guards, runs it.

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers; elsewhere chroot
SYSTEM_DIRS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]
DEVICES = ["null", "zero", "full", "random", "urandom"]


def _launch(config: dict) -> None:
    code = compile(Path(config["program"]).read_text(), "program.py", "exec")
    os.unlink(config["program"])  # the token now exists only in memory
    started = os.open(config["started"], os.O_WRONLY)  # opened now: the new root does not show it
    _libc()  # loaded now: once unprivileged, the interpreter's files may be out of reach
    uid = config["uid"]
    runs_as = os.getuid() if uid is None else uid
    # RLIMIT_NPROC counts every task of the uid: allow `processes` beyond those already running.
    others = sum(n for owner, n in _tasks() if owner == runs_as) - (uid is None)  # less this launcher
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


def _set_limits(config: dict, nproc: int) -> None:
    import resource
    for limit, value in [(resource.RLIMIT_AS, config["memory"]), (resource.RLIMIT_CPU, config["cpu"]),
                         (resource.RLIMIT_FSIZE, FILE_LIMIT), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_NOFILE, 256), (resource.RLIMIT_NPROC, nproc)]:
        resource.setrlimit(limit, (value, value))


@functools.cache
def _libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes
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
        if os.path.islink(path):  # /bin -> usr/bin on merged-/usr systems
            os.symlink(os.readlink(path), new + path)
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
    import builtins
    import posix
    import shutil
    import subprocess

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


if __name__ == "__main__":
    _launch(json.loads(sys.argv[1]))
