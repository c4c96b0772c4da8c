"""
The `more` group of scripts/hostile_check.py: every command's arguments with bad values (NaN, inf,
negative, huge, wrong types, a folder for a file and a file for a folder), damaged run folders and
checkpoints (binary garbage, JSON of the wrong shape, truncated files, symlink loops), hostile
environment variables, leftovers of killed processes, and records written over records.

Each case runs one command of the code under test in a folder of its own (the smoke preset, a few
steps at most; the fixtures are one finished smoke run and one stopped at step 10) and is judged as
the other groups are (hostile_common.judge_error): a refusal must name the path or value at fault,
and a folder the case watches must not change.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hostile_common import REPO, Env, digest, edit, judge_error, tail, train_cmd

SMOKE_DATA = Path.home() / ".cache" / "xsa" / "data" / "smoke"


@dataclass
class Case:
    group: str  # the command
    name: str
    argv: Callable  # (case folder) -> the command's arguments
    named: str | Callable = ""  # what a refusal must name (a callable gets the case folder)
    setup: Callable | None = None  # (env, case folder, fixtures) -> None
    env: Callable | None = None  # (case folder) -> extra environment variables
    watch: str | None = None  # a folder under the case folder whose files must not change
    judge: Callable | None = None  # (result, case folder) -> verdict, where exit 0 may be right
    timeout: int = 300


def bundle_dir() -> Path | None:
    for b in (os.environ.get("XSA_EVAL_BUNDLE"), REPO.parent / "shared" / "eval_bundle",
              REPO.parent.parent / "shared" / "eval_bundle"):
        if b and (Path(b) / "core.yaml").exists():
            return Path(b)
    return None


# -----------------------------------------------------------------------------
# setups: a copy of a fixture, then one damage

def copy(fixture: str, damage: Callable | None = None):
    def setup(env, c: Path, fx: Path):
        shutil.copytree(fx / fixture, c / "run", symlinks=True)
        if damage:
            damage(c / "run")
    return setup


def garbage(name: str):
    return lambda r: (r / name).write_bytes(b"\x89\xff\x00garbage\xfe" * 40)


def json_list(name: str):
    return lambda r: (r / name).write_text("[]\n")


def truncate(name: str):
    return lambda r: (r / name).write_bytes((r / name).read_bytes()[: (r / name).stat().st_size // 2])


def replace_dir(name: str):
    def damage(r):
        (r / name).unlink()
        (r / name).mkdir()
    return damage


def loop(name: str):
    def damage(r):
        p = r / name
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        p.symlink_to(p)
    return damage


def a_file(c: Path, name: str = "file") -> Path:
    (c / name).write_text("not a folder\n")
    return c / name


def file_setup(env, c, fx):
    a_file(c)


def both(*setups):
    def setup(env, c, fx):
        for s in setups:
            s(env, c, fx)
    return setup


def keep_json(text: str):
    def setup(env, c, fx):
        (c / "keep").mkdir()
        (c / "keep" / "record.json").write_text(text)
    return setup


def results_without_records(env, c, fx):
    (c / "results" / "runs").mkdir(parents=True)


def stale_run_lock(env, c, fx):
    copy("half")(env, c, fx)
    (c / ".run.lock").write_text("12345\n")  # the lock file of a killed training, no one holds it


def stale_eval_lock(env, c, fx):
    copy("fin")(env, c, fx)
    (c / "run" / "eval.json.lock").write_text("")


def two_evaluations(env, c, fx):
    """A first evaluation of another run (stopped at step 10) into keep/a.json, with its per-item
    values beside it; the case's command then evaluates the finished run into keep/b.json."""
    copy("fin")(env, c, fx)
    shutil.copytree(fx / "half", c / "other")
    (c / "keep").mkdir()
    env.py("-m", "xsa.evaluate", "core", "--run", str(c / "other"), "--bundle", str(bundle_dir()),
           "--max-per-task", "1", "--out", str(c / "keep" / "a.json"), "--device", "cpu")


