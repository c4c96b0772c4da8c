"""
A hostile user's session against the records, the run folders and the sandbox, on copies only.

    PYTHONPATH=. python scripts/hostile_check.py [--code DIR] [--only records|folders|sandbox]

Each case damages a copy of the committed records, races or breaks a run folder (smoke preset),
tries to forge or escape the HumanEval sandbox, or (inputs) feeds the paper a record that is not
bound to its run, writes one record over another, shares a folder through another path, or passes a
hostile value to a command, and classifies what the code at DIR (default: this checkout) does:

  clear      the right behaviour, or a non-zero exit with a message naming the path, no traceback;
  unclear    a non-zero exit with a message that names no path (or a refusal after writing);
  traceback  a non-zero exit with a traceback;
  silent     exit 0 with the wrong result (a paper built from damaged records, a forged pass...);
  data loss  a record that was there before is changed or gone.

The committed records are copied to a temporary folder first and never written. Needs util-linux
`unshare` (as root) for the read-only and full-disk cases; they are skipped without it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
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


# -----------------------------------------------------------------------------
# records: the paper stage on a damaged copy

def edit(path: Path, **changes):
    d = json.loads(path.read_text())
    d.update(changes)
    path.write_text(json.dumps(d))


def lines_edit(path: Path, f):
    path.write_text(f(path.read_text()))


RECORD_DAMAGES = {
    "NaN val_bpb in summary.json": lambda r: edit(r / "summary.json", val_bpb=float("nan")),
    "torn last line of metrics.jsonl": lambda r: lines_edit(r / "metrics.jsonl", lambda t: t[:-40]),
    "deleted run folder": lambda r: shutil.rmtree(r),
    "emptied CORE record {}": lambda r: (r / "eval.json").write_text("{}"),
    "complete: false in summary.json": lambda r: edit(r / "summary.json", complete=False),
    "doubled metrics.jsonl": lambda r: lines_edit(r / "metrics.jsonl", lambda t: t + t),
    "truncated summary.json": lambda r: lines_edit(r / "summary.json", lambda t: t[:50]),
    "garbled line inside metrics.jsonl": lambda r: lines_edit(r / "metrics.jsonl",
                                                              lambda t: t.replace('"step": 100', '"step": 1@0', 1)),
    "summary.json of another config": lambda r: edit(r / "summary.json", config_hash="0123456789abcdef"),
    "CORE incomplete (core_complete false)": lambda r: edit(r / "eval.json", core_complete=False),
    "diagnostics.json deleted": lambda r: (r / "diagnostics.json").unlink(),
    "NaN train_loss inside metrics.jsonl": lambda r: lines_edit(
        r / "metrics.jsonl", lambda t: t.replace('"train_loss": ', '"train_loss": NaN, "x": ', 1)),
    "eval.json holds a JSON list": lambda r: (r / "eval.json").write_text("[]"),
    "metrics of another run appended (two runs mixed)": lambda r: lines_edit(
        r / "metrics.jsonl", lambda t: t + "".join((r.parent / "cpu-w64-d4_xsa0.5_s3" / "metrics.jsonl")
                                                   .read_text().splitlines(keepends=True)[:5])),
}


def paper(env: Env, case: Path, *extra):
    return env.py("-m", "xsa.pipeline", "--study", "default", "--stages", "paper", "--results",
                  str(case / "results"), "--paper", str(case / "paper"), *extra)


def record_cases(env: Env) -> list:
    out = []
    for name, damage in RECORD_DAMAGES.items():
        case = env.fresh()
        run_dir = case / "results" / "runs" / RUN
        damage(run_dir)
        before = digest(case / "results" / "runs")
        res = paper(env, case)
        lost = digest(case / "results" / "runs") != before
        built = (case / "paper").exists() or (case / "results" / "tables").exists()
        verdict = judge_error(res, RUN, lost)
        if verdict == "clear" and built:
            verdict = "unclear"  # refused, but only after writing
        named = [x.strip() for x in res.stderr.splitlines() if RUN in x and "Traceback" not in x]
        out.append(("records", name, verdict, res.returncode, named[0][-150:] if named else _tail(res)))
    # leaving a run out on purpose: the paper is built and names it
    case = env.fresh()
    shutil.rmtree(case / "results" / "runs" / RUN)
    res = paper(env, case, "--leave-out", RUN)
    md = (case / "paper" / "paper.md").read_text() if (case / "paper" / "paper.md").exists() else ""
    ok = res.returncode == 0 and f"left out by choice, so in no number below: {RUN}" in md
    out.append(("records", "a run left out on purpose (--leave-out)", "clear" if ok else
                ("unclear" if res.returncode else "silent"), res.returncode, _tail(res)))
    case = env.fresh()
    res = paper(env, case, "--leave-out", "no-such-run")
    out.append(("records", "--leave-out of a run the study lacks", judge_error(res, "no-such-run"),
                res.returncode, _tail(res)))
    case = env.fresh()
    (case / "file").write_text("x")
    res = env.py("-m", "xsa.pipeline", "--study", "default", "--stages", "paper", "--results", str(case / "results"),
                 "--paper", str(case / "file" / "paper"))
    v = judge_error(res, str(case / "file"))
    out.append(("records", "--paper under a regular file", "unclear" if v == "clear" and "running" in res.stdout
                else v, res.returncode, _tail(res)))
    if shutil.which("unshare") and os.geteuid() == 0:
        case = env.fresh()
        (case / "ro").mkdir()
        script = (f"mount --bind {case / 'ro'} {case / 'ro'} && mount -o remount,bind,ro {case / 'ro'} && "
                  f"exec {sys.executable} -m xsa.pipeline --study default --stages paper --results {case / 'results'} "
                  f"--paper {case / 'ro' / 'paper'}")
        res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env.env,
                             cwd=env.code, timeout=600)
        v = judge_error(res, str(case / "ro"))
        out.append(("records", "read-only --paper folder", "unclear" if v == "clear" and "running" in res.stdout
                    else v, res.returncode, _tail(res)))
    return out


# -----------------------------------------------------------------------------
# folders: trainings, evaluations and diagnostics of the smoke preset

def train_cmd(out: Path, *extra):
    return ["-m", "xsa.train", "--preset", "smoke", "--out", str(out), "--no-progress", *extra]


# the training CLI with every batch 0.2 s late, so that a second process surely meets it at work
SLOW = ("import sys, time\nfrom xsa.data.loader import TokenLoader\nget = TokenLoader.get\n"
        "TokenLoader.get = lambda self, *a: (time.sleep(0.2), get(self, *a))[1]\n"
        "from xsa.train import main\nsys.argv = ['python -m xsa.train', *sys.argv[1:]]\nmain()\n")


def slow_training(env: Env, out: Path, *extra, wait_lines: int = 2):
    """Start a slow training of the smoke preset into `out`; return once it has logged wait_lines."""
    p = subprocess.Popen([sys.executable, "-c", SLOW, *train_cmd(out, *extra)[2:]], env=env.env, cwd=env.code,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while wait_lines and time.time() < deadline and p.poll() is None:
        m = out / "metrics.jsonl"
        if m.exists() and m.read_text().count("\n") >= wait_lines:
            break
        time.sleep(0.1)
    return p


def folder_cases(env: Env) -> list:
    out = []
    t = env.tmp / "folders"
    t.mkdir()
    # two processes on one folder: started together; a second run (alpha 0.5, --overwrite) or a
    # --resume of the same run while the first trains
    races = (("two trainings, same arguments, started together", ("--alpha", "1"), True),
             ("alpha 0.5 --overwrite into a folder training alpha 1", ("--alpha", "0.5", "--overwrite"), False),
             ("--resume of a run while it trains", ("--alpha", "1", "--resume"), False))
    for name, second, together in races:
        d = t / f"race{len(out)}"
        if together:
            a = slow_training(env, d, "--alpha", "1", wait_lines=0)
            b = slow_training(env, d, *second, wait_lines=0)
            b_out, b_err = b.communicate(timeout=600)
            b = subprocess.CompletedProcess(b.args, b.returncode, b_out, b_err)
        else:
            a = slow_training(env, d, "--alpha", "1", wait_lines=12)  # past its checkpoint at step 10
            b = env.py(*train_cmd(d, *second))
        a_out, a_err = a.communicate(timeout=600)
        a = subprocess.CompletedProcess(a.args, a.returncode, a_out, a_err)
        steps = [json.loads(x)["step"] for x in (d / "metrics.jsonl").read_text().splitlines()] \
            if (d / "metrics.jsonl").exists() else []
        alpha = json.loads((d / "config.json").read_text())["model"]["xsa_alpha"] if (d / "config.json").exists() else None
        whole = steps == list(range(31)) and alpha == 1.0
        if b.returncode == 0 and a.returncode == 0:
            v = "silent"
        elif a.returncode != 0 and b.returncode != 0:
            v = "unclear"
        else:
            loser = b if b.returncode else a
            v = judge_error(loser, str(d)) if whole or (together and steps == list(range(31))) else "data loss"
        note = f"first rc={a.returncode}; steps logged {len(steps)} (unique {len(set(steps))}), alpha {alpha}; "
        out.append(("folders", name, v, b.returncode, note + _tail(b)))
    # a finished run resumed
    d = t / "finished"
    env.py(*train_cmd(d))
    before = digest(d)
    res = env.py(*train_cmd(d, "--resume"))
    out.append(("folders", "resume of a finished run", "clear" if res.returncode == 0 and digest(d) == before
                else "silent", res.returncode, _tail(res)))
    # a torn last line, then resume
    m = d / "metrics.jsonl"
    whole = m.read_text()
    m.write_text(whole[:-30])
    res = env.py(*train_cmd(d, "--resume"))
    redone = m.read_text()
    said = "torn last line" in res.stdout + res.stderr
    out.append(("folders", "torn last line of metrics.jsonl, then resume",
                "clear" if said and redone.count("\n") == whole.count("\n") and json.loads(redone.splitlines()[-1])
                .get("val_bpb") == json.loads(whole.splitlines()[-1])["val_bpb"] else "silent", res.returncode, _tail(res)))
    # a doubled log, then resume (a checkpoint mid-run)
    d2 = t / "doubled"
    env.py(*train_cmd(d2, "--max-steps", "10"))
    (d2 / "metrics.jsonl").write_text((d2 / "metrics.jsonl").read_text() * 2)
    res = env.py(*train_cmd(d2, "--resume"))
    out.append(("folders", "doubled metrics.jsonl, then resume", judge_error(res, str(d2 / "metrics.jsonl")),
                res.returncode, _tail(res)))
    # --out under a regular file
    (t / "file").write_text("x")
    res = env.py(*train_cmd(t / "file" / "run", "--max-steps", "1"))
    out.append(("folders", "--out under a regular file", judge_error(res, str(t / "file")), res.returncode, _tail(res)))
    # kill -9 during training (after its checkpoint at step 10), then resume: bit for bit
    d3 = t / "killed"
    p = slow_training(env, d3, wait_lines=15)
    p.kill()
    p.communicate()
    res = env.py(*train_cmd(d3, "--resume"))
    same = (d3 / "summary.json").exists() and json.loads((d3 / "summary.json").read_text())["final_weights_sha256"] \
        == json.loads((d / "summary.json").read_text())["final_weights_sha256"]
    out.append(("folders", "kill -9 during training, then resume", "clear" if same else "silent",
                res.returncode, _tail(res)))
    # diagnostics of a folder while a training holds it
    d4 = t / "busy"
    env.py(*train_cmd(d4, "--max-steps", "10"))  # a model at step 10, resumed to 30 while diagnostics read it
    p = slow_training(env, d4, "--resume", wait_lines=13)
    res = env.py("-m", "xsa.diagnostics", "--run", str(d4), "--out", str(t / "busy_diag.json"))
    p.communicate(timeout=600)
    out.append(("folders", "diagnostics of a folder in training", judge_error(res, str(d4)), res.returncode, _tail(res)))
    # diagnostics on a damaged validation shard
    data = t / "data"
    shutil.copytree(Path.home() / ".cache" / "xsa" / "data" / "smoke", data)
    shard = sorted((data / "shards").glob("val_*.bin"))[0]
    raw = bytearray(shard.read_bytes())
    raw[200] ^= 1
    shard.write_bytes(bytes(raw))
    d5 = t / "ondamaged"
    shutil.copytree(d, d5)
    edit(d5 / "config.json", data_dir=str(data))
    res = env.py("-m", "xsa.diagnostics", "--run", str(d5), "--out", str(t / "d5.json"))
    out.append(("folders", "diagnostics on a damaged validation shard", judge_error(res, str(shard)),
                res.returncode, _tail(res)))
    # stale build folders
    cache = Path.home() / ".cache" / "xsa" / "data"
    stale = cache / ".smoke.building-999999"
    stale.mkdir(exist_ok=True)
    res = env.py("-m", "xsa.data", "build", "--subset", "smoke")
    out.append(("folders", "stale .smoke.building-<pid> left by a killed build", "clear" if not stale.exists()
                else "silent", res.returncode, _tail(res)))
    shutil.rmtree(stale, ignore_errors=True)
    # evaluations: an unfinished run, --out a JSON list
    bundle = REPO.parent / "shared" / "eval_bundle"
    if bundle.exists():
        d6 = t / "unfinished"
        env.py(*train_cmd(d6, "--max-steps", "2"))
        res = env.py("-m", "xsa.evaluate", "core", "--run", str(d6), "--bundle", str(bundle), "--max-per-task", "2")
        ev = json.loads((d6 / "eval.json").read_text()) if (d6 / "eval.json").exists() else {}
        labelled = (ev.get("core_detail") or {}).get("trained", {}).get("complete") is False
        out.append(("folders", "CORE of an unfinished run", "clear" if res.returncode != 0 or
                    (labelled and "not trained to its horizon" in res.stderr) else "silent", res.returncode, _tail(res)))
        (t / "list.json").write_text("[]")
        t0 = time.time()
        res = env.py("-m", "xsa.evaluate", "core", "--run", str(d), "--bundle", str(bundle), "--max-per-task", "2",
                     "--out", str(t / "list.json"))
        v = judge_error(res, str(t / "list.json"))
        out.append(("folders", "evaluate core --out naming a JSON list", v if "core =" not in res.stdout or v != "clear"
                    else "unclear", res.returncode, _tail(res) + f" ({time.time() - t0:.0f} s)"))
    if shutil.which("unshare") and os.geteuid() == 0:
        # --resume of a run on a read-only disk
        ro = t / "ro"
        shutil.copytree(d2, ro)
        (ro / "metrics.jsonl").write_text((ro / "metrics.jsonl").read_text()[: len((ro / "metrics.jsonl").read_text()) // 2])
        script = (f"mount --bind {t} {t} && mount -o remount,bind,ro {t} && exec {sys.executable} "
                  + " ".join(train_cmd(ro, "--resume")))
        before = digest(ro)
        res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env.env,
                             cwd=env.code, timeout=600)
        out.append(("folders", "--resume of a run on a read-only disk", judge_error(res, str(ro), digest(ro) != before),
                    res.returncode, _tail(res)))
        # a full disk during training
        full = t / "full"
        full.mkdir()
        script = (f"mount -t tmpfs -o size=300k tmpfs {full} && exec {sys.executable} "
                  + " ".join(train_cmd(full / "run")))
        res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env.env,
                             cwd=env.code, timeout=600)
        out.append(("folders", "a full disk during training", judge_error(res, str(full / "run")),
                    res.returncode, _tail(res)))
    return out


# -----------------------------------------------------------------------------
# sandbox: forge a pass, or get out

ADD = {"prompt": 'def add(a, b):\n    """Add two numbers."""\n', "entry_point": "add",
       "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"}
WRONG = "def add(a, b):\n    return a - b\n"
# print every string constant of the program's own code object (the old pass token was one), exit 0
FORGE_CODE_OBJECT = ("import sys, os\nfor c in sys._getframe().f_code.co_consts:\n    print(c)\n"
                     "sys.stdout.flush()\nos._exit(0)\n")
# when a failing assert ends the program, print the constants of every frame it passed, exit 0
FORGE_EXCEPTHOOK = ("import sys, os\ndef hook(kind, error, tb):\n    while tb:\n"
                    "        [print(c) for c in tb.tb_frame.f_code.co_consts if isinstance(c, str)]\n"
                    "        tb = tb.tb_next\n    sys.stdout.flush()\n    os._exit(0)\nsys.excepthook = hook\n")
SANDBOX = {  # name: (reply, should pass)
    "right answer (control)": ("def add(a, b):\n    return a + b\n", True),
    "wrong answer (control)": (WRONG, False),
    "token from its own code object": (WRONG + FORGE_CODE_OBJECT, False),
    "token printed from an exception hook": (WRONG + FORGE_EXCEPTHOOK, False),
    "forged replies on every descriptor": (WRONG + "import os\nfor fd in range(3, 64):\n    try:\n"
                                           "        os.write(fd, repr(('ok', 5)).encode() + b'\\n' * 50)\n"
                                           "    except OSError:\n        pass\n", False),
    "os._exit(0) before the tests": (WRONG + "import os\nos._exit(0)\n", False),
    "SystemExit(0) inside the function": ("def add(a, b):\n    raise SystemExit(0)\n", False),
    "an object that equals everything": ("class A:\n    def __eq__(s, o): return True\n    def __repr__(s): "
                                         "return '5'\ndef add(a, b):\n    return A()\n", False),
    "network to the loopback": ("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)\n"
                                "def add(a, b):\n    return a + b\n", False),
    "read /etc/passwd": ("print(open('/etc/passwd').read())\ndef add(a, b):\n    return a + b\n", False),
    "write outside its home": ("open('/tmp/xsa-escaped', 'w').write('x')\ndef add(a, b):\n    return a + b\n", False),
    "fork bomb": ("import os\nwhile True:\n    os.fork()\n", False),
    "infinite loop": ("def add(a, b):\n    while True:\n        pass\n", False),
}


def sandbox_cases(env: Env) -> list:
    code = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nfrom xsa.evaluate import chat\n"
            "item, reply = json.loads(sys.argv[2]), sys.argv[3]\n"
            "if hasattr(chat, 'run_humaneval'):\n    r = chat.run_humaneval(item, reply, timeout=5)\n"
            "else:\n    r = chat.run_program(chat.humaneval_program(item, reply), timeout=5)\n"
            "print(json.dumps([bool(r[0]), r[1]]))\n")
    out = []
    for name, (reply, should) in SANDBOX.items():
        res = env.py("-c", code, str(env.code), json.dumps(ADD), f"```python\n{reply}```", timeout=300)
        try:
            passed, status = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out.append(("sandbox", name, "unclear", res.returncode, _tail(res)))
            continue
        escaped = Path("/tmp/xsa-escaped").exists()
        Path("/tmp/xsa-escaped").unlink(missing_ok=True)
        v = "clear" if passed == should and not escaped else ("data loss" if escaped else "silent")
        out.append(("sandbox", name, v, res.returncode, f"passed={passed} ({status})"))
    return out


# -----------------------------------------------------------------------------
# inputs: every record the paper reads bound to its run; no write outside its own file

ROBUST_RUN = "cpu-w64-d4_xsa1-compiled-mlr0.08_s100"  # a run of the robust study's primary comparison
ARCHIVED = Path("archive") / "30bc3ae" / "runs"


def nan_throughput(results: Path):
    path = results / "throughput" / "cpu-w64-d4.json"
    d = json.loads(path.read_text())
    for k in ("overhead_ratio", "cpu_time_overhead_ratio", "baseline_step_time_median_s", "xsa_step_time_median_s"):
        d[k] = float("nan")
    d["overhead_ci95"] = d["cpu_time_overhead_ci95"] = [float("nan")] * 2
    path.write_text(json.dumps(d))


INPUT_DAMAGES = {  # name: (damage of the results folder, a path the refusal must name)
    "robust study: a primary run folder deleted": (lambda r: shutil.rmtree(r / "runs" / ROBUST_RUN), ROBUST_RUN),
    "robust study: a primary run's summary deleted": (
        lambda r: (r / "runs" / ROBUST_RUN / "summary.json").unlink(), ROBUST_RUN),
    "eval.json of another run copied in": (lambda r: shutil.copy(r / "runs" / "cpu-w64-d4_base_s3" / "eval.json",
                                                                 r / "runs" / RUN / "eval.json"), RUN),
    "diagnostics.json of another run copied in": (
        lambda r: shutil.copy(r / "runs" / "cpu-w64-d4_base_s3" / "diagnostics.json",
                              r / "runs" / RUN / "diagnostics.json"), RUN),
    "NaN core_bpb in eval.json": (lambda r: edit(r / "runs" / RUN / "eval.json", core_bpb=float("nan")), RUN),
    "NaN inside diagnostics.json": (lambda r: lines_edit(r / "runs" / RUN / "diagnostics.json",
                                                         lambda t: t.replace('"entropy": ', '"entropy": NaN, "x": ', 1)),
                                    RUN),
    "throughput record all NaN": (nan_throughput, "cpu-w64-d4.json"),
    "throughput record a JSON list": (lambda r: (r / "throughput" / "cpu-w64-d8.json").write_text("[]"),
                                      "cpu-w64-d8.json"),
    "throughput record deleted": (lambda r: (r / "throughput" / "cpu-w64-d4.json").unlink(), "cpu-w64-d4.json"),
    "archived record changed (NaN val bpb)": (
        lambda r: edit(r / ARCHIVED / "cpu-d4_xsa1_s0" / "summary.json", val_bpb=float("nan")), "cpu-d4_xsa1_s0"),
    "archived record deleted": (lambda r: (r / ARCHIVED / "cpu-d8_base_s1" / "summary.json").unlink(),
                                "cpu-d8_base_s1"),
    "hand-made GPU study folder d12_base_s0": (
        lambda r: shutil.copytree(r / "runs" / RUN, r / "runs" / "d12_base_s0"), "d12_base_s0"),
    "provenance.json deleted": (lambda r: (r / "runs" / RUN / "provenance.json").unlink(), RUN),
    "middle evaluations removed from metrics.jsonl": (
        lambda r: lines_edit(r / "runs" / RUN / "metrics.jsonl", lambda t: "".join(
            x for x in t.splitlines(keepends=True) if json.loads(x)["step"] not in (96, 192, 288))), RUN),
}


def input_paper_cases(env: Env) -> list:
    out = []
    for name, (damage, named) in INPUT_DAMAGES.items():
        case = env.fresh()
        damage(case / "results")
        before = digest(case / "results")
        res = paper(env, case)
        verdict = judge_error(res, named, digest(case / "results") != before)
        built = (case / "paper").exists() or (case / "results" / "tables").exists()
        out.append(("inputs", name, "unclear" if verdict == "clear" and built else verdict, res.returncode,
                    _tail(res)))
    # asked for on purpose: a robust-study run left out, an interim paper
    for name, extra, said in (("--leave-out of a robust-study run", ("--leave-out", ROBUST_RUN),
                               f"left out by choice, so in no number below: {ROBUST_RUN}"),
                              ("--interim while a robust-study run is missing", ("--interim",), "interim")):
        case = env.fresh()
        shutil.rmtree(case / "results" / "runs" / ROBUST_RUN)
        res = paper(env, case, *extra)
        md = (case / "paper" / "paper.md").read_text() if (case / "paper" / "paper.md").exists() else ""
        out.append(("inputs", name, "clear" if res.returncode == 0 and said in md else
                    ("unclear" if res.returncode else "silent"), res.returncode, _tail(res)))
    return out


def writes_cases(env: Env, run: Path) -> list:
    """A record of one kind written over another's: each must be refused and change nothing."""
    out = []
    bundle = REPO.parent / "shared" / "eval_bundle"
    cmds = [("throughput --out RUN/summary.json --overwrite", run / "summary.json",
             ["-m", "xsa.throughput", "--preset", "smoke", "--steps", "1", "--warmup", "0", "--out",
              str(run / "summary.json"), "--overwrite"]),
            ("diagnostics --out RUN/provenance.json --overwrite", run / "provenance.json",
             ["-m", "xsa.diagnostics", "--run", str(run), "--out", str(run / "provenance.json"), "--overwrite"])]
    if bundle.exists():
        cmds.append(("evaluate core --out RUN/config.json", run / "config.json",
                     ["-m", "xsa.evaluate", "core", "--run", str(run), "--bundle", str(bundle), "--max-per-task", "1",
                      "--out", str(run / "config.json")]))
    for name, target, cmd in cmds:
        before = target.read_bytes()
        res = env.py(*cmd)
        lost = target.read_bytes() != before
        if lost:
            target.write_bytes(before)
        out.append(("inputs", name, judge_error(res, str(target), lost), res.returncode, _tail(res)))
    return out


