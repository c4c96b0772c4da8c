"""
Running untrusted generated code (HumanEval's programs) in a best-effort Linux sandbox.

run_program(code) -> Outcome, a (passed, status) pair that also records which protections were
active (`layers`) and how long the program ran (`seconds`). Tests are never run inside the
program: with `serve` and `client`, the program only answers calls of one of its functions and
the tests run in the harness's process (xsa/evaluate/calls.py), so a pass is the harness's own
verdict, which nothing the program prints or raises can forge; leaving early (os._exit(0),
SystemExit(0)) is a failure. The wall clock starts when the program does (starting the
interpreter may take up to STARTUP seconds on a busy machine) and, at its end, the program and
everything it started are killed before run_program returns. Output is read from files, so no
descendant holding a pipe can keep the caller waiting.

This module is the harness's side: the fresh folder, the wall clock, the kill, the process
table, the probe of what this machine allows. The program's side (the fresh root, the limits,
the guard, the served calls) is xsa/evaluate/launcher.py.

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
between the program and the network. A served program may answer with any values it likes; the
tests decide whether they are right. Linux only.
"""

from __future__ import annotations

import functools
import grp
import json
import os
import pwd
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from xsa.evaluate import launcher
from xsa.evaluate.calls import Channel, Client, ProgramGone
from xsa.evaluate.launcher import tasks

STARTUP = 60  # seconds the launcher may take to start the program (a busy machine is slow)
REPLY_LIMIT = 1 << 20  # bytes of one reply of a served call
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
                guard: bool = True, serve: str | None = None, client=None) -> Outcome:
    """Run `code` in the sandbox -> Outcome (passed, status), status "passed", "timeout", or
    the last line of stderr. `processes` counts the program's processes and threads together
    (1: it may start neither); `memory_mb` is shared among them.

    Alone, passed means the program ran and exited with status 0. With `serve` (the name of a
    function the program defines) and `client` (the tests: client(call), where call(*args) calls
    that function in the program and returns its value), passed means the tests, run here in the
    harness, finished without an error within the time limit (xsa/evaluate/calls.py)."""
    if processes < 1:
        raise ValueError("processes counts the program itself: at least 1")
    if (serve is None) != (client is None):
        raise ValueError("serve and client go together: the function served and the tests that call it")
    return _run(code, _tier(), timeout, memory_mb, processes, guard, serve, client)


def protections() -> tuple[str, ...]:
    """The layers run_program applies on this machine (with the guard on)."""
    return _tier().layers(guard=True)


# -----------------------------------------------------------------------------
# The parent: prepare a fresh folder, start the launcher, enforce the wall clock, clean up

def _run(code: str, tier: Tier, timeout: float, memory_mb: int, processes: int, guard: bool,
         serve: str | None = None, client=None) -> Outcome:
    channel = Channel() if serve else None
    uid = _fresh_uid() if tier.separate_uid else None
    with tempfile.TemporaryDirectory(prefix="xsa-sandbox-", ignore_cleanup_errors=True) as tmp:
        base = Path(tmp)
        home = _make_home(base, uid, mounted="mount" in tier.namespaces)
        program = base / "program.py"  # root-only: the launcher reads it before giving up root
        program.write_text(code)
        program.chmod(0o600)
        (base / "started").touch(mode=0o600)
        config = dict(program=str(program), started=str(base / "started"), home=str(home), uid=uid, guard=guard,
                      new_root=str(base / "root") if "mount" in tier.namespaces else None,
                      memory=(memory_mb << 20) // processes,  # per process: the total holds across forks
                      cpu=int(timeout) + 1, processes=processes, serve=serve,
                      requests=channel and channel.program_fds()[0], replies=channel and channel.program_fds()[1])
        command = tier.command() + [sys.executable, "-I", launcher.__file__, json.dumps(config)]
        # Output goes to files, not pipes: a descendant holding a pipe open cannot keep us waiting
        # (the call pipes are read with the wall clock running, and closed when it ends).
        with open(base / "stdout", "wb") as out, open(base / "stderr", "wb") as err:
            proc = subprocess.Popen(command, cwd=home, env=_environment(home), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True,
                                    pass_fds=channel.program_fds() if channel else ())
        tests = None
        if channel:
            channel.started()
            tests = Client(client, channel)
            tests.start()
        tracked: dict[int, str] = {}
        try:
            timed_out, start = _wait(proc, base / "started", timeout, tracked, track="pid" not in tier.namespaces)
        finally:
            _kill_everything(proc, tier, uid, tracked)
            if tests:  # the program is gone: a call still waiting ends now
                tests.join(timeout=5)
                channel.close()
        seconds = time.monotonic() - start
        stderr = (base / "stderr").read_bytes().decode(errors="replace")
    if timed_out or (tests and not tests.finished):
        passed, status = False, "timeout"
    elif tests and tests.error is None:
        passed, status = True, "passed"
    elif proc.returncode != 0:
        passed, status = False, _last_line(stderr, proc.returncode)[:200]
    elif tests and isinstance(tests.error, ProgramGone):
        passed, status = False, "exited before its tests finished"
    elif tests:
        passed, status = False, tests.status()
    else:
        passed, status = True, "passed"
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
    in_use = {uid for uid, _ in tasks()}
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
