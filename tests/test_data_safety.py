"""The data build's guards and knobs, on hand-made inputs (no registry download, no smoke build):
what --data-dir may replace, the one bundle lookup, the ClimbMix validation rule and shard sizing,
parallel tokenisation, the command line's default subset and its one-line errors."""

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from xsa.stack.config import DATA_SUBSETS
from xsa.stack.presets import make_config
from xsa.data import build as build_mod
from xsa.data import climbmix, ensure_data
from xsa.data import __main__ as data_main
from xsa.data.__main__ import main

REPO = Path(__file__).resolve().parents[1]
WORDS = ("river stone light garden window paper music silver forest morning letter table city bridge "
         "winter summer orange engine market doctor island camera pencil rocket yellow").split()


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)) + "."


def _write_bundle(root: Path) -> Path:
    """A tiny CORE-format bundle: core.yaml, baselines and one task file."""
    (root / "eval_data" / "x").mkdir(parents=True)
    (root / "core.yaml").write_text("icl_tasks:\n- {label: t, dataset_uri: x/t.jsonl, num_fewshot: [0], "
                                    "icl_task_type: language_modeling}\n")
    (root / "eval_meta_data.csv").write_text("Eval Task,Random baseline\nt,0\n")
    (root / "eval_data" / "x" / "t.jsonl").write_text(json.dumps(
        {"context": "the quick brown fox jumps over the lazy dog near the old", "continuation": "barn"}) + "\n")
    return root