def other_seed_state(env, c, fx):
    copy("half")(env, c, fx)
    shutil.copy(fx / "half1" / "ckpt" / "state.pt", c / "run" / "ckpt" / "state.pt")


def smoke_data_copy(damage: Callable | None = None):
    def setup(env, c, fx):
        shutil.copytree(SMOKE_DATA, c / "data")
        if damage:
            damage(c / "data")
    return setup


def flip_val_shard(d: Path):
    shard = sorted((d / "shards").glob("val_*.bin"))[0]
    raw = bytearray(shard.read_bytes())
    raw[100] ^= 1
    shard.write_bytes(bytes(raw))


def changed_config(r: Path):
    edit(r / "config.json", matrix_lr=0.5)


def other_files(env, c, fx):
    (c / "run").mkdir()
    (c / "run" / "notes.txt").write_text("precious\n")


# -----------------------------------------------------------------------------
# judges where exit 0 may be right

def finished(res, c: Path, folder: str = "run") -> str:
    s = c / folder / "summary.json"
    ok = res.returncode == 0 and s.exists() and json.loads(s.read_text()).get("steps", 0) > 0
    return "clear" if ok else judge_error(res, folder)


WEIRD = "we ird;touch x\nnl"


def weird_path(res, c: Path) -> str:
    ok = res.returncode == 0 and (c / WEIRD / "summary.json").exists() and not (c / "x").exists()
    return "clear" if ok else judge_error(res, "we ird")


def evaluated(res, c: Path) -> str:
    e = c / "run" / "eval.json"
    return "clear" if res.returncode == 0 and e.exists() and "core" in json.loads(e.read_text()) \
        else judge_error(res, str(c / "run"))


def T(*extra, run="run"):
    """A training command into the case's run folder (`run`), stopped after one step unless resumed."""
    steps = () if "--resume" in extra else ("--max-steps", "1")
    return lambda c: train_cmd(c / run, *extra, *steps)


# -----------------------------------------------------------------------------
# the cases

def D(*extra):
    return lambda c: ["-m", "xsa.diagnostics", "--run", str(c / "run"), *extra]


def E(*extra, command="core"):
    return lambda c: ["-m", "xsa.evaluate", command, "--run", str(c / "run"), "--max-per-task", "1", "--device", "cpu",
                      *extra]


def B(*extra, command="core"):
    """an evaluation with the bundle"""
    return lambda c: E("--bundle", str(bundle_dir()), *extra, command=command)(c)


def P(*extra):
    return lambda c: ["-m", "xsa.throughput", "--preset", "smoke", "--steps", "1", "--warmup", "0", *extra]


def R(*extra):
    return lambda c: ["-m", "xsa.prereg", *extra]


def Q(*extra):
    return lambda c: ["-m", "xsa.reproduce", "--run", str(c / "run"), "--no-progress", *extra]


def at(*parts):
    """a path under the case folder, as a callable of it"""
    return lambda c: str(c.joinpath(*parts))


