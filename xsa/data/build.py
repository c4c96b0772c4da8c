"""Build a data directory: corpus -> decontamination -> train/val split -> tokenizer -> shards -> card.

Everything is written into a temporary sibling folder and renamed into place at the end, with
BUILD_COMPLETE written last: a build killed half-way leaves no usable-looking directory.

The builder only ever replaces a folder of its own: DIR must be absent, empty, or carry BUILD_COMPLETE
or MARKER (a file every build writes first, not listed in the manifest). Anything else, such as
`--data-dir ~`, is refused with DataDirError before any work, and left as it is.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from tqdm import tqdm

from xsa.stack.config import DATA_SUBSETS
from xsa.data import climbmix, sources
from xsa.data.shards import ShardWriter, tokenize_split, write_manifest
from xsa.data.tokenizer import Tokenizer

if TYPE_CHECKING:
    from xsa.data.decontam import Decontaminator


def __getattr__(name: str):
    """Decontaminator on first use: only a build needs it (and the eval bundle's yaml behind it),
    while training imports this module for COMPLETE."""
    if name == "Decontaminator":
        from xsa.data.decontam import Decontaminator  # lazy: optional dependency (yaml, behind the bundle)
        return Decontaminator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

COMPLETE = "BUILD_COMPLETE"
MARKER = ".xsa-data-build"  # written first into every build (not in the manifest): "this folder is ours"
MARKER_TEXT = "A data folder of xsa (python -m xsa.data build): a rebuild replaces everything in it.\n"
# per corpus (DATA_SUBSETS[subset]["corpus"]): fraction of documents (by hash) in val; checked
# afterwards: val >= VAL_SHARE of all bytes and >= MIN_VAL_BYTES
VAL_FRACTION = {"smoke": 0.05, "default": 0.015}
# ClimbMix: no share rule, its val split is a fixed prefix (CLIMBMIX_VAL_CHARS) of the held-out last
# shard, however many training shards there are
VAL_SHARE = {"smoke": 0.01, "default": 0.01}
MIN_VAL_BYTES = {"default": 1_000_000, "climbmix": 1_000_000}  # smoke: only the 1% rule
SPLITS = ("train", "val")
# enough for the GPU presets' eval_tokens (80 x 2^19 = 41.9 M tokens, about 185 M characters at the
# 4.4 characters a token of a 32,768-token BPE on web text), within the 250 M characters of the shard
CLIMBMIX_VAL_CHARS = 220_000_000
CLIMBMIX_BATCH_PER_THREAD = 1024  # segments encoded per thread per batch (ClimbMix: millions of them)


class DataDirError(ValueError):
    """A data directory that cannot or must not be built into; the message names it."""


def check_data_dir(out_dir) -> None:
    """Raise DataDirError, changing nothing, unless `out_dir` can be (re)built into: it must be
    absent, an empty folder, or a folder of ours (BUILD_COMPLETE or MARKER in it), and the folder
    above it must exist or be creatable, and be writable (the build is staged beside DIR)."""
    out_dir = Path(os.path.abspath(Path(out_dir).expanduser()))
    if out_dir.is_symlink() and not out_dir.exists():
        raise DataDirError(f"data directory {out_dir} is a broken symbolic link")
    if out_dir.exists():
        if not out_dir.is_dir():
            raise DataDirError(f"data directory {out_dir} exists and is not a folder")
        try:
            entries = [e.name for e in os.scandir(out_dir)]
        except OSError as e:
            raise DataDirError(f"data directory {out_dir} cannot be read ({e.strerror})") from None
        if entries and COMPLETE not in entries and MARKER not in entries:
            raise DataDirError(
                f"refusing to build into {out_dir}: the folder is not empty and is not an xsa data build "
                f"(no {COMPLETE} or {MARKER} in it); choose a new or empty folder")
    if out_dir.parent == out_dir:
        raise DataDirError(f"data directory {out_dir} is a file system root")
    ancestor = out_dir.parent
    while not (ancestor.exists() or ancestor.is_symlink()):
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise DataDirError(f"cannot create data directory {out_dir}: {ancestor} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise DataDirError(f"cannot create data directory {out_dir}: {ancestor} is not writable")


@dataclass
class Stream:
    """One source of documents as the build sees it."""
    name: str
    info: dict  # registry, package, version, archive_sha256, licence, kind: copied into the card
    weight: float
    docs: Callable[[], Iterable]  # documents (str, or list of sentences); or (document, split)
    sentence_level: bool = False
    stats: dict = field(default_factory=dict)


def _unit_hash(text: str, salt: bytes = b"") -> float:
    """A stable number in [0, 1) per text: decides its split and whether a down-weighted doc is kept."""
    h = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8, person=salt.ljust(16, b"\0"))
    return int.from_bytes(h.digest(), "big") / 2 ** 64


def registry_streams(subset: str) -> list[Stream]:
    out = []
    for name in sources.SUBSET_SOURCES[subset]:
        src = sources.SOURCES_BY_NAME[name]
        a = src.archive
        info = dict(registry=a.registry, package=a.package, version=a.version, archive=a.filename,
                    archive_sha256=a.sha256, licence=src.licence, kind=src.kind, members=src.members)
        out.append(Stream(name, info, src.weight, lambda src=src: sources.read_source(src, sources.fetch(src.archive)),
                          src.sentence_level))
    return out


def climbmix_streams(num_train: int | None = None) -> list[Stream]:
    """The ClimbMix stream: num_train training shards (default climbmix.num_train_shards()) and a
    CLIMBMIX_VAL_CHARS prefix of the validation shard."""
    files = climbmix.shard_files(num_train if num_train is not None else climbmix.num_train_shards())
    info = dict(registry="huggingface", package="karpathy/climbmix-400b-shuffle",
                files=[p.name for p in files["train"] + files["val"]], licence=climbmix.LICENCE, kind="web")

    def docs():
        yield from ((text, "train") for text in climbmix.iter_documents(files["train"]))
        chars = 0
        for text in climbmix.iter_documents(files["val"]):  # a fixed prefix of the val shard is plenty
            yield text, "val"
            chars += len(text)
            if chars >= CLIMBMIX_VAL_CHARS:
                break
    return [Stream("climbmix", info, 1.0, docs)]


# -----------------------------------------------------------------------------
# stage 1: corpus


def _write_corpus(streams: list[Stream], out: Path, decon: Decontaminator, val_fraction: float) -> None:
    (out / "corpus").mkdir(parents=True)
    files = {s: open(out / "corpus" / f"{s}.jsonl", "w", encoding="utf-8") for s in SPLITS}
    for stream in tqdm(streams, desc="corpus", unit="source"):
        st = stream.stats = {"removed": 0, "dropped_by_weight": 0,
                             "unit": "sentence" if stream.sentence_level else "document",
                             **{s: {"documents": 0, "bytes": 0} for s in SPLITS}}
        it = iter(stream.docs())
        while batch := list(itertools.islice(it, 4096)):
            splits = [b[1] if isinstance(b, tuple) else None for b in batch]
            docs = [b[0] if isinstance(b, tuple) else b for b in batch]
            if stream.weight < 1:  # down-weighting: keep a stable fraction of the documents
                keep = [_unit_hash(_flat(d), b"keep") < stream.weight for d in docs]
                st["dropped_by_weight"] += keep.count(False)
                docs = [d for d, k in zip(docs, keep) if k]
                splits = [s for s, k in zip(splits, keep) if k]
            texts = _decontaminate(docs, stream, decon)
            for text, split in zip(texts, splits):
                if not text:
                    continue
                split = split or ("val" if _unit_hash(text) < val_fraction else "train")
                files[split].write(json.dumps({"text": text, "source": stream.name}, ensure_ascii=False) + "\n")
                st[split]["documents"] += 1
                st[split]["bytes"] += len(text.encode("utf-8"))
    for f in files.values():
        f.close()


def _flat(doc) -> str:
    return doc if isinstance(doc, str) else " ".join(doc)


def _decontaminate(docs: list, stream: Stream, decon: Decontaminator) -> list[str]:
    """Texts of the documents with contaminated documents ("" in their place) or sentences removed."""
    if not stream.sentence_level:
        bad = decon.contaminated(docs)
        stream.stats["removed"] += int(bad.sum())
        return ["" if b else d for d, b in zip(docs, bad)]
    flat = [s for d in docs for s in d]
    bad = iter(decon.contaminated(flat).tolist())
    texts = []
    for d in docs:
        kept = [s for s in d if not next(bad)]
        stream.stats["removed"] += len(d) - len(kept)
        texts.append(" ".join(kept))
    return texts


# How much text trains the tokenizer, per corpus: (characters in all, characters per document).
# ClimbMix as nanochat's tok_train (2 B characters, documents cropped to 10,000); the registry
# corpora are small enough to use whole.
TOKENIZER_TEXT = {"climbmix": (2_000_000_000, 10_000)}


def _tokenizer_texts(path: Path, max_chars: int | None, doc_cap: int | None):
    """The training texts the tokenizer learns from, cropped and capped as TOKENIZER_TEXT says."""
    seen = 0
    for r in _read_jsonl(path):
        text = r["text"] if doc_cap is None else r["text"][:doc_cap]
        yield text
        seen += len(text)
        if max_chars is not None and seen > max_chars:
            return


def _read_jsonl(path: Path):  # streaming; records.read_jsonl would hold the whole file
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


# -----------------------------------------------------------------------------
# the whole build


def build(subset: str, out_dir: Path, force: bool = False, bundle: Path | None = None,
          tokens: float | None = None, repeat: bool | None = None) -> Path:
    """Build DIR for `subset` unless a complete build is already there (or force). Returns DIR.

    DIR must be absent, empty or a build of ours (check_data_dir), else DataDirError before any work.
    tokens (ClimbMix only; ignored for the registry corpora): size the training shards for this
    training horizon (climbmix.shards_for_tokens); default climbmix.num_train_shards(). A complete
    ClimbMix build with fewer training shards than that is refused (SmallBuildError), unless
    `repeat` (default: $XSA_DATA_REPEAT=1) accepts that the runs read their data more than once.
    """
    if subset not in DATA_SUBSETS:
        raise ValueError(f"unknown data subset {subset!r}; choose one of {sorted(DATA_SUBSETS)}")
    given, out_dir = out_dir, Path(os.path.abspath(Path(out_dir).expanduser()))
    check_data_dir(out_dir)
    num_train = climbmix.num_train_shards(tokens) if DATA_SUBSETS[subset]["corpus"] == "climbmix" else None
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock  # lazy: optional dependency; training on a built folder never needs filelock
    with FileLock(str(out_dir.parent / f".{out_dir.name}.lock")):  # one builder per directory
        _remove_stale(out_dir)
        if (out_dir / COMPLETE).exists() and not force:
            check_enough_shards(out_dir, num_train, repeat)
            return Path(given)
        check_data_dir(out_dir)  # again, under the lock
        tmp = out_dir.parent / f".{out_dir.name}.building-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build_into(subset, tmp, bundle, num_train)
            if out_dir.exists():  # a stale, half-built or forced-over directory
                old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
                os.replace(out_dir, old)
                shutil.rmtree(old)
            os.replace(tmp, out_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Path(given)


def _remove_stale(out_dir: Path) -> None:
    """Remove what killed builds of DIR left beside it (.DIR.building-<pid>, .DIR.old-<pid>): under
    the lock no other builder of DIR is alive, so every such folder is a leftover."""
    for pattern in (f".{out_dir.name}.building-*", f".{out_dir.name}.old-*"):
        for stale in sorted(out_dir.parent.glob(pattern)):
            if stale.is_dir() and not stale.is_symlink():
                print(f"data: removing {stale}, left by a build that was killed", flush=True)
                shutil.rmtree(stale, ignore_errors=True)


class SmallBuildError(DataDirError):
    """A complete ClimbMix build with fewer training shards than a horizon needs."""


def check_enough_shards(out_dir: Path, num_train: int | None, repeat: bool | None) -> None:
    """A complete ClimbMix build is kept as it is; refuse it if it has fewer shards than asked for
    (the run would read its data about num_train / shards times), unless `repeat` says so."""
    if num_train is None:
        return
    try:
        files = json.loads((out_dir / "data_card.json").read_text())["sources"]["climbmix"]["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    have = len(files) - 1
    if have >= num_train:
        return
    repeat = os.environ.get(climbmix.REPEAT_ENV) == "1" if repeat is None else repeat
    what = (f"{out_dir} is a complete build of {have} ClimbMix training shard(s), fewer than the {num_train} "
            f"asked for (the run would read its data about {num_train / have:.1f} times)")
    if not repeat:
        raise SmallBuildError(f"{what}; rebuild with: python -m xsa.data build --force --data-dir {out_dir} "
                              f"(--preset or --study to size it), or accept the repeats with --repeat "
                              f"(${climbmix.REPEAT_ENV}=1)")
    print(f"warning: {what}; kept as asked", file=sys.stderr, flush=True)


def _build_into(subset: str, out: Path, bundle: Path | None, num_train: int | None = None) -> None:
    t0 = time.time()
    timings = {}
    vocab_size, corpus = DATA_SUBSETS[subset]["vocab_size"], DATA_SUBSETS[subset]["corpus"]
    out.mkdir(parents=True)
    (out / MARKER).write_text(MARKER_TEXT)  # first: a half-built DIR is recognisably ours
    decon = getattr(sys.modules[__name__], "Decontaminator")(bundle)  # module attribute: patchable in tests  # the bundle (downloaded if need be) before any shard download
    streams = climbmix_streams(num_train) if corpus == "climbmix" else registry_streams(corpus)
    timings["decontam_index_s"] = round(time.time() - t0, 2)

    _write_corpus(streams, out, decon, VAL_FRACTION.get(corpus, 0.0))
    timings["corpus_s"] = round(time.time() - t0, 2)
    val_bytes = sum(s.stats["val"]["bytes"] for s in streams)
    all_bytes = val_bytes + sum(s.stats["train"]["bytes"] for s in streams)
    need = max(VAL_SHARE.get(corpus, 0.0) * all_bytes, MIN_VAL_BYTES.get(corpus, 0))
    if val_bytes < need:
        raise RuntimeError(f"validation split too small: {val_bytes} bytes, need {need:.0f}")

    t = time.time()
    train_texts = _tokenizer_texts(out / "corpus" / "train.jsonl", *TOKENIZER_TEXT.get(corpus, (None, None)))
    tok = Tokenizer.train(tqdm(train_texts, desc="tokenizer", unit="doc"), vocab_size)
    if tok.vocab_size != vocab_size:
        raise RuntimeError(f"tokenizer learned {tok.vocab_size} tokens, wanted {vocab_size}: corpus too small")
    tok.save(out / "tokenizer")
    timings["tokenizer_s"] = round(time.time() - t, 2)

    t = time.time()
    copies = {s.name: max(1, round(s.weight)) for s in streams}  # weight > 1: repeated in train
    threads = os.cpu_count() or 1  # tiktoken encodes in parallel threads; the output is the same
    batch = CLIMBMIX_BATCH_PER_THREAD * threads if corpus == "climbmix" else None
    for split in SPLITS:
        writer = ShardWriter(out / "shards", split, vocab_size)
        docs = ((r["text"], r["source"], copies[r["source"]] if split == "train" else 1)
                for r in _read_jsonl(out / "corpus" / f"{split}.jsonl"))
        tokens = tokenize_split(tqdm(docs, desc=f"shards/{split}", unit="doc"), tok, writer,
                                batch=batch, threads=threads)
        for s in streams:
            s.stats[split]["tokens"] = tokens.get(s.name, 0)
    timings["shards_s"] = round(time.time() - t, 2)

    built = [str(p.relative_to(out)) for p in sorted(out.rglob("*")) if p.is_file() and p != out / MARKER]
    write_manifest(out, built)
    timings["total_s"] = round(time.time() - t0, 2)
    card = data_card(subset, streams, tok, decon, timings)
    (out / "data_card.json").write_text(json.dumps(card, indent=2) + "\n")
    (out / "data_card.md").write_text(card_markdown(card))
    (out / COMPLETE).write_text(json.dumps({"subset": subset, "built_unix": int(time.time())}) + "\n")


def data_card(subset: str, streams: list[Stream], tok: Tokenizer, decon: Decontaminator, timings: dict) -> dict:
    val_fraction = VAL_FRACTION.get(DATA_SUBSETS[subset]["corpus"], 0.0)
    per = {s.name: {**s.info, "weight": s.weight, **s.stats} for s in streams}
    total = lambda key: sum(s.stats[sp][key] for s in streams for sp in SPLITS)
    return {
        "subset": subset,
        "vocab_size": tok.vocab_size,
        "documents": total("documents"),
        "bytes": total("bytes"),
        "tokens": total("tokens"),
        "decontaminated": sum(s.stats["removed"] for s in streams),
        "splits": {sp: {k: sum(s.stats[sp][k] for s in streams) for k in ("documents", "bytes", "tokens")}
                   for sp in SPLITS},
        "sources": per,
        "decontamination": {"ngram": decon.n, "bundle": str(decon.bundle), "bundle_sha256": decon.bundle_sha256,
                            "eval_ngrams": int(len(decon.eval_hashes))},
        "notes": {
            "bytes": "UTF-8 bytes of the cleaned documents, each counted once",
            "tokens": "tokens in the shards, with <|bos|> and the training repeats of weight > 1",
            "weight": "> 1: each training document is repeated round(weight) times; "
                      "< 1: that fraction of the documents is kept (by a stable hash)",
            "split": f"val if a stable hash of the document < {val_fraction} (ClimbMix: its last shard)",
            "decontaminated": "documents (sentences for sentence-level sources) dropped for sharing a "
                              f"{decon.n}-word sequence with an evaluation item",
        },
        "build_seconds": timings,
    }


def card_markdown(card: dict) -> str:
    lines = [f"# Data card: `{card['subset']}`", "",
             f"Vocabulary {card['vocab_size']}; {card['documents']:,} documents, {card['bytes']:,} bytes, "
             f"{card['tokens']:,} tokens; {card['decontaminated']:,} removed by {card['decontamination']['ngram']}-gram "
             f"decontamination against `{card['decontamination']['bundle']}`. Build took "
             f"{card['build_seconds']['total_s']} s.", "",
             "| source | package | kind | weight | train docs | train MB | train tokens | val docs | val MB "
             "| val tokens | removed | licence | archive sha256 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in card["sources"].items():
        pkg = f"{s.get('registry')}: {s.get('package')} {s.get('version', '')}".strip()
        lines.append(
            f"| {name} | {pkg} | {s['kind']} | {s['weight']} | {s['train']['documents']:,} | "
            f"{s['train']['bytes'] / 1e6:.2f} | {s['train']['tokens']:,} | {s['val']['documents']:,} | "
            f"{s['val']['bytes'] / 1e6:.2f} | {s['val']['tokens']:,} | {s['removed']:,} {s['unit']}s | "
            f"{s['licence']} | `{s.get('archive_sha256', '-')[:16]}` |")
    lines += ["", *[f"- {k}: {v}" for k, v in card["notes"].items()], ""]
    return "\n".join(lines)
