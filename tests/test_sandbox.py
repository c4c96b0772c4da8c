"""The HumanEval sandbox: each escape measured on the old runner (a subprocess with per-process
limits, run as the caller) stays closed. The OS layers are tested with the in-process guard off
(guard=False), so the guard, which Python can undo, is not what holds."""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from xsa.evaluate import chat, sandbox
from xsa.base.records import REPO_ROOT

LONG = 60.0  # for programs that end on their own: the limit matters only on a starved machine
ADD = {"prompt": 'def add(a, b):\n    """Add two numbers."""\n', "entry_point": "add",
       "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"}


def needs(*layers):
    """Skip unless this machine's sandbox has `layers` (without them the escape is open, and the
    docstring says so)."""
    missing = [layer for layer in layers if layer not in sandbox.protections()]
    if missing:
        pytest.skip(f"the sandbox here lacks {missing} (active: {sandbox.protections()})")


def running(marker: str) -> bool:
    """Is a process with `marker` in its command line alive?"""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                return True
        except OSError:
            pass
    return False


@pytest.fixture
def open_dir():
    """A world-writable folder in /tmp: only the sandbox's own layers keep a program out of it."""
    path = Path(tempfile.mkdtemp(prefix="xsa-sandbox-test-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


@pytest.mark.parametrize("exit", ["import os\nos._exit(0)", "raise SystemExit(0)", "import sys\nsys.exit()"])
def test_leaving_before_the_tests_run_is_not_a_pass(exit):
    reply = f"```python\ndef add(a, b):\n    return a - b\n\n{exit}\n```"  # wrong, and leaves before check()
    ok, status = chat.run_humaneval(ADD, reply, timeout=LONG)
    assert (ok, status) == (False, "exited before its tests finished")


# The forgeries of the old pass signal (a token the harness appended to the program and looked for in
# its output): each scored a pass there. Here the tests run in the harness, so each is a failure.
FORGERIES = {
    # print every string constant of the program's own code object (the token was one), exit 0
    "token from the code object": "import sys, os\nfor c in sys._getframe().f_code.co_consts:\n    print(c)\n"
                                  "sys.stdout.flush()\nos._exit(0)\n",
    # a failing assert ends the program: a hook prints the constants of every frame it passed, exits 0
    "token from an exception hook": "import sys, os\ndef hook(kind, error, tb):\n    while tb:\n"
                                    "        [print(c) for c in tb.tb_frame.f_code.co_consts if isinstance(c, str)]\n"
                                    "        tb = tb.tb_next\n    sys.stdout.flush()\n    os._exit(0)\n"
                                    "sys.excepthook = hook\n",
    # write forged replies into every descriptor the program might share with the harness
    "forged replies": "import os\nfor fd in range(3, 64):\n    try:\n"
                      "        os.write(fd, repr(('ok', True)).encode() + b'\\n' * 100)\n"
                      "    except OSError:\n        pass\n",
    # an answer that compares equal to anything the tests expect
    "an object equal to everything": "class Any:\n    def __eq__(self, other):\n        return True\n"
                                     "    def __repr__(self):\n        return '0'\n"
                                     "def add(a, b):\n    return Any()\n",
    # claim the pass in every form the harness might look for, then leave with status 0
    "printed verdict": "print('passed')\nprint(True)\nraise SystemExit(0)\n",
}


@pytest.mark.parametrize("forgery", FORGERIES.values(), ids=FORGERIES.keys())
def test_a_pass_cannot_be_forged_from_inside_the_program(forgery):
    reply = f"```python\ndef add(a, b):\n    return a - b\n\n{forgery}```"  # wrong answers
    ok, status = chat.run_humaneval(ADD, reply, timeout=LONG)
    assert not ok, status
    right = f"```python\ndef add(a, b):\n    return a + b\n```"
    assert chat.run_humaneval(ADD, right, timeout=LONG) == (True, "passed")  # the check itself works


def test_the_tests_never_enter_the_program():
    """The program sees the calls' arguments, never the expected values."""
    secret = ADD | {"test": "def check(candidate):\n    assert candidate(2, 3) == 5, 'expected-value-7d3f'\n"}
    reply = ("```python\nimport sys\ndef add(a, b):\n"
             "    return [str(c) for c in sys._getframe(1).f_code.co_consts] + [repr(sys.modules)]\n```")
    ok, status = chat.run_humaneval(secret, reply, timeout=LONG)
    assert not ok and "expected-value-7d3f" in status  # the assert's message: raised here, in the harness
    program = chat.humaneval_program(secret, reply)
    assert "expected-value-7d3f" not in program and "check" not in program


# a reply whose set elements all hash to 0 (multiples of 2**61 - 1): quadratic to build, just under 1 MB
COLLIDING = ("class S:\n    def __repr__(self):\n"
             "        return '{' + ','.join(str(i * (2**61 - 1)) for i in range(1, 40000)) + '}'\n"
             "def add(a, b):\n    return S()\n")


def test_a_hostile_reply_is_refused_within_bounds():
    from xsa.evaluate.calls import MAX_DEPTH, literal
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="elements of sets and dicts"):
        literal("('ok', {" + ",".join(str(i * (2**61 - 1)) for i in range(1, 40000)) + "})")
    with pytest.raises(ValueError, match="nested more than"):
        literal("[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2))
    assert time.monotonic() - t0 < 5
    assert literal("('ok', {1, 2}, {'a': [1.5, -2, inf]})") == ("ok", {1, 2}, {"a": [1.5, -2, float("inf")]})
    t0 = time.monotonic()
    ok, status = chat.run_humaneval(ADD, f"```python\n{COLLIDING}```", timeout=5)
    assert not ok and time.monotonic() - t0 < 30, status  # the harness's own limit holds


def test_the_wall_clock_holds_while_a_setsid_child_keeps_stderr_open():
    code = ("import os, time\n"
            "if os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\n    os._exit(0)\n"  # holding stderr
            "while True:\n    time.sleep(1)\n")
    outcome = sandbox.run_program(code, timeout=1.0, processes=4, guard=False, memory_mb=1024)
    assert outcome == (False, "timeout")
    assert outcome.seconds < 1.0 + 1.0  # the clock starts with the program, and the kill is immediate


def test_a_detached_child_does_not_outlive_the_run(open_dir):
    marker, target = f"xsa-{secrets.token_hex(8)}", open_dir / "escaped"
    script = f"sleep 1; echo escaped > {target}; sleep 30; : {marker}"
    code = ("import os, time\n"
            "if os.fork() == 0:\n    os.setsid()\n"
            "    if os.fork() == 0:\n        os.closerange(0, 256)\n"  # double fork, no descriptors
            f"        os.execv('/bin/sh', ['sh', '-c', {script!r}])\n"
            "    os._exit(0)\n"
            "os.wait()\ntime.sleep(0.5)\n")
    ok, status = sandbox.run_program(code, timeout=LONG, processes=6, guard=False, memory_mb=1024)
    assert (ok, status) == (True, "passed")
    assert not running(marker)
    time.sleep(2)
    assert not target.exists()


def test_without_namespaces_the_fallback_still_kills_setsid_children():
    marker = f"xsa-{secrets.token_hex(8)}"
    code = ("import os, time\n"
            "if os.fork() == 0:\n    os.setsid()\n    os.closerange(0, 256)\n"
            f"    os.execv('/bin/sh', ['sh', '-c', 'sleep 30; : {marker}'])\n"
            "time.sleep(1)\n")
    ok, status = sandbox._run(code, sandbox.Tier((), separate_uid=False), timeout=LONG, memory_mb=1024,
                              processes=6, guard=False)
    assert (ok, status) == (True, "passed")
    assert not running(marker)


def test_files_outside_the_home_cannot_be_written(tmp_path):
    needs("separate-uid")  # tmp_path is the caller's: writable unless the program runs as someone else
    target = tmp_path / "escaped"
    ok, status = sandbox.run_program(f"open({str(target)!r}, 'w').write('x')\n", timeout=LONG, guard=False)
    assert not ok and "Error" in status
    assert not target.exists()


def test_world_writable_folders_outside_the_home_cannot_be_written(open_dir):
    needs("mount-namespace")  # any uid may write to a 0777 folder; only the fresh root hides it
    target = open_dir / "escaped"
    ok, status = sandbox.run_program(f"open({str(target)!r}, 'w').write('x')\n", timeout=LONG, guard=False)
    assert not ok and "Error" in status
    assert not target.exists()


def test_private_test_data_cannot_be_read(tmp_path):
    needs("separate-uid")
    secret = tmp_path / "answers.jsonl"
    secret.write_text("the hidden tests\n")
    secret.chmod(0o600)
    ok, status = sandbox.run_program(f"print(open({str(secret)!r}).read())\n", timeout=LONG, guard=False)
    assert not ok and ("PermissionError" in status or "FileNotFoundError" in status)


@pytest.mark.parametrize("path", ["/etc/passwd", __file__])  # world-readable: the host's users, the repository
def test_the_hosts_files_are_not_there(path):
    needs("mount-namespace")
    ok, status = sandbox.run_program(f"print(open({path!r}).read())\n", timeout=LONG, guard=False)
    assert (ok, status.split(":")[0]) == (False, "FileNotFoundError")


def test_no_network_not_even_to_the_loopback():
    needs("net-namespace")
    with socket.create_server(("127.0.0.1", 0)) as server:  # listening on the host
        port = server.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        ok, status = sandbox.run_program(code, timeout=LONG, guard=False)
    assert not ok and "OSError" in status


def test_rlimit_nproc_caps_the_processes():
    needs("nproc")
    code = ("import os, time\nn = 0\n"
            "for _ in range(40):\n"
            "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
            "    if pid == 0:\n        os.closerange(0, 256)\n        time.sleep(3)\n        os._exit(0)\n"
            "    n += 1\n"
            "raise SystemExit(f'forked {n}')\n")
    ok, status = sandbox.run_program(code, timeout=LONG, processes=4, guard=False, memory_mb=1024)
    assert not ok and status.startswith("forked ")
    assert int(status.split()[1]) <= (3 if "separate-uid" in sandbox.protections() else 39)


def test_a_fork_bomb_is_stopped_within_the_time_limit():
    needs("nproc")  # without it this would be a real fork bomb
    outcome = sandbox.run_program("import os\nwhile True:\n    os.fork()\n", timeout=LONG, processes=8,
                                  guard=False, memory_mb=2048)
    assert not outcome[0] and outcome[1] != "timeout"  # it ended itself: forks failed, processes died
    assert outcome.seconds < LONG


def test_shelling_out_fails_even_without_the_guard():
    needs("nproc")  # one process allowed (the default): system() cannot fork
    ok, status = sandbox.run_program("import os\nassert os.system('true') == 0\n", timeout=LONG, guard=False)
    assert not ok and "AssertionError" in status


@pytest.mark.parametrize("call", ["import os\nos.system('true')", "import subprocess\nsubprocess.run(['true'])",
                                  "import os\nos.kill(os.getpid(), 0)", "import shutil\nshutil.rmtree('x')",
                                  "import socket", "import ctypes"])
def test_the_guard_blocks_the_easy_ways_out(call):
    ok, status = sandbox.run_program(call + "\n", timeout=LONG)
    assert not ok and ("blocked by the sandbox" in status or "None in sys.modules" in status), status


def test_the_memory_cap_holds_across_forks():
    code = ("import os\n"
            "for _ in range(2):\n"
            "    if os.fork() == 0:\n"
            "        try:\n            x = bytearray(250 << 20)\n"
            "        except MemoryError:\n            os._exit(1)\n"
            "        os._exit(0)\n"
            "got = sum(os.waitstatus_to_exitcode(os.wait()[1]) == 0 for _ in range(2))\n"
            "raise SystemExit(f'allocated {250 * got}')\n")
    ok, status = sandbox.run_program(code, timeout=LONG, memory_mb=400, processes=3, guard=False)
    assert not ok and status.startswith("allocated ")
    assert int(status.split()[1]) <= 400


def test_the_outcome_records_the_active_layers():
    outcome = sandbox.run_program("pass\n", timeout=LONG)
    assert outcome == (True, "passed") and outcome.layers == sandbox.protections()
    assert {"rlimits", "no-new-privs", "empty-env", "guard"} <= set(outcome.layers)
    assert "guard" not in sandbox.run_program("pass\n", timeout=LONG, guard=False).layers


def test_an_interpreter_reached_through_a_symlink_keeps_every_layer(tmp_path):
    """A virtual environment reached through a symlink (a `.venv` linked to a shared one) is bound into
    the fresh root like any prefix: the same layers as through its real path, not a weaker tier
    chosen in silence, and a program still sees none of the host's files."""
    real = Path(os.path.realpath(sys.prefix))
    (tmp_path / "venv").symlink_to(real)
    code = ("import sys\nfrom xsa.evaluate import chat, sandbox\nprint(sys.prefix)\nprint(','.join(sandbox.protections()))\n"
            "print(chat.run_humaneval(" + repr(ADD) + ", '```python\\nopen(\"/etc/hostname\")\\n"
            "def add(a, b):\\n    return a + b\\n```', timeout=60)[0])\n")

    def seen(prefix: Path) -> list[str]:
        out = subprocess.run([str(prefix / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    through_link = seen(tmp_path / "venv")
    if not (real / "bin" / "python").exists() or through_link[0] != str(tmp_path / "venv"):
        pytest.skip(f"this interpreter resolves its prefix ({through_link[0]}): no symlinked prefix to bind")
    assert through_link[1:] == seen(real)[1:]
    if "mount-namespace" in through_link[1]:
        assert through_link[2] == "False"  # the host's /etc is not there