TRAIN = [
    Case("train", "--alpha nan", T("--alpha", "nan"), "nan"),
    Case("train", "--alpha inf", T("--alpha", "inf"), "inf"),
    Case("train", "--seed -1", T("--seed", "-1"), "seed"),
    Case("train", "--seed 2^80", T("--seed", str(2 ** 80)), str(2 ** 80)),
    Case("train", "--set matrix_lr=nan", T("--set", "matrix_lr=nan"), "matrix_lr"),
    Case("train", "--set matrix_lr given twice", T("--set", "matrix_lr=0.1", "--set", "matrix_lr=0.2"), "matrix_lr"),
    Case("train", "--set without '='", T("--set", "matrix_lr"), "matrix_lr"),
    Case("train", "--set n_layer=true (a boolean for a count)", T("--set", "n_layer=true"), "n_layer"),
    Case("train", "--xsa-layers last:0", T("--xsa-layers", "last:0"), "last:0"),
    Case("train", "--device bogus", T("--device", "bogus"), "bogus"),
    Case("train", "--device-batch-size 3 (does not divide the batch)", T("--device-batch-size", "3"),
         "device_batch_size"),
    Case("train", "--data-dir a regular file", lambda c: T("--data-dir", str(c / "file"))(c), at("file"),
         setup=file_setup),
    Case("train", "--out with a space, ';' and a newline", lambda c: train_cmd(c / WEIRD, "--max-steps", "1"),
         judge=weird_path),
    Case("train", "--resume of a folder that does not exist", T("--resume"), at("run")),
    Case("train", "--resume, config.json binary garbage", T("--resume"), at("run", "config.json"),
         setup=copy("half", garbage("config.json")), watch="run"),
    Case("train", "--resume, config.json empty", T("--resume"), at("run", "config.json"),
         setup=copy("half", lambda r: (r / "config.json").write_text("")), watch="run"),
    Case("train", "--resume, summary.json a JSON list", T("--resume"), at("run", "summary.json"),
         setup=copy("fin", json_list("summary.json")), watch="run"),
    Case("train", "--resume, truncated ckpt/state.pt", T("--resume"), at("run", "ckpt", "state.pt"),
         setup=copy("half", truncate("ckpt/state.pt")), watch="run"),
    Case("train", "--resume, ckpt/state.pt a folder", T("--resume"), at("run", "ckpt", "state.pt"),
         setup=copy("half", replace_dir("ckpt/state.pt")), watch="run"),
    Case("train", "--resume, ckpt/state.pt a symlink loop", T("--resume"), at("run", "ckpt", "state.pt"),
         setup=copy("half", loop("ckpt/state.pt")), watch="run"),
    Case("train", "--resume, ckpt/state.pt of another seed", T("--resume"), at("run", "ckpt", "state.pt"),
         setup=other_seed_state, watch="run"),
    Case("train", "--resume, metrics.jsonl binary garbage", T("--resume"), at("run", "metrics.jsonl"),
         setup=copy("half", garbage("metrics.jsonl")), watch="run"),
    Case("train", "--resume after a killed training's stale lock file", T("--resume"), judge=finished,
         setup=stale_run_lock),
    Case("train", "--overwrite of a folder of other files (not a run)", T("--overwrite"), at("run"),
         setup=other_files, watch="run"),
    Case("train", "RANK=abc in the environment", T(), "RANK",
         env=lambda c: {"RANK": "abc", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}),
    Case("train", "XSA_CACHE a regular file", T(), at("file"), setup=file_setup,
         env=lambda c: {"XSA_CACHE": str(c / "file")}),
    Case("train", "XSA_DATA_DIR a regular file", T(), at("file"), setup=file_setup,
         env=lambda c: {"XSA_DATA_DIR": str(c / "file")}),
]

DIAGNOSTICS = [
    Case("diag", "config.json a JSON list", D("--out", "OUT"), at("run", "config.json"),
         setup=copy("fin", json_list("config.json")), watch="run"),
    Case("diag", "truncated ckpt/model.pt", D(), at("run", "ckpt", "model.pt"),
         setup=copy("fin", truncate("ckpt/model.pt")), watch="run"),
    Case("diag", "ckpt/ a symlink loop", D(), at("run"), setup=copy("fin", loop("ckpt")), watch="run"),
    Case("diag", "--batch-size 100000", D("--batch-size", "100000"), "100000", setup=copy("fin"), watch="run"),
    Case("diag", "--out a folder", lambda c: D("--out", str(c / "run" / "ckpt"))(c), at("run", "ckpt"),
         setup=copy("fin"), watch="run"),
    Case("diag", "--out under a regular file", lambda c: D("--out", str(c / "file" / "d.json"))(c), at("file"),
         setup=both(copy("fin"), file_setup), watch="run"),
]

