"""
What every group of scripts/hostile_check.py shares: a temporary copy of the committed records, the
commands a case runs, and how an outcome is judged (see hostile_check.py for the verdicts).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN = "cpu-w64-d4_xsa1_s3"
VERDICTS = ("clear", "unclear", "silent", "traceback", "data loss")


class Env:
    def __init__(self, code: Path, tmp: Path):
        self.code, self.tmp = code, tmp
        self.env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
        self.committed = tmp / "committed"
        shutil.copytree(REPO / "results" / "runs", self.committed / "runs")
        shutil.copytree(REPO / "results" / "throughput", self.committed / "throughput")
        if (REPO / "results" / "archive").exists():
            shutil.copytree(REPO / "results" / "archive", self.committed / "archive")
        self.n = 0

    def fresh(self) -> Path:
        self.n += 1
        d = self.tmp / f"case{self.n}"
        shutil.copytree(self.committed, d / "results")
        return d

    def py(self, *args, timeout=600, cwd=None, prefix=()):
        return subprocess.run([*prefix, sys.executable, *args], capture_output=True, text=True, env=self.env,
                              cwd=cwd or self.code, timeout=timeout)


def digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.endswith(".lock")}


def judge_error(res, path: str, lost: bool = False) -> str:
    if lost:
        return "data loss"
    if res.returncode == 0:
        return "silent"
    if "Traceback (most recent call last)" in res.stderr:
        return "traceback"
    return "clear" if path in res.stderr + res.stdout else "unclear"



def edit(path: Path, **changes):
    d = json.loads(path.read_text())
    d.update(changes)
    path.write_text(json.dumps(d))


def lines_edit(path: Path, f):
    path.write_text(f(path.read_text()))


def paper(env: Env, case: Path, *extra):
    return env.py("-m", "xsa.pipeline", "--study", "default", "--stages", "paper", "--results",
                  str(case / "results"), "--paper", str(case / "paper"), *extra)


def train_cmd(out: Path, *extra):
    return ["-m", "xsa.train", "--preset", "smoke", "--out", str(out), "--no-progress", *extra]


# the training CLI with every batch 0.2 s late, so that a second process surely meets it at work
SLOW = ("import sys, time\nfrom xsa.data.loader import TokenLoader\nget = TokenLoader.get\n"
        "TokenLoader.get = lambda self, *a: (time.sleep(DELAY), get(self, *a))[1]\n"
        "from xsa.train import main\nsys.argv = ['python -m xsa.train', *sys.argv[1:]]\nmain()\n")


def slow_training(env: Env, out: Path, *extra, wait_lines: int = 2, delay: float = 0.2):
    """Start a slow training of the smoke preset into `out` (each batch `delay` seconds late); return
    once it has logged wait_lines."""
    p = subprocess.Popen([sys.executable, "-c", SLOW.replace("DELAY", repr(delay)), *train_cmd(out, *extra)[2:]],
                         env=env.env, cwd=env.code,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while wait_lines and time.time() < deadline and p.poll() is None:
        m = out / "metrics.jsonl"
        if m.exists() and m.read_text().count("\n") >= wait_lines:
            break
        time.sleep(0.1)
    return p


ADD = {"prompt": 'def add(a, b):\n    """Add two numbers."""\n', "entry_point": "add",
       "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"}


def tail(res) -> str:
    text = (res.stderr.strip() or res.stdout.strip()).splitlines()
    last = [x for x in text if x.strip() and "WARNING | Kernel" not in x]
    return (last[-1] if last else "")[:160]

