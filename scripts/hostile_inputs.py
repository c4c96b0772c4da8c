"""
The inputs group of scripts/hostile_check.py: every record the paper reads bound to its run, the
paper's other inputs (throughput, the archived study, GPU folders), no record written over another
kind, one owner per folder through any path, bounded sandbox replies, and the smaller cases (an
unknown study, make's values, the archive's commit, a killed write's temporary file, data rebuilt
under a run).
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

from hostile_common import (ADD, REPO, RUN, Env, digest, edit, judge_error, lines_edit, paper, slow_training, tail,
                            train_cmd)

ROBUST_RUN = "cpu-w64-d4_xsa1-compiled-mlr0.08_s100"  # a run of the robust study's primary comparison
ARCHIVED = Path("archive") / "30bc3ae" / "runs"
SCALE_RUN = "cpu-w64-d4-s1536_base-compiled-mlr0.08_s200"  # a finished record of the scale study (its x4 bracket)


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
    "scale study: NaN val bpb in a record's summary": (
        lambda r: edit(r / "runs" / SCALE_RUN / "summary.json", val_bpb=float("nan")), SCALE_RUN),
    "scale study: another seed's summary.json copied in": (
        lambda r: shutil.copy(r / "runs" / SCALE_RUN.replace("_s200", "_s201") / "summary.json",
                              r / "runs" / SCALE_RUN / "summary.json"), SCALE_RUN),
}


def input_paper_cases(env: Env) -> list:
    out = []
    for name, (damage, named) in INPUT_DAMAGES.items():
        case = env.fresh()
        damage(case / "results")
        inputs = lambda: {k: digest(case / "results" / k) for k in ("runs", "throughput", "archive")}
        before = inputs()  # the paper stage writes its executed notebook under results/: not an input
        res = paper(env, case)
        verdict = judge_error(res, named, inputs() != before)
        built = (case / "paper").exists() or (case / "results" / "tables").exists()
        out.append(("inputs", name, "unclear" if verdict == "clear" and built else verdict, res.returncode,
                    tail(res)))
    # an estimates file of a study this paper does not build (the text may read it), damaged: a paper
    # that does not read it is right; one that does must stop naming it before writing anything
    case = env.fresh()
    (case / "results" / "estimates").mkdir()
    (case / "results" / "estimates" / "gpu.json").write_text("[]")
    res = paper(env, case)
    built = (case / "paper").exists() or (case / "results" / "tables").exists()
    v = ("clear" if built else "unclear") if res.returncode == 0 else judge_error(res, "gpu.json")
    out.append(("inputs", "an estimates file of another study damaged (a JSON list)",
                "unclear" if v == "clear" and res.returncode and built else v, res.returncode, tail(res)))
    # asked for on purpose: a robust-study run left out, an interim paper. The robust study is registered
    # final (its text states it whole), so the right answer is either a paper that says so or a refusal,
    # before anything is written, that names the run's folder
    for name, extra, said in (("--leave-out of a robust-study run", ("--leave-out", ROBUST_RUN),
                               f"{ROBUST_RUN} is left out by choice"),
                              ("--interim while a robust-study run is missing", ("--interim",), "interim")):
        case = env.fresh()
        shutil.rmtree(case / "results" / "runs" / ROBUST_RUN)
        res = paper(env, case, *extra)
        md = (case / "paper" / "paper.md").read_text() if (case / "paper" / "paper.md").exists() else ""
        refused = res.returncode != 0 and ROBUST_RUN in res.stderr + res.stdout
        out.append(("inputs", name, "clear" if (res.returncode == 0 and said in md) or refused else
                    ("unclear" if res.returncode else "silent"), res.returncode, tail(res)))
    return out


def writes_cases(env: Env, run: Path) -> list:
    """A record of one kind written over another's: each must be refused and change nothing."""
    out = []
    bundle = next((b for b in (Path(os.environ.get("XSA_EVAL_BUNDLE", "/nonexistent")), REPO.parent / "shared" /
                   "eval_bundle", REPO.parent.parent / "shared" / "eval_bundle") if (b / "core.yaml").exists()),
                  REPO.parent / "shared" / "eval_bundle")
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
        out.append(("inputs", name, judge_error(res, str(target), lost), res.returncode, tail(res)))
    return out


def lock_cases(env: Env, t: Path) -> list:
    out = []
    # a second training through a symlinked path, and after the lock file is deleted
    for name, how in (("a training through a symlink to a folder in training", "symlink"),
                      ("a training after the lock file of a folder in training was deleted", "deleted")):
        d = t / f"lock-{how}"
        a = slow_training(env, d, "--alpha", "1", wait_lines=12, delay=1.5)  # a minute left to train
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
        out.append(("inputs", name, v, b.returncode, f"first rc={a.returncode}; " + tail(b)))
    # the lock file a symlink to another file: never followed, never truncated
    victim = t / "victim.txt"
    victim.write_text("precious\n")
    d = t / "lock-victim"
    (t / f".{d.name}.lock").symlink_to(victim)
    res = env.py(*train_cmd(d, "--max-steps", "1"))
    lost = victim.read_text() != "precious\n"
    out.append(("inputs", "the lock file a symlink to another file", judge_error(res, d.name, lost) if res.returncode
                else ("data loss" if lost else "silent"), res.returncode, tail(res)))
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
                    res.returncode, f"{seconds:.0f} s; " + tail(res)))
    except subprocess.TimeoutExpired:
        out.append(("inputs", "sandbox reply: a large set whose elements hash alike (5 s limit)", "unclear", -1,
                    "over 600 s"))
    # the pipeline's --status of an unknown study
    res = env.py("-m", "xsa.pipeline", "--study", "nope", "--status", "--results", str(t / "r"))
    out.append(("inputs", "pipeline --status --study nope", judge_error(res, "nope"), res.returncode, tail(res)))
    # the archive: a moving ref as its name, and git replace objects
    res = env.py("-m", "xsa.archive", "--commit", "HEAD", "--results", str(t / "arch"))
    out.append(("inputs", "archive --commit HEAD", "silent" if res.returncode == 0 else judge_error(res, "HEAD"),
                res.returncode, tail(res)))
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
                judge_error(res, str(data)), res.returncode, tail(res)))
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
            ("silent" if res.returncode == 0 else judge_error(res, "30bc3ae")), res.returncode, tail(res))


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
