"""Every `python -m xsa.*` command, found by walking the package, given bad input: an unknown option,
a value of the wrong type for every option that declares one, and a path that does not exist for
every required option. Each must end in one line on stderr and a non-zero exit, never a traceback
(an exception escaping main). The commands run in-process, from an empty folder, so that nothing they
might write lands in the repository; a case that runs longer than a minute fails."""

from __future__ import annotations

import argparse
import importlib
import re
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from xsa.base.records import REPO_ROOT

MISSING = "<tmp>/a-file/x"  # under a regular file: nothing can create it, not even root
WRONG = {int: "1.5x", float: "nan-ish"}  # a value no int or float parser takes


def commands() -> list[str]:
    """Every module `python -m` can run: a main() under `if __name__ == "__main__"`, or a package's
    __main__.py."""
    out = []
    for path in sorted((REPO_ROOT / "xsa").rglob("*.py")):
        text = path.read_text()
        if "def main(" in text and ('__name__ == "__main__"' in text or path.name == "__main__.py"):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            out.append(".".join(parts))  # a package's: xsa.data.__main__, run as python -m xsa.data
    return out


class _Parser(Exception):
    def __init__(self, parser):
        self.parser = parser


def parsers(name: str) -> list[tuple[list[str], argparse.ArgumentParser]]:
    """[(the argv prefix that selects it, parser)]: the command's parser and its subcommands'."""
    module = importlib.import_module(name)
    original = argparse.ArgumentParser.parse_args

    def capture(self, *a, **k):
        raise _Parser(self)
    argparse.ArgumentParser.parse_args = capture
    try:
        module.main([])
    except _Parser as got:
        top = got.parser
    finally:
        argparse.ArgumentParser.parse_args = original
    found = [([], top)]
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            found = [([sub], p) for sub, p in action.choices.items()]
    return found


@contextmanager
def deadline(seconds: int, what: str):
    def stop(*_):
        raise TimeoutError(f"{what}: still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def cases(name: str) -> list[list[str]]:
    """The bad argvs of one command."""
    out = []
    for prefix, parser in parsers(name):
        required = [a for a in parser._actions if a.required and a.option_strings]
        filled = [x for a in required for x in (a.option_strings[0], MISSING)]
        positional = [MISSING for a in parser._actions if not a.option_strings and a.nargs != 0
                      and not isinstance(a, argparse._SubParsersAction)]
        out.append(prefix + filled + positional + ["--no-such-option"])
        if required or positional:
            out.append(prefix + filled + positional)
        for a in parser._actions:
            others = prefix + [x for r in required if r is not a for x in (r.option_strings[0], MISSING)] + positional
            if a.option_strings and a.type in WRONG and a.nargs != 0:
                out.append(others + [a.option_strings[0], WRONG[a.type]])
            elif (a.option_strings and a.nargs != 0 and not a.required and (required or positional)
                  and a.type in (None, str, Path) and not a.choices):  # a path or a name where one is expected
                out.append(others + [a.option_strings[0], MISSING])
    return out


ALL = [(name, argv) for name in commands() for argv in cases(name)]
NAMES = [f"{n.removesuffix('.__main__')} {' '.join(a)}" for n, a in ALL]


def test_every_command_is_found():
    found = {n.removesuffix(".__main__") for n in commands()}
    assert {"xsa.train", "xsa.pipeline", "xsa.prereg", "xsa.reproduce", "xsa.data", "xsa.evaluate",
            "xsa.diagnostics", "xsa.throughput", "xsa.gpu_study", "xsa.gpu_check"} <= found, found
    assert len(ALL) >= 3 * len(found)


@pytest.mark.parametrize("name,argv", ALL, ids=NAMES)
def test_bad_input_is_one_line_and_never_a_traceback(name, argv, tmp_path, monkeypatch, capsys):
    (tmp_path / "a-file").write_text("")
    argv = [a.replace("<tmp>", str(tmp_path)) for a in argv]
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    with deadline(60, f"python -m {name} {' '.join(argv)}"):
        with pytest.raises(SystemExit) as stopped:  # anything else escaping main is a traceback
            module.main(argv)
    code = stopped.value.code
    assert code not in (0, None), f"python -m {name} {' '.join(argv)}: exit 0 on bad input"
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    said = [ln for ln in err if not re.match(r"\s*(usage:|\[|python -m \S+ \[|\S+ \[-h\]| {2,})", ln)]
    assert said and len(said) <= 2, f"python -m {name} {' '.join(argv)}: {err}"
    assert not any("Traceback" in ln for ln in err)
    assert [p.name for p in Path(tmp_path).iterdir()] == ["a-file"], f"python -m {name} {' '.join(argv)} wrote here"
