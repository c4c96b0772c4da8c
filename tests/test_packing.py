"""BOS-aligned best-fit rows (xsa/data/packing.py, the GPU presets' row_packing): whole rows, the
largest fitting document first, no token read twice within an epoch."""

from collections import Counter

import numpy as np
import pytest

from xsa.stack.presets import make_config
from xsa.data.loader import TokenLoader
from xsa.data.packing import best_fit, documents
from xsa.data.tokenizer import Tokenizer


def test_best_fit_by_hand():
    # capacity 10; buffer of every document: 7 first (largest fitting), then 3 fills the row whole;
    # the next row: 6, then 4 does not fit (space 4: yes, it does: 6 + 4 = 10)
    p = best_fit(np.array([3, 7, 6, 4, 12]), np.arange(5), capacity=10)
    rows = [list(zip(p.seg_doc[a:b].tolist(), p.seg_len[a:b].tolist())) for a, b in zip(p.row_ptr, p.row_ptr[1:])]
    assert rows[0] == [(1, 7), (0, 3)] and rows[1] == [(2, 6), (3, 4)]
    assert rows[2] == [(4, 10)]  # nothing fits a whole row of 10: the 12-token document, cropped
    # a small buffer sees only what has arrived: with two documents at a time, 3 then 7 are placed
    q = best_fit(np.array([3, 7, 6, 4]), np.arange(4), capacity=10, buffer=2)
    assert q.seg_doc[:2].tolist() == [1, 0] and q.n_rows == 2


def test_best_fit_rows_are_whole_and_read_each_document_once():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 3000, 5000)
    p = best_fit(lengths, rng.permutation(5000), capacity=2049, buffer=100)
    sums = np.add.reduceat(p.seg_len.astype(np.int64), p.row_ptr[:-1])
    assert (sums == 2049).all() and p.n_rows > 0.9 * lengths.sum() / 2049 * 0.6
    assert len(np.unique(p.seg_doc)) == len(p.seg_doc)  # a document is never read twice
    assert (p.seg_len <= lengths[p.seg_doc]).all()


def test_documents_of_a_shard():
    starts, lengths = documents(np.array([2, 5, 9]), 12)
    assert starts.tolist() == [2, 5, 9] and lengths.tolist() == [3, 4, 3]


def _coverage(loader: TokenLoader) -> float:
    """unique / consumed tokens over one epoch of the loader's rows (by position in the shards)."""
    maps = loader.shards.maps
    counts = [np.zeros(len(m), np.int32) for m in maps]
    width = loader.T + 1
    if hasattr(loader.source, "packing"):
        src, p = loader.source, loader.source.packing
        for d, n in zip(p.seg_doc, p.seg_len):
            counts[src.shard[d]][src.start[d]:src.start[d] + n] += 1
    else:
        for s, pos in zip(loader.shards.shard_of, loader.shards.pos):
            counts[s][pos:pos + width] += 1
    consumed = sum(int(c.sum()) for c in counts)
    return sum(int((c > 0).sum()) for c in counts) / consumed


def test_best_fit_epoch_reads_every_token_once(smoke_data):
    kw = dict(batch_size=4, seq_len=512, rows_per_step=8, seed=3)
    packed, starts = TokenLoader(smoke_data, packing="bestfit", **kw), TokenLoader(smoke_data, **kw)
    assert _coverage(packed) == 1.0
    assert _coverage(starts) < 0.9  # rows at every <|bos|> overlap: the check can fail
    bos = Tokenizer.from_data_dir(smoke_data).bos_id
    steps = packed.n // 8
    first = np.concatenate([packed.get(s, m)[0].numpy() for s in range(steps) for m in range(2)])
    assert (first[:, 0] == bos).all() and len(first) == steps * 8
    # the epoch's batches are the packed rows, each at most once (a multiset: the corpus repeats texts)
    rows = Counter(r[:-1].tobytes() for r in packed.source.rows(np.arange(packed.n), 513))
    assert not Counter(r.tobytes() for r in first) - rows


def test_packing_is_a_function_of_the_seed_and_the_presets_choose_it(smoke_data):
    kw = dict(batch_size=4, seq_len=128, rows_per_step=8)
    a, b = (TokenLoader(smoke_data, packing="bestfit", seed=1, **kw) for _ in range(2))
    assert (a.get(5)[0] == b.get(5)[0]).all()
    assert not (a.get(5)[0] == TokenLoader(smoke_data, packing="bestfit", seed=2, **kw).get(5)[0]).all()
    assert make_config("d12").row_packing == "bestfit" and make_config("d24-nanochat").row_packing == "bestfit"
    assert make_config("cpu-w64-d4").row_packing == "bos" and make_config("smoke").row_packing == "bos"
    with pytest.raises(ValueError, match="packing"):
        TokenLoader(smoke_data, packing="greedy", **kw)


def test_data_hashes_are_cached_by_size_and_mtime(smoke_data, tmp_path, monkeypatch):
    import shutil

    import xsa.data.shards as shards
    data = tmp_path / "data"
    shutil.copytree(smoke_data, data)
    (data / shards.VERIFIED).unlink(missing_ok=True)
    hashed = []
    real = shards.sha256_file
    monkeypatch.setattr(shards, "sha256_file", lambda path: hashed.append(path) or real(path))
    shards.check_files(data)
    n = len(hashed)
    assert n == len(shards.read_manifest(data))
    shards.check_files(data)
    assert len(hashed) == n  # the second start hashes nothing
    shard = shards.shard_paths(data, "train")[0]
    raw = bytearray(shard.read_bytes())
    raw[10] ^= 1  # the same size, a new mtime: hashed again, and the damage found
    shard.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="sha256"):
        shards.check_files(data)
    assert len(hashed) == n + 1
    with pytest.raises(ValueError, match="sha256"):
        shards.check_files(data, cached=False)


def test_a_smaller_climbmix_build_is_refused_unless_asked_to_repeat(tmp_path, monkeypatch, capsys):
    import json

    from xsa.data import climbmix
    from xsa.data.build import SmallBuildError, check_enough_shards
    (tmp_path / "data_card.json").write_text(json.dumps({"sources": {"climbmix": {"files": ["a", "b", "val"]}}}))
    monkeypatch.delenv(climbmix.REPEAT_ENV, raising=False)
    check_enough_shards(tmp_path, 2, None)  # enough
    with pytest.raises(SmallBuildError, match="2 ClimbMix training shard.*fewer than the 6.*3.0 times"):
        check_enough_shards(tmp_path, 6, None)
    check_enough_shards(tmp_path, 6, True)
    monkeypatch.setenv(climbmix.REPEAT_ENV, "1")
    check_enough_shards(tmp_path, 6, None)
    assert capsys.readouterr().err.count("kept as asked") == 2


def test_build_sized_by_the_study(tmp_path):
    from xsa.data import climbmix
    from xsa.data.__main__ import _build_plan, parser
    from xsa.studies.registry import STUDIES
    subset, _, tokens = _build_plan(parser().parse_args(["build", "--study", "gpu", "--data-dir", str(tmp_path / "d")]))
    d24 = make_config("d24")
    assert subset == "climbmix" and tokens == climbmix.study_tokens(STUDIES["gpu"]()) == climbmix.tokens_read(d24)
    assert tokens == pytest.approx(d24.num_tokens / climbmix.BESTFIT_KEPT, abs=1)
    assert climbmix.tokens_read(make_config("cpu-w64-d4")) == make_config("cpu-w64-d4").num_tokens