def lock_cases(env: Env, t: Path) -> list:
    out = []
    # a second training through a symlinked path, and after the lock file is deleted
    for name, how in (("a training through a symlink to a folder in training", "symlink"),
                      ("a training after the lock file of a folder in training was deleted", "deleted")):
        d = t / f"lock-{how}"
        a = slow_training(env, d, "--alpha", "1", wait_lines=12)
        other = d
        if how == "symlink":
            other = t / f"link-{how}"
            other.symlink_to(d)
        else:
            (d.parent / f".{d.name}.lock").unlink()
        b = env.py(*train_cmd(other, "--alpha", "0.5", "--overwrite"))
        a_out, a_err = a.communicate(timeout=600)
        cfg = json.loads((d / "config.json").read_text()) if (d / "config.json").exists() else {}
        whole = a.returncode == 0 and cfg.get("model", {}).get("xsa_alpha") == 1.0
        v = judge_error(b, other.name) if b.returncode else ("data loss" if not whole else "silent")
        out.append(("inputs", name, v, b.returncode, f"first rc={a.returncode}; " + _tail(b)))
    # the lock file a symlink to another file: never followed, never truncated
    victim = t / "victim.txt"
    victim.write_text("precious\n")
    d = t / "lock-victim"
    (t / f".{d.name}.lock").symlink_to(victim)
    res = env.py(*train_cmd(d, "--max-steps", "1"))
    lost = victim.read_text() != "precious\n"
    out.append(("inputs", "the lock file a symlink to another file", judge_error(res, d.name, lost) if res.returncode
                else ("data loss" if lost else "silent"), res.returncode, _tail(res)))
    return out