EVALUATE = [
    Case("evaluate", "core, config.json a JSON list", B(), at("run", "config.json"),
         setup=copy("fin", json_list("config.json")), watch="run"),
    Case("evaluate", "core, $XSA_EVAL_BUNDLE names no folder", E(), at("nowhere"), setup=copy("fin"),
         env=lambda c: {"XSA_EVAL_BUNDLE": str(c / "nowhere")}, watch="run"),
    Case("evaluate", "core, $XSA_EVAL_BUNDLE a regular file", E(), at("file"), setup=both(copy("fin"), file_setup),
         env=lambda c: {"XSA_EVAL_BUNDLE": str(c / "file")}, watch="run"),
    Case("evaluate", "core --bundle an empty folder", lambda c: E("--bundle", str(c / "run" / "ckpt"))(c),
         at("run", "ckpt"), setup=copy("fin"), watch="run"),
    Case("evaluate", "core --out a folder", lambda c: B("--out", str(c / "keep"))(c), at("keep"),
         setup=both(copy("fin"), keep_json("{}")), watch="keep"),
    Case("evaluate", "core --out a file of corrupt JSON", lambda c: B("--out", str(c / "keep" / "record.json"))(c),
         at("keep", "record.json"), setup=both(copy("fin"), keep_json('{"core": 0.5, ')), watch="keep"),
    Case("evaluate", "core, truncated ckpt/model.pt", B(), at("run", "ckpt", "model.pt"),
         setup=copy("fin", truncate("ckpt/model.pt")), watch="run"),
    Case("evaluate", "core --max-per-task -3", lambda c: B()(c) + ["--max-per-task", "-3"], "-3", setup=copy("fin"),
         watch="run"),
    Case("evaluate", "core --out b.json beside an earlier --out a.json",
         lambda c: B("--out", str(c / "keep" / "b.json"))(c),
         judge=lambda res, c: "clear" if res.returncode == 0 else judge_error(res, str(c / "keep")),
         setup=two_evaluations, watch="keep"),
    Case("evaluate", "core after a killed evaluation's stale eval.json.lock", B(), judge=evaluated,
         setup=stale_eval_lock),
    Case("evaluate", "chat --sft-data nanochat with the hub out of reach", lambda c: B(
        "--sft-steps", "1", "--sft-data", "nanochat", command="chat")(c), "XSA_SFT_DIR", setup=copy("fin"),
         env=lambda c: {"XSA_SFT_DIR": str(c / "sft"), "HF_ENDPOINT": "http://127.0.0.1:9"}),
]

THROUGHPUT = [
    Case("throughput", "--threads 100000", lambda c: P("--threads", "100000", "--out", str(c / "t.json"))(c),
         "--threads"),
    Case("throughput", "--set xsa_alpha=0.5 (XSA in the baseline arm)",
         lambda c: P("--set", "xsa_alpha=0.5", "--out", str(c / "t.json"))(c), "xsa_alpha"),
    Case("throughput", "--total-batch-size 3", lambda c: P("--total-batch-size", "3", "--out", str(c / "t.json"))(c),
         "total_batch_size"),
    Case("throughput", "--out a folder --overwrite", lambda c: P("--out", str(c / "keep"), "--overwrite")(c),
         at("keep"), setup=keep_json("{}"), watch="keep"),
    Case("throughput", "--vs a field at the baseline's own value",
         lambda c: P("--vs", "xsa_layers=none", "--out", str(c / "t.json"))(c), "xsa_layers"),
]

