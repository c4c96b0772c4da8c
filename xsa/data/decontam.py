"""Decontamination: drop training text that shares a 13-word sequence with any evaluation item.

Words are lowercased runs of letters/digits (punctuation and case are ignored). Every 13-word
window of every evaluation item is hashed to 64 bits (an item of 8-12 words counts as one window of
its own length); a document (or a sentence, for sentence-level sources) is dropped if any of its
windows hits. Hashing is vectorised in numpy: no Python work per word. The bundle is found as
evaluation finds it (xsa.data.bundle.resolve_bundle): an explicit path, else $XSA_EVAL_BUNDLE,
else the copy downloaded once into cache_dir()/eval_bundle.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np

from xsa.base.common import cache_dir
from xsa.data.bundle import BUNDLE_ENV, resolve_bundle

NGRAM = 13
MIN_NGRAM = 8  # shorter items are too generic to match on their own
_FILTER_SHIFT = np.uint64(38)
_VERSION = 3  # bump when the windowing changes: keys the on-disk cache
_WORD = re.compile(r"\w+")
_PRIME = np.uint64(0x100000001B3)

# record fields that open an item (prompt side) and fields that complete it (answer side); an
# item is also checked as prompt + " " + answer, since that is how the text reads in the wild
_PROMPTS = ("query", "context", "prompt", "question", "passage")
_ANSWERS = ("continuation", "canonical_solution", "chain_of_thought", "answer")


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def item_texts(record: dict) -> list[str]:
    """Every text an evaluation record could appear as: each field, and prompt + answer pairs."""
    texts = _strings(record)
    # "WORLD HISTORY: <question>": the question alone is what appears in the wild
    texts += [f for t in texts if ":" in t or "\n" in t for f in re.split(r"[:\n]", t) if f.strip()]
    prompts = [record[k] for k in _PROMPTS if isinstance(record.get(k), str)]
    prompts += [c for c in record.get("context_options", []) if isinstance(c, str)]
    answers = [record[k] for k in _ANSWERS if isinstance(record.get(k), str)]
    answers += [c for c in record.get("choices", []) if isinstance(c, str)]
    # only windows that straddle the join are new, so the prompt's tail is enough
    texts += [f"{p[-200:]} {a[:200]}" for p in prompts for a in answers]
    return texts


def eval_files(bundle: Path) -> list[Path]:
    files = sorted(Path(bundle).glob("eval_data/**/*.jsonl")) or sorted(Path(bundle).glob("**/*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no evaluation .jsonl files under {bundle} (set ${BUNDLE_ENV} or pass --bundle)")
    return files


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: spreads word codes over 64 bits."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


# Unicode punctuation that would otherwise glue onto words (curly quotes, dashes, ellipsis, nbsp)
_PUNCT = [c.encode() for c in "\u2018\u2019\u201c\u201d\u2013\u2014\u2026\u00ab\u00bb\u00a0\u2022"]
# a word byte: ASCII letter or digit, or any byte of a non-ASCII character
_IS_WORD = np.zeros(256, bool)
_IS_WORD[[ord(c) for c in "abcdefghijklmnopqrstuvwxyz0123456789"]] = True
_IS_WORD[128:] = True
_IS_LETTER = _IS_WORD.copy()
_IS_LETTER[[ord(c) for c in "0123456789"]] = False
_INV_PRIME = np.uint64(pow(int(_PRIME), -1, 1 << 64))
_POWERS = {}  # cached P^(k+1) and P^-(k+1), grown on demand


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    if _POWERS.get("n", 0) < n:
        n = max(n, 2 * _POWERS.get("n", 0))
        with np.errstate(over="ignore"):
            _POWERS.update(n=n, fwd=np.cumprod(np.full(n, _PRIME, np.uint64)),
                           inv=np.cumprod(np.full(n, _INV_PRIME, np.uint64)))
    return _POWERS["fwd"][:n], _POWERS["inv"][:n]


def word_codes(texts: list[str], with_alpha: bool = False):
    """(64-bit code of each word, index of its text[, whether it has a letter]), vectorised over the
    bytes of all texts.

    A word's code is a polynomial hash of its bytes, made position-independent by multiplying
    with the inverse power of the start offset, so equal words get equal codes in any process.
    """
    parts = [t.lower().encode("utf-8") for t in texts]
    joined = b"\n".join(parts)
    for p in _PUNCT:  # same byte length, so offsets stay valid
        joined = joined.replace(p, b" " * len(p))
    buf = np.frombuffer(joined, np.uint8)
    if buf.size == 0:
        empty = (np.zeros(0, np.uint64), np.zeros(0, np.int64))
        return (*empty, np.zeros(0, bool)) if with_alpha else empty
    text_start = np.cumsum([0] + [len(p) + 1 for p in parts[:-1]])
    isw = _IS_WORD[buf]
    edge = np.diff(np.concatenate([[False], isw, [False]]).astype(np.int8))
    starts, ends = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
    with np.errstate(over="ignore"):
        powers, inv = _powers(buf.size)
        powers, inv = powers[:buf.size], inv[:buf.size]
        prefix = np.concatenate([[np.uint64(0)], np.cumsum(buf.astype(np.uint64) * powers)])
        raw = (prefix[ends] - prefix[starts]) * inv[starts]
        codes = _mix(raw + (ends - starts).astype(np.uint64))
    owner = np.searchsorted(text_start, starts, side="right") - 1
    if not with_alpha:
        return codes, owner
    letters = np.concatenate([[0], np.cumsum(_IS_LETTER[buf])])
    return codes, owner, letters[ends] > letters[starts]


def _rolling(codes: np.ndarray, owner: np.ndarray, lengths: range):
    """Yield (L, hashes, inside) for window lengths L in `lengths`: hashes[i] covers words i..i+L-1,
    inside[i] says the window lies within one text. Built incrementally, one pass per length."""
    h = np.zeros(len(codes), np.uint64)
    with np.errstate(over="ignore"):
        for L in range(1, lengths.stop):
            m = len(codes) - L + 1
            if m <= 0:
                return
            h = h[:m] * _PRIME + codes[L - 1:L - 1 + m]  # polynomial hash, wrapping mod 2**64
            if L in lengths:
                yield L, h, owner[:m] == owner[L - 1:L - 1 + m]


class Decontaminator:
    """Index of an evaluation bundle's word windows; `contaminated(texts)` tests training text.

    An item's windows are its n-word (13) sequences; an item shorter than n words but at least
    min_n (8) words long, such as a short quiz question, counts as one window of its own length.
    """

    def __init__(self, bundle: Path | None = None, n: int = NGRAM, min_n: int = MIN_NGRAM):
        self.n, self.min_n = n, min_n
        # the same lookup as evaluation: `bundle`, else $XSA_EVAL_BUNDLE, else the cached download
        self.bundle = resolve_bundle(bundle)
        files = eval_files(self.bundle)
        digest = hashlib.sha256(f"{n} {min_n} {_VERSION}".encode())
        for f in files:
            digest.update(f.read_bytes())
        self.bundle_sha256 = digest.hexdigest()
        # the hashed windows depend only on the bundle's bytes: cache them (seconds to rebuild)
        cached = Path(cache_dir()) / "decontam" / f"{self.bundle_sha256}.npy"
        if cached.exists():
            self.eval_hashes = np.load(cached)
            return
        texts = []
        for f in files:
            for line in f.read_text(encoding="utf-8").split("\n"):  # not splitlines: U+2028 sits inside strings
                if line.strip():
                    texts.extend(item_texts(json.loads(line)))
        texts = list(dict.fromkeys(texts))  # coqa repeats its story once per turn
        hashes = np.concatenate([self._item_windows(texts[i:i + 20000]) for i in range(0, len(texts), 20000)])
        hashes.sort()
        self.eval_hashes = hashes[np.concatenate([[True], hashes[1:] != hashes[:-1]])]
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".tmp{os.getpid()}.npy")
        np.save(tmp, self.eval_hashes)
        os.replace(tmp, cached)

    def _item_windows(self, texts: list[str]) -> np.ndarray:
        codes, owner, alpha = word_codes(texts, with_alpha=True)
        count = np.bincount(owner, minlength=len(texts))
        first = np.searchsorted(owner, np.arange(len(texts)))
        n_alpha = np.concatenate([[0], np.cumsum(alpha)])
        out = []
        for L, h, inside in _rolling(codes, owner, range(self.min_n, self.n + 1)):
            # windows of mostly numbers ("0 1 2 3 ...", test vectors) say nothing about the item
            wordy = n_alpha[L:L + len(h)] - n_alpha[:len(h)] >= 0.75 * L
            if L < self.n:  # short items: the whole item is one window
                starts = first[count == L]
                out.append(h[starts[wordy[starts]]])
            else:
                out.append(h[inside & wordy])
        return np.concatenate(out) if out else np.zeros(0, np.uint64)

    def contaminated(self, texts: list[str]) -> np.ndarray:
        """Boolean mask: which texts contain a window of the evaluation items."""
        out = np.zeros(len(texts), bool)
        step = 2000  # bounded memory: ~2k documents per vectorised pass
        for start in range(0, len(texts), step):
            codes, owner = word_codes(texts[start:start + step])
            for _, h, inside in _rolling(codes, owner, range(self.min_n, self.n + 1)):
                cand = np.flatnonzero(self._filter[h >> _FILTER_SHIFT] & inside)  # few survive
                pos = np.searchsorted(self.eval_hashes, h[cand]).clip(max=len(self.eval_hashes) - 1)
                hit = cand[self.eval_hashes[pos] == h[cand]]
                out[start + np.unique(owner[hit])] = True
        return out

    @property
    def _filter(self) -> np.ndarray:
        """A 2**26-slot table of the hashes' top bits: rejects most windows without a binary search."""
        if getattr(self, "_table", None) is None:
            self._table = np.zeros(1 << (64 - int(_FILTER_SHIFT)), bool)
            self._table[self.eval_hashes >> _FILTER_SHIFT] = True
        return self._table