def _fake_build_into(subset, out, bundle, *rest):
    """Stands in for the real build: a minimal complete data folder, written instantly."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_text('{"files": {}}\n')
    (out / "data_card.json").write_text(json.dumps({"documents": 0, "bytes": 0, "tokens": 0, "vocab_size": 0,
                                                    "decontaminated": 0}))
    (out / build_mod.COMPLETE).write_text("{}\n")


def _no_work(*args, **kwargs):
    raise AssertionError("the build started")


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A fresh cache and data root, a tiny local bundle, no ClimbMix sizing from the environment."""
    monkeypatch.setenv("XSA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XSA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("XSA_EVAL_BUNDLE", str(_write_bundle(tmp_path / "bundle")))
    for name in (climbmix.SHARDS_ENV, "XSA_CLIMBMIX_TOKENS", climbmix.DIR_ENV, "XSA_ARCHIVE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _user_folder(path: Path) -> dict:
    path.mkdir(parents=True, exist_ok=True)
    (path / "thesis.tex").write_text("years of work")
    (path / "sub").mkdir(exist_ok=True)
    (path / "sub" / "notes.txt").write_text("more work")
    return _snapshot(path)


def _snapshot(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else None for p in sorted(path.rglob("*"))}


# -----------------------------------------------------------------------------
# 1. --data-dir never empties a folder that is not a data build


def test_user_folder_survives_build_and_ensure_data(sandbox, monkeypatch, capsys):
    monkeypatch.setattr(build_mod, "_build_into", _fake_build_into)
    folder = sandbox / "mine"
    before = _user_folder(folder)
    with pytest.raises(ValueError, match="refusing to build into " + re.escape(str(folder))):
        build_mod.build("smoke", folder)
    assert _snapshot(folder) == before
    with pytest.raises(ValueError, match=re.escape(str(folder))):
        ensure_data("smoke", data_dir=folder)
    assert _snapshot(folder) == before
    assert main(["build", "--subset", "smoke", "--data-dir", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(folder) in err[0] and "not an xsa data build" in err[0]
    assert _snapshot(folder) == before
    # `--data-dir .` and `--data-dir ~`: the working folder and the home folder
    monkeypatch.chdir(folder)
    assert main(["build", "--subset", "smoke", "--data-dir", "."]) == 2
    monkeypatch.setenv("HOME", str(folder))
    assert main(["build", "--subset", "smoke", "--data-dir", "~"]) == 2
    with pytest.raises(ValueError, match=re.escape(str(folder))):
        ensure_data("smoke", data_dir="~")
    assert _snapshot(folder) == before
    assert not any(p.name.startswith(".mine") for p in sandbox.iterdir())  # no lock or staging beside it


def test_own_half_built_and_empty_folders_are_built(sandbox, monkeypatch):
    monkeypatch.setattr(build_mod, "_build_into", _fake_build_into)
    half = sandbox / "half"
    half.mkdir()
    (half / build_mod.MARKER).write_text(build_mod.MARKER_TEXT)
    (half / "corpus.partial").write_text("left by a killed build")
    build_mod.build("smoke", half)
    assert (half / build_mod.COMPLETE).exists() and not (half / "corpus.partial").exists()
    empty = sandbox / "empty"
    empty.mkdir()
    assert ensure_data("smoke", data_dir=empty, verify=False) == empty and (empty / build_mod.COMPLETE).exists()


def test_marker_is_written_first_and_kept_out_of_the_manifest(sandbox, monkeypatch):
    """A real build (of a tiny ClimbMix folder) carries the marker, unlisted in manifest.json."""
    _climbmix_folder(sandbox / "climbmix", train_shards=1, docs=150)
    _small_climbmix(monkeypatch, sandbox)
    seen = []
    real = build_mod.Decontaminator

    def spy(bundle):  # the first thing after the marker
        seen.append(sorted(p.name for p in sandbox.glob(".out.building-*/*")))
        return real(bundle)
    monkeypatch.setattr(build_mod, "Decontaminator", spy)
    out = build_mod.build("climbmix", sandbox / "out")
    assert seen == [[build_mod.MARKER]]
    assert (out / build_mod.MARKER).read_text() == build_mod.MARKER_TEXT
    assert build_mod.MARKER not in json.loads((out / "manifest.json").read_text())["files"]


# -----------------------------------------------------------------------------
# 2. one bundle lookup: explicit, else $XSA_EVAL_BUNDLE, else the cached download


def test_decontamination_downloads_the_bundle_like_evaluation(sandbox, monkeypatch):
    from xsa.data.decontam import Decontaminator
    from xsa.data import bundle as bundle_mod
    src = _write_bundle(sandbox / "upstream" / "eval_bundle")
    zpath = sandbox / "eval_bundle.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for p in sorted(src.rglob("*")):
            zf.write(p, p.relative_to(src.parent))
    monkeypatch.setattr(bundle_mod, "BUNDLE_URL", zpath.as_uri())  # file:// stands in for S3
    monkeypatch.setenv("XSA_EVAL_BUNDLE_SHA256", hashlib.sha256(zpath.read_bytes()).hexdigest())
    monkeypatch.delenv("XSA_EVAL_BUNDLE")
    cached = sandbox / "cache" / "eval_bundle"
    # no bundle given, none in the environment: the download, not ../shared beside the checkout
    decon = Decontaminator()
    assert decon.bundle == cached
    assert bundle_mod.resolve_bundle() == cached
    assert decon.contaminated(["so the quick brown fox jumps over the lazy dog near the old barn",
                               "an unrelated sentence"]).tolist() == [True, False]
    zpath.unlink()  # downloaded once
    assert Decontaminator().bundle == cached
    # $XSA_EVAL_BUNDLE and an explicit path win, and a folder that is not a bundle is an error
    monkeypatch.setenv("XSA_EVAL_BUNDLE", str(sandbox / "bundle"))
    assert Decontaminator().bundle == sandbox / "bundle"
    assert Decontaminator(src).bundle == src
    with pytest.raises(bundle_mod.BundleError, match="no core.yaml"):
        Decontaminator(sandbox / "upstream")


# -----------------------------------------------------------------------------
# 3. ClimbMix: val is a held-out shard's prefix, not 1% of the bytes


def _climbmix_folder(folder: Path, train_shards: int, docs: int, seed: int = 0) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for i in [*range(train_shards), climbmix.MAX_SHARD]:
        texts = [_text(rng, rng.randint(20, 400)) for _ in range(docs)]
        pq.write_table(pa.table({"text": texts}), folder / climbmix.shard_name(i), row_group_size=64)
    return folder


def _small_climbmix(monkeypatch, root: Path, val_chars: int = 3000, min_val: int = 1000):
    monkeypatch.setenv(climbmix.DIR_ENV, str(root / "climbmix"))
    monkeypatch.setitem(DATA_SUBSETS["climbmix"], "vocab_size", 300)  # what the tiny corpus can learn
    monkeypatch.setattr(build_mod, "CLIMBMIX_VAL_CHARS", val_chars)
    monkeypatch.setitem(build_mod.MIN_VAL_BYTES, "climbmix", min_val)


def test_climbmix_val_split_needs_only_its_minimum(sandbox, monkeypatch):
    _climbmix_folder(sandbox / "climbmix", train_shards=3, docs=300)
    _small_climbmix(monkeypatch, sandbox, val_chars=2000)
    calls = []
    real = build_mod.tokenize_split
    monkeypatch.setattr(build_mod, "tokenize_split", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    out = build_mod.build("climbmix", sandbox / "out")
    card = json.loads((out / "data_card.json").read_text())
    val, total = card["splits"]["val"]["bytes"], card["bytes"]
    assert 1000 <= val < 0.01 * total  # what the 1% rule refused
    assert card["splits"]["val"]["tokens"] > 0 and (out / "shards" / "val_0000.bin").exists()
    assert len(card["sources"]["climbmix"]["files"]) == 4  # 3 training shards + val
    # the shards are tokenised with every CPU, in big batches (5.)
    cpus = os.cpu_count()
    assert [(kw["threads"], kw["batch"]) for kw in calls] == [(cpus, build_mod.CLIMBMIX_BATCH_PER_THREAD * cpus)] * 2
    # the minimum still holds
    monkeypatch.setitem(build_mod.MIN_VAL_BYTES, "climbmix", 10**6)
    with pytest.raises(RuntimeError, match="validation split too small"):
        build_mod.build("climbmix", sandbox / "out2")


# -----------------------------------------------------------------------------
# 4. ClimbMix: training shards sized from a token horizon


def test_shards_for_tokens():
    f = climbmix.shards_for_tokens
    # 4.8 characters per token, 10% margin, 250M characters per shard
    assert f(1.32e9) == 28 and f(4.0e9) == 85  # ceil(27.9), ceil(84.5)
    assert f(make_config("d12").num_tokens) == 28 and f(make_config("d24").num_tokens) == 86
    assert f(1) == 1 and f(1e15) == climbmix.MAX_SHARD  # at least one, at most all
    assert f(1e15, available=10) == 10
    assert f(1000, chars_per_token=4, chars_per_shard=1000, margin=1.0) == 4
    assert f(1000, chars_per_token=4, chars_per_shard=4000, margin=1.0) == 1  # exactly one shard
    assert f(1001, chars_per_token=4, chars_per_shard=4000, margin=1.0) == 2
    assert f(1000, chars_per_token=4.2, chars_per_shard=1000, margin=1.2) == 6  # ceil(5.04)
    for bad in (0, -5, float("nan")):
        with pytest.raises(ValueError, match="tokens"):
            f(bad)


def test_preset_horizon_and_shard_count(monkeypatch):
    from xsa.stack.config import RECIPES
    for preset in ("d12", "d24"):
        horizons = [make_config(preset, recipe=r).num_tokens for r in RECIPES]
        assert climbmix.preset_tokens(preset) == max(horizons)
    assert climbmix.preset_tokens("d24") == 4026531840 and climbmix.preset_tokens("d12") == 1321205760
    monkeypatch.delenv(climbmix.SHARDS_ENV, raising=False)
    monkeypatch.delenv("XSA_CLIMBMIX_TOKENS", raising=False)
    assert climbmix.num_train_shards() is None  # the folder's shards, else DEFAULT_SHARDS
    monkeypatch.setenv("XSA_CLIMBMIX_TOKENS", "1.32e9")
    assert climbmix.num_train_shards() == 28
    monkeypatch.setenv(climbmix.SHARDS_ENV, "5")
    assert climbmix.num_train_shards() == 5 and climbmix.num_train_shards(4e9) == 85
    monkeypatch.setenv(climbmix.SHARDS_ENV, "lots")
    with pytest.raises(ValueError, match="XSA_CLIMBMIX_SHARDS"):
        climbmix.num_train_shards()


def test_cli_tokens_and_preset_size_the_build(sandbox, monkeypatch):
    seen = []

    def fake_build(subset, path, force=False, bundle=None, tokens=None, repeat=None):
        seen.append((subset, tokens))
        _fake_build_into(subset, Path(path), bundle)
    monkeypatch.setattr(data_main, "build", fake_build)  # the command's builder
    d = str(sandbox / "d")
    assert main(["build", "--subset", "climbmix", "--tokens", "4e9", "--data-dir", d]) == 0
    assert main(["build", "--preset", "d24", "--data-dir", d]) == 0
    assert main(["build", "--preset", "d12", "--subset", "climbmix", "--data-dir", d]) == 0
    assert main(["build", "--preset", "cpu-w64-d4", "--data-dir", d]) == 0  # its data, nothing to size
    # a preset's build holds what its best-fit rows read over its horizon (4,026,531,840 tokens at d24)
    assert seen == [("climbmix", 4e9), ("climbmix", climbmix.preset_tokens_read("d24")),
                    ("climbmix", climbmix.preset_tokens_read("d12")), ("default-4k", None)]
    assert climbmix.preset_tokens_read("d24") == -(-4026531840 * 100 // 65)


def test_build_uses_the_sized_shard_count(sandbox, monkeypatch):
    _climbmix_folder(sandbox / "climbmix", train_shards=3, docs=120)
    _small_climbmix(monkeypatch, sandbox)
    monkeypatch.setattr(climbmix, "CHARS_PER_SHARD", 40_000)
    out = build_mod.build("climbmix", sandbox / "out", tokens=10_000)  # 10k x 4.8 x 1.1 / 40k -> 2 shards
    files = json.loads((out / "data_card.json").read_text())["sources"]["climbmix"]["files"]
    assert files == [climbmix.shard_name(0), climbmix.shard_name(1), climbmix.shard_name(climbmix.MAX_SHARD)]


# -----------------------------------------------------------------------------
# 5. parallel tokenisation writes the same tokens


def test_tokens_identical_for_one_thread_and_several(tmp_path):
    from xsa.data.shards import ShardWriter, segments, tokenize_split
    from xsa.data.tokenizer import Tokenizer
    rng = random.Random(1)
    train = [_text(rng, rng.randint(5, 80)) for _ in range(400)]
    tok = Tokenizer.train(iter(train), 400)
    docs = []
    for i in range(100):  # short and long (several segments) documents, two sources, repeats
        text = "\n\n".join(_text(rng, rng.randint(3, 300)) for _ in range(rng.randint(1, 8)))
        docs.append((text, "a" if i % 3 else "b", 2 if i % 7 == 0 else 1))
    expected = []
    for text, _, copies in docs:
        for seg in segments(text):
            expected += ([tok.bos_id] + tok.encode(seg)) * copies
    threads_seen = set()
    encode = tok.encode
    tok.encode = lambda text: threads_seen.add(threading.get_ident()) or encode(text)

    def run(name, **kw):
        writer = ShardWriter(tmp_path / name, "train", tok.vocab_size, shard_tokens=5000)
        counts = tokenize_split(iter(docs), tok, writer, **kw)
        files = sorted((tmp_path / name).glob("train_*.bin"))
        return counts, [f.read_bytes() for f in files]

    one = run("one", threads=1, batch=16)
    assert len(one[1]) > 3  # several shard files: their boundaries are compared too
    import numpy as np
    assert np.frombuffer(b"".join(one[1]), np.uint16).tolist() == expected
    assert sum(one[0].values()) == len(expected)
    threads_seen.clear()
    for name, kw in [("four", dict(threads=4, batch=16)), ("three", dict(threads=3, batch=1)),
                     ("big", dict(threads=8, batch=10_000)), ("auto", {})]:
        assert run(name, **kw) == one, name
    assert len(threads_seen) > 1  # really encoded in several threads


# -----------------------------------------------------------------------------
# 6. the command line: `default` by default, --help everywhere


def test_cli_default_subset_is_default(sandbox, monkeypatch, capsys):
    seen = []

    def fake_build(subset, path, force=False, bundle=None, tokens=None, repeat=None):
        seen.append(subset)
        _fake_build_into(subset, Path(path), bundle)
    monkeypatch.setattr(data_main, "build", fake_build)  # the command's builder
    assert main(["build"]) == 0 and seen == ["default"]
    assert str(sandbox / "data" / "default") in capsys.readouterr().out
    for command in ("build", "verify", "card"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert exit_.value.code == 0 and "--subset" in text and "Default: default" in text, command
        if command == "build":
            assert all(f in text for f in ("--tokens", "--preset", "--force", "--bundle", "--archive-dir"))


# -----------------------------------------------------------------------------
# 7. bad arguments: one line, exit status 2, nothing done


def _one_line_error(capsys, *names):
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0]


def test_cli_bad_arguments(sandbox, monkeypatch, capsys):
    monkeypatch.setattr(build_mod, "_build_into", _no_work)
    a_file = sandbox / "a_file"
    a_file.write_text("keep me")

    def status(*argv):
        try:
            return main(list(argv))
        except SystemExit as e:
            return e.code

    assert status("build", "--subset", "nope") == 2
    _one_line_error(capsys, "--subset", "nope")
    assert status("build", "--subset", "smoke", "--data-dir", str(a_file)) == 2
    _one_line_error(capsys, a_file)
    assert a_file.read_text() == "keep me"
    assert status("build", "--subset", "smoke", "--data-dir", str(a_file / "sub")) == 2  # cannot be created
    _one_line_error(capsys, a_file / "sub", a_file)
    assert status("build", "--subset", "smoke", "--data-dir", str(sandbox / "d"), "--archive-dir",
                  str(sandbox / "none")) == 2
    _one_line_error(capsys, sandbox / "none")
    assert status("build", "--subset", "smoke", "--data-dir", str(sandbox / "d"), "--bundle", str(sandbox)) == 2
    _one_line_error(capsys, sandbox, "core.yaml")
    monkeypatch.setenv("XSA_EVAL_BUNDLE", str(sandbox / "missing"))
    assert status("build", "--subset", "smoke", "--data-dir", str(sandbox / "d")) == 2
    _one_line_error(capsys, sandbox / "missing")
    assert status("build", "--subset", "smoke", "--tokens", "1e9") == 2
    _one_line_error(capsys, "--tokens", "smoke")
    assert status("build", "--subset", "climbmix", "--tokens", "-3") == 2
    _one_line_error(capsys, "--tokens", "-3")
    assert status("build", "--preset", "d99") == 2
    _one_line_error(capsys, "--preset", "d99")
    assert status("build", "--preset", "d12", "--subset", "smoke") == 2
    _one_line_error(capsys, "d12", "smoke")
    assert status("build", "--tokens", "1e9", "--preset", "d12") == 2
    _one_line_error(capsys, "--preset", "--tokens")
    monkeypatch.setenv(climbmix.SHARDS_ENV, "many")
    assert status("build", "--subset", "climbmix", "--data-dir", str(sandbox / "d")) == 2
    _one_line_error(capsys, "XSA_CLIMBMIX_SHARDS", "many")
    for command in ("verify", "card"):
        assert status(command, "--data-dir", str(sandbox / "nothing")) == 2
        _one_line_error(capsys, sandbox / "nothing")
    assert not (sandbox / "d").exists() and not (sandbox / "cache").exists()  # nothing was built or fetched


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_cli_read_only_folder(sandbox, monkeypatch, capsys):
    monkeypatch.setattr(build_mod, "_build_into", _no_work)
    ro = sandbox / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert main(["build", "--subset", "smoke", "--data-dir", str(ro / "data")]) == 2
        _one_line_error(capsys, ro / "data", "not writable")
    finally:
        ro.chmod(0o755)


def test_cli_errors_in_a_real_process(tmp_path):
    """As a user sees them: exit status 2, one line on stderr, no traceback, no work."""
    env = {**os.environ, "XSA_CACHE": str(tmp_path / "cache"), "XSA_EVAL_BUNDLE": str(tmp_path / "no-bundle"),
           "XSA_ARCHIVE_DIR": str(tmp_path / "no-archives")}
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me")
    for argv, names in [(["--subset", "nope"], ["nope"]), (["--subset", "smoke", "--data-dir", str(a_file)], [a_file])]:
        out = subprocess.run([sys.executable, "-m", "xsa.data", "build", *argv], capture_output=True, text=True,
                             cwd=REPO, env=env)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert all(str(n) in lines[0] for n in names)
    assert a_file.read_text() == "keep me" and not (tmp_path / "cache").exists()