def misc_cases(env: Env, t: Path, finished: Path) -> list:
    out = []
    # the sandbox: a reply of a large set of numbers that all hash alike
    code = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nfrom xsa.evaluate import chat\n"
            "print(json.dumps(list(chat.run_humaneval(json.loads(sys.argv[2]), sys.argv[3], timeout=5))))\n")
    reply = ("class S:\n    def __repr__(self):\n        return '{' + ','.join(str(i * (2**61 - 1)) "
             "for i in range(1, 40000)) + '}'\ndef add(a, b):\n    return S()\n")
    t0 = time.time()
    try:
        res = env.py("-c", code, str(env.code), json.dumps(ADD), f"```python\n{reply}```", timeout=600)
        seconds = time.time() - t0
        v = "clear" if seconds < 30 and res.returncode == 0 else "unclear"
        out.append(("inputs", "sandbox reply: a large set whose elements hash alike (5 s limit)", v,
                    res.returncode, f"{seconds:.0f} s; " + _tail(res)))
    except subprocess.TimeoutExpired:
        out.append(("inputs", "sandbox reply: a large set whose elements hash alike (5 s limit)", "unclear", -1,
                    "over 600 s"))
    # the pipeline's --status of an unknown study
    res = env.py("-m", "xsa.pipeline", "--study", "nope", "--status", "--results", str(t / "r"))
    out.append(("inputs", "pipeline --status --study nope", judge_error(res, "nope"), res.returncode, _tail(res)))
    # the archive: a moving ref as its name, and git replace objects
    res = env.py("-m", "xsa.archive", "--commit", "HEAD", "--results", str(t / "arch"))
    out.append(("inputs", "archive --commit HEAD", "silent" if res.returncode == 0 else judge_error(res, "HEAD"),
                res.returncode, _tail(res)))
    out.append(archive_replace_case(env, t))
    # make: a run id and a leave-out list that are shell commands
    for target, var in (("reproduce", "RUN"), ("report", "LEAVE_OUT")):
        marker = t / f"make-{var}"
        dry = subprocess.run(["make", "-n", "-o", ".venv/.xsa-installed", "-o", "tcmalloc", target,
                              f"{var}=x; touch {marker}"], cwd=env.code, capture_output=True, text=True)
        script = "\n".join(x for x in dry.stdout.splitlines() if "xsa." in x).replace(".venv/bin/python", "true")
        subprocess.run(["sh", "-c", script], capture_output=True, env={**env.env, var: f"x; touch {marker}"})
        out.append(("inputs", f"make {target} {var}='x; touch F'", "silent" if marker.exists() else "clear", 0,
                    script[-120:]))
    # a killed atomic write's temporary file: ignored by git
    res = subprocess.run(["git", "check-ignore", "-q", "results/runs/x/.summary.json.ab12.tmp"], cwd=env.code)
    out.append(("inputs", "a killed write's .summary.json.*.tmp in results/runs (git status)",
                "clear" if res.returncode == 0 else "silent", res.returncode, ""))
    # the data rebuilt under a run, then resume
    data = t / "rebuilt"
    shutil.copytree(Path.home() / ".cache" / "xsa" / "data" / "smoke", data)
    d = t / "rebuilt-run"
    env.py(*train_cmd(d, "--max-steps", "10", "--data-dir", str(data)))
    shard = sorted((data / "shards").glob("train_*.bin"))[0]
    raw = bytearray(shard.read_bytes())
    raw[100] ^= 1
    shard.write_bytes(bytes(raw))
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["files"][f"shards/{shard.name}"]["sha256"] = hashlib.sha256(raw).hexdigest()
    (data / "manifest.json").write_text(json.dumps(manifest))
    res = env.py(*train_cmd(d, "--resume", "--data-dir", str(data)))
    out.append(("inputs", "data rebuilt (a shard and its manifest) under a run, then resume",
                judge_error(res, str(data)), res.returncode, _tail(res)))
    return out


