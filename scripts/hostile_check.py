"""
A hostile user's session against the records, the run folders and the sandbox, on copies only.

    PYTHONPATH=. python scripts/hostile_check.py [--code DIR] [--only records|folders|sandbox|inputs|more]

Each case damages a copy of the committed records, races or breaks a run folder (smoke preset),
tries to forge or escape the HumanEval sandbox, or (inputs) feeds the paper a record that is not
bound to its run, writes one record over another, shares a folder through another path, or passes a
hostile value to a command, or (more, scripts/hostile_more.py) gives every command bad values, damaged
run folders, hostile environment variables and a killed process's leftovers, and classifies what the
code at DIR (default: this checkout) does:

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
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostile_common import (ADD, REPO, RUN, VERDICTS, Env, digest, edit, judge_error, lines_edit, paper,
                            slow_training, tail, train_cmd)
from hostile_inputs import input_cases
from hostile_more import more_cases


# -----------------------------------------------------------------------------
# records: the paper stage on a damaged copy

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
        out.append(("records", name, verdict, res.returncode, named[0][-150:] if named else tail(res)))
    # leaving a run out on purpose: the paper is built and names it
    case = env.fresh()
    shutil.rmtree(case / "results" / "runs" / RUN)
    res = paper(env, case, "--leave-out", RUN)
    md = (case / "paper" / "paper.md").read_text() if (case / "paper" / "paper.md").exists() else ""
    ok = res.returncode == 0 and f"left out by choice, so in no number below: {RUN}" in md.lower()  # the note opens a sentence
    out.append(("records", "a run left out on purpose (--leave-out)", "clear" if ok else
                ("unclear" if res.returncode else "silent"), res.returncode, tail(res)))
    case = env.fresh()
    res = paper(env, case, "--leave-out", "no-such-run")
    out.append(("records", "--leave-out of a run the study lacks", judge_error(res, "no-such-run"),
                res.returncode, tail(res)))
    case = env.fresh()
    (case / "file").write_text("x")
    res = env.py("-m", "xsa.pipeline", "--study", "default", "--stages", "paper", "--results", str(case / "results"),
                 "--paper", str(case / "file" / "paper"))
    v = judge_error(res, str(case / "file"))
    out.append(("records", "--paper under a regular file", "unclear" if v == "clear" and "running" in res.stdout
                else v, res.returncode, tail(res)))
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
                    else v, res.returncode, tail(res)))
    return out


# -----------------------------------------------------------------------------
# folders: trainings, evaluations and diagnostics of the smoke preset

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
            a = slow_training(env, d, "--alpha", "1", wait_lines=12, delay=1.0)  # past step 10, ~20 s left
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
        out.append(("folders", name, v, b.returncode, note + tail(b)))
    # a finished run resumed
    d = t / "finished"
    env.py(*train_cmd(d))
    before = digest(d)
    res = env.py(*train_cmd(d, "--resume"))
    out.append(("folders", "resume of a finished run", "clear" if res.returncode == 0 and digest(d) == before
                else "silent", res.returncode, tail(res)))
    # a torn last line, then resume
    m = d / "metrics.jsonl"
    whole = m.read_text()
    m.write_text(whole[:-30])
    res = env.py(*train_cmd(d, "--resume"))
    redone = m.read_text()
    said = "torn last line" in res.stdout + res.stderr
    out.append(("folders", "torn last line of metrics.jsonl, then resume",
                "clear" if said and redone.count("\n") == whole.count("\n") and json.loads(redone.splitlines()[-1])
                .get("val_bpb") == json.loads(whole.splitlines()[-1])["val_bpb"] else "silent", res.returncode, tail(res)))
    # a doubled log, then resume (a checkpoint mid-run)
    d2 = t / "doubled"
    env.py(*train_cmd(d2, "--max-steps", "10"))
    (d2 / "metrics.jsonl").write_text((d2 / "metrics.jsonl").read_text() * 2)
    res = env.py(*train_cmd(d2, "--resume"))
    out.append(("folders", "doubled metrics.jsonl, then resume", judge_error(res, str(d2 / "metrics.jsonl")),
                res.returncode, tail(res)))
    # --out under a regular file
    (t / "file").write_text("x")
    res = env.py(*train_cmd(t / "file" / "run", "--max-steps", "1"))
    out.append(("folders", "--out under a regular file", judge_error(res, str(t / "file")), res.returncode, tail(res)))
    # kill -9 during training (after its checkpoint at step 10), then resume: bit for bit
    d3 = t / "killed"
    p = slow_training(env, d3, wait_lines=15)
    p.kill()
    p.communicate()
    res = env.py(*train_cmd(d3, "--resume"))
    same = (d3 / "summary.json").exists() and json.loads((d3 / "summary.json").read_text())["final_weights_sha256"] \
        == json.loads((d / "summary.json").read_text())["final_weights_sha256"]
    out.append(("folders", "kill -9 during training, then resume", "clear" if same else "silent",
                res.returncode, tail(res)))
    # diagnostics of a folder while a training holds it
    d4 = t / "busy"
    env.py(*train_cmd(d4, "--max-steps", "10"))  # a model at step 10, resumed to 30 while diagnostics read it
    p = slow_training(env, d4, "--resume", wait_lines=13, delay=1.0)
    res = env.py("-m", "xsa.diagnostics", "--run", str(d4), "--out", str(t / "busy_diag.json"))
    p.communicate(timeout=600)
    out.append(("folders", "diagnostics of a folder in training", judge_error(res, str(d4)), res.returncode, tail(res)))
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
                res.returncode, tail(res)))
    # stale build folders
    cache = Path.home() / ".cache" / "xsa" / "data"
    stale = cache / ".smoke.building-999999"
    stale.mkdir(exist_ok=True)
    res = env.py("-m", "xsa.data", "build", "--subset", "smoke")
    out.append(("folders", "stale .smoke.building-<pid> left by a killed build", "clear" if not stale.exists()
                else "silent", res.returncode, tail(res)))
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
                    (labelled and "not trained to its horizon" in res.stderr) else "silent", res.returncode, tail(res)))
        (t / "list.json").write_text("[]")
        t0 = time.time()
        res = env.py("-m", "xsa.evaluate", "core", "--run", str(d), "--bundle", str(bundle), "--max-per-task", "2",
                     "--out", str(t / "list.json"))
        v = judge_error(res, str(t / "list.json"))
        out.append(("folders", "evaluate core --out naming a JSON list", v if "core =" not in res.stdout or v != "clear"
                    else "unclear", res.returncode, tail(res) + f" ({time.time() - t0:.0f} s)"))
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
                    res.returncode, tail(res)))
        # a full disk during training
        full = t / "full"
        full.mkdir()
        script = (f"mount -t tmpfs -o size=300k tmpfs {full} && exec {sys.executable} "
                  + " ".join(train_cmd(full / "run")))
        res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env.env,
                             cwd=env.code, timeout=600)
        out.append(("folders", "a full disk during training", judge_error(res, str(full / "run")),
                    res.returncode, tail(res)))
    return out


# -----------------------------------------------------------------------------
# sandbox: forge a pass, or get out

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
            out.append(("sandbox", name, "unclear", res.returncode, tail(res)))
            continue
        escaped = Path("/tmp/xsa-escaped").exists()
        Path("/tmp/xsa-escaped").unlink(missing_ok=True)
        v = "clear" if passed == should and not escaped else ("data loss" if escaped else "silent")
        out.append(("sandbox", name, v, res.returncode, f"passed={passed} ({status})"))
    return out



def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--code", type=Path, default=REPO, help="the checkout whose code is tried (default: this one)")
    p.add_argument("--only", choices=["records", "folders", "sandbox", "inputs", "more"], default=None)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xsa-hostile-") as tmp:
        env = Env(args.code.resolve(), Path(tmp))
        rows = []
        for kind, cases in (("records", record_cases), ("folders", folder_cases), ("sandbox", sandbox_cases),
                            ("inputs", input_cases), ("more", more_cases)):
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