PREREG = [
    Case("prereg", "--study robust on a results folder without records",
         lambda c: R("--results", str(c / "results"), "--out", str(c / "p.md"))(c), at("results"),
         setup=results_without_records),
    Case("prereg", "--study scale on a results folder without records",
         lambda c: R("--study", "scale", "--results", str(c / "results"), "--out", str(c / "p.md"))(c),
         at("results"), setup=results_without_records),
    Case("prereg", "--study scale-check on a results folder without records",
         lambda c: R("--study", "scale-check", "--results", str(c / "results"), "--out", str(c / "p.md"))(c),
         at("results"), setup=results_without_records),
    Case("prereg", "--out a folder --force", lambda c: R("--results", "COMMITTED", "--out", str(c / "keep"),
                                                          "--force")(c), at("keep"), setup=keep_json("{}"),
         watch="keep"),
    Case("prereg", "--force over a run's summary.json",
         lambda c: R("--results", "COMMITTED", "--out", str(c / "run" / "summary.json"), "--force")(c),
         at("run", "summary.json"), setup=copy("fin"), watch="run"),
    Case("prereg", "--results a regular file", lambda c: R("--results", str(c / "file"), "--out", str(c / "p.md"))(c),
         at("file"), setup=file_setup),
]

REPRODUCE = [
    Case("reproduce", "summary.json a JSON list", Q("--out", "OUT"), at("run", "summary.json"),
         setup=copy("fin", json_list("summary.json")), watch="run"),
    Case("reproduce", "provenance.json binary garbage", Q("--out", "OUT"), at("run", "provenance.json"),
         setup=copy("fin", garbage("provenance.json")), watch="run"),
    Case("reproduce", "config.json a JSON list", Q("--out", "OUT"), at("run", "config.json"),
         setup=copy("fin", json_list("config.json")), watch="run"),
    Case("reproduce", "--out a folder", lambda c: Q("--out", str(c / "keep"))(c), at("keep"),
         setup=both(copy("fin"), keep_json("{}")), watch="keep"),
    Case("reproduce", "--out the run's own summary.json", lambda c: Q("--out", str(c / "run" / "summary.json"))(c),
         at("run", "summary.json"), setup=copy("fin"), watch="run"),
    Case("reproduce", "config.json changed after training", Q("--out", "OUT"), at("run"),
         setup=copy("fin", changed_config), watch="run"),
    Case("reproduce", "--data-dir a regular file", lambda c: Q("--data-dir", str(c / "file"), "--out", "OUT")(c),
         at("file"), setup=both(copy("fin"), file_setup), watch="run"),
]

PIPELINE = [
    Case("pipeline", "--shard 2/1", lambda c: ["-m", "xsa.pipeline", "--study", "smoke", "--stages", "train",
                                              "--shard", "2/1", "--results", str(c / "r"), "--paper", str(c / "p")],
         "2/1"),
    Case("pipeline", "--stages bogus", lambda c: ["-m", "xsa.pipeline", "--study", "smoke", "--stages", "bogus",
                                                 "--results", str(c / "r"), "--paper", str(c / "p")], "bogus"),
    Case("pipeline", "--status --results a regular file",
         lambda c: ["-m", "xsa.pipeline", "--study", "smoke", "--status", "--results", str(c / "file")], at("file"),
         setup=file_setup),
    Case("pipeline", "--compact-records of a folder outside results/executed",
         lambda c: ["-m", "xsa.pipeline", "--compact-records", str(c / "keep")], at("keep"), setup=keep_json("{}"),
         watch="keep"),
]