def archive_replace_case(env: Env, t: Path):
    """`git replace` of an archived record's blob in a clone of the code: the archive must hold the
    commit's own bytes."""
    clone = t / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(env.code), str(clone)], check=True, capture_output=True)
    rel = "results/runs/cpu-d4_base_s0/summary.json"
    git = lambda *a, **kw: subprocess.run(["git", *a], cwd=clone, capture_output=True, text=True, **kw).stdout.strip()
    blob = git("rev-parse", f"30bc3ae:{rel}")
    forged = git("hash-object", "-w", "--stdin", input='{"complete": true, "val_bpb": 1.0}\n')
    git("replace", blob, forged)
    res = subprocess.run([sys.executable, "-m", "xsa.archive", "--commit", "30bc3ae", "--results", str(t / "ra")],
                         cwd=clone, capture_output=True, text=True, env={**env.env, "PYTHONPATH": str(clone)})
    got = t / "ra" / "archive" / "30bc3ae" / "runs" / "cpu-d4_base_s0" / "summary.json"
    same = got.exists() and got.read_bytes() == (REPO / "results" / ARCHIVED / "cpu-d4_base_s0" / "summary.json").read_bytes()
    return ("inputs", "archive restored under a git replace of one record", "clear" if same else
            ("silent" if res.returncode == 0 else judge_error(res, "30bc3ae")), res.returncode, _tail(res))


def input_cases(env: Env) -> list:
    t = env.tmp / "inputs"
    t.mkdir()
    out = input_paper_cases(env)
    run = t / "finished"
    env.py(*train_cmd(run))
    out += writes_cases(env, run)
    out += lock_cases(env, t)
    out += misc_cases(env, t, run)
    return out


def _tail(res) -> str:
    text = (res.stderr.strip() or res.stdout.strip()).splitlines()
    last = [x for x in text if x.strip() and "WARNING | Kernel" not in x]
    return (last[-1] if last else "")[:160]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--code", type=Path, default=REPO, help="the checkout whose code is tried (default: this one)")
    p.add_argument("--only", choices=["records", "folders", "sandbox", "inputs"], default=None)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xsa-hostile-") as tmp:
        env = Env(args.code.resolve(), Path(tmp))
        rows = []
        for kind, cases in (("records", record_cases), ("folders", folder_cases), ("sandbox", sandbox_cases),
                            ("inputs", input_cases)):
            if args.only in (None, kind):
                rows += cases(env)
    counts = {}
    for kind, name, verdict, rc, note in rows:
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{kind:8s} {verdict:9s} rc={rc:<3} {name}: {note}")
    print(f"{len(rows)} cases: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in VERDICTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
