"""The README's commands: each `python -m xsa...` it lists answers --help with its usage and exit
status 0 (one interpreter runs them all, as `python -m` would, so the test costs one import of torch).
A planted command that does not exist fails the same check, so it cannot pass vacuously."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from xsa.base.records import REPO_ROOT

COMMAND = re.compile(r"python -m (xsa(?:\.\w+)*)((?: [a-z]+)?)")

# run each module as __main__ with its arguments; report (exit status, the usage line seen)
RUNNER = """
import contextlib, io, json, runpy, sys
out = {}
for module, args in json.loads(sys.argv[1]):
    sys.argv, buf, code = [module] + args, io.StringIO(), None
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code or 0
    except BaseException as e:
        code = repr(e)
    out[" ".join([module] + args)] = [code, "usage:" in buf.getvalue()]
print(json.dumps(out))
"""


def readme_commands() -> list[tuple[str, list[str]]]:
    """(module, [subcommand]) for each command the README (and docs/, which it points to) lists, first
    time each."""
    seen = {}
    text = "\n".join(p.read_text() for p in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))])
    for module, sub in COMMAND.findall(text):
        seen.setdefault((module, sub.strip()), None)
    return [(m, [s] if s and not s.startswith("-") else []) for m, s in seen]


def help_of(commands) -> dict:
    todo = [(m, sub + ["--help"]) for m, sub in commands]
    run = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(todo)], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_every_readme_command_answers_help():
    commands = readme_commands()
    assert len(commands) >= 13 and ("xsa.evaluate", ["core"]) in commands
    bad = {cmd: res for cmd, res in help_of(commands + [("xsa.no_such_stage", [])]).items() if res != [0, True]}
    assert bad == {"xsa.no_such_stage --help": bad.get("xsa.no_such_stage --help")}  # the planted one only
    assert bad["xsa.no_such_stage --help"][0] != 0