DATA = [
    Case("data", "verify of an empty folder", lambda c: ["-m", "xsa.data", "verify", "--data-dir", str(c / "empty")],
         at("empty"), setup=lambda env, c, fx: (c / "empty").mkdir()),
    Case("data", "verify, a validation shard with one bit flipped",
         lambda c: ["-m", "xsa.data", "verify", "--data-dir", str(c / "data")], at("data", "shards"),
         setup=smoke_data_copy(flip_val_shard), watch="data"),
    Case("data", "verify, manifest.json binary garbage",
         lambda c: ["-m", "xsa.data", "verify", "--data-dir", str(c / "data")], at("data", "manifest.json"),
         setup=smoke_data_copy(garbage("manifest.json")), watch="data"),
    Case("data", "build --tokens nan", lambda c: ["-m", "xsa.data", "build", "--tokens", "nan", "--data-dir",
                                                 str(c / "d")], "nan"),
    Case("data", "build --subset climbmix with XSA_CLIMBMIX_SHARDS=abc",
         lambda c: ["-m", "xsa.data", "build", "--subset", "climbmix", "--data-dir", str(c / "d")],
         "XSA_CLIMBMIX_SHARDS", env=lambda c: {"XSA_CLIMBMIX_SHARDS": "abc"}),
    Case("data", "card --data-dir a regular file", lambda c: ["-m", "xsa.data", "card", "--data-dir", str(c / "file")],
         at("file"), setup=file_setup),
]

OTHER = [
    Case("memory", "--world 10^11", lambda c: ["-m", "xsa.memory", "--world", str(10 ** 11)], "--world", timeout=30),
    Case("archive", "--commit of no hex digits", lambda c: ["-m", "xsa.archive", "--commit", "zzzz", "--results",
                                                           str(c / "r")], "zzzz"),
    Case("decode", "decode_speed --questions 0", lambda c: ["-m", "xsa.evaluate.decode_speed", "--questions", "0"],
         "--questions"),
]


# -----------------------------------------------------------------------------

def fixtures(env: Env) -> Path:
    """One finished smoke run, one stopped at step 10 and one of another seed stopped there, trained by
    the code under test."""
    fx = env.tmp / "more-fixtures"
    for name, extra in (("fin", ()), ("half", ("--max-steps", "10")), ("half1", ("--max-steps", "10", "--seed", "1"))):
        res = env.py(*train_cmd(fx / name, *extra))
        if res.returncode:
            raise SystemExit(f"hostile_more: the fixture {name} did not train: {tail(res)}")
    return fx


def run_case(env: Env, case: Case, c: Path, fx: Path):
    c.mkdir(parents=True)
    if case.setup:
        case.setup(env, c, fx)
    named = case.named(c) if callable(case.named) else case.named
    argv = [str(c / "out.json") if a == "OUT" else str(env.committed) if a == "COMMITTED" else a
            for a in case.argv(c)]
    before = digest(c / case.watch) if case.watch and (c / case.watch).is_dir() else {}
    saved = env.env
    env.env = {**saved, **(case.env(c) if case.env else {})}
    try:
        res = env.py(*argv, timeout=case.timeout)
    except subprocess.TimeoutExpired:
        return ("more", f"{case.group}: {case.name}", "unclear", -1, f"no answer in {case.timeout} s (killed)")
    finally:
        env.env = saved
    after = digest(c / case.watch) if case.watch and (c / case.watch).is_dir() else {}
    lost = any(after.get(k) != v for k, v in before.items())  # a file that was there is changed or gone
    verdict = "data loss" if lost else case.judge(res, c) if case.judge else judge_error(res, named)
    return ("more", f"{case.group}: {case.name}", verdict, res.returncode, tail(res))


def more_cases(env: Env) -> list:
    fx = fixtures(env)
    cases = TRAIN + DIAGNOSTICS + (EVALUATE if bundle_dir() else []) + THROUGHPUT + PREREG + REPRODUCE \
        + PIPELINE + DATA + OTHER
    if shutil.which("nvidia-smi") is None:
        cases.insert(10, Case("train", "--device cuda on a machine without a GPU", T("--device", "cuda"), "cuda"))
    only = os.environ.get("HOSTILE_MORE_ONLY")  # a part of the case names to run, to try one case again
    cases = [case for case in cases if not only or only in f"{case.group}: {case.name}"]
    return [run_case(env, case, env.tmp / "more" / f"{i:02d}", fx) for i, case in enumerate(cases)]
