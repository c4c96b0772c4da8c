"""SFT: nanochat's mixture from parquet files (local folder and download path), packing, argument checks."""

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from xsa.stack.config import ConfigError
from xsa.stack.presets import make_config
from xsa.evaluate import sft, sft_data
from conftest import TOK
from xsa.stack.model import GPT

END = TOK.special_id("<|assistant_end|>")

# -----------------------------------------------------------------------------
# nanochat's mixture from parquet

SMOLTALK = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "hello"}],
    [{"role": "assistant", "content": "opens wrong"}, {"role": "user", "content": "x"}],  # dropped
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "6"}],
]
ARC = [{"question": "Which is a fruit?", "choices": {"text": ["rock", "apple"], "label": ["A", "B"]}, "answerKey": "B"},
       {"question": "Pick two.", "choices": {"text": ["one", "two", "three"], "label": ["1", "2", "3"]},
        "answerKey": "2"}]
GSM8K = [{"question": "Tom has 3 apples and eats 1. How many are left?",
          "answer": "3 - 1 = <<3-1=2>>2 apples\n#### 2"}]


def write_mixture(root):
    """The four files of NANOCHAT_FILES, tiny, laid out as <repository>/<file> under root."""
    tables = {"smoltalk": pa.table({"messages": SMOLTALK}), "arc_easy": pa.Table.from_pylist(ARC[:1]),
              "arc_challenge": pa.Table.from_pylist(ARC[1:]), "gsm8k": pa.Table.from_pylist(GSM8K)}
    for name, (repo, file, _) in sft_data.NANOCHAT_FILES.items():
        path = root / repo / file
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(tables[name], path)


EXPECTED = [
    [{"role": "user", "content": "Be brief.\n\nhi"}, {"role": "assistant", "content": "hello"}],
    SMOLTALK[2],
    [{"role": "user", "content": "Which is a fruit?\n\nA. rock\nB. apple\n\nAnswer with the letter of the correct option."},
     {"role": "assistant", "content": "B"}],
    [{"role": "user", "content": "Pick two.\n\nA. one\nB. two\nC. three\n\nAnswer with the letter of the correct option."},
     {"role": "assistant", "content": "B"}],
    [{"role": "user", "content": GSM8K[0]["question"]}, {"role": "assistant", "content": "3 - 1 = 2 apples\n#### 2"}],
]


def _sorted(convs):
    return sorted(convs, key=lambda c: c[0]["content"])


def test_nanochat_mixture_reads_a_local_folder(tmp_path, monkeypatch):
    write_mixture(tmp_path / "sft")
    monkeypatch.setenv(sft_data.DIR_ENV, str(tmp_path / "sft"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing may be downloaded
    convs, info = sft_data.nanochat_data(max_conversations=100)
    assert _sorted(convs) == _sorted(EXPECTED)
    assert info["conversations_per_source"] == {"smoltalk": 2, "arc_easy": 1, "arc_challenge": 1, "gsm8k": 1}
    assert info["conversations_used"] == 5
    assert sft_data.nanochat_data(max_conversations=3)[0] == convs[:3]  # a fixed shuffle, then the cap
    # rendered for training: the loss falls on the replies only (the letter, the worked answer)
    learned = {c[0]["content"][:9]: [t for t, m in zip(*sft.examples(TOK, [c], 512)[0]) if m] for c in convs}
    assert learned["Pick two."] == [ord("B"), END]
    assert TOK.decode(learned["Tom has 3"]) == "3 - 1 = 2 apples\n#### 2"
    assert TOK.decode(learned["Be brief."]) == "hello"


def test_nanochat_mixture_downloads_missing_files_from_the_hub(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    write_mixture(tmp_path / "files")
    for repo, file, _ in sft_data.NANOCHAT_FILES.values():  # the hub's layout: datasets/<repo>/resolve/main/<file>
        dest = hub / "datasets" / repo / "resolve" / "main" / file
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes((tmp_path / "files" / repo / file).read_bytes())
    monkeypatch.setenv("HF_ENDPOINT", hub.as_uri())
    monkeypatch.setenv(sft_data.DIR_ENV, str(tmp_path / "cache"))
    convs, info = sft_data.nanochat_data(max_conversations=100)
    assert _sorted(convs) == _sorted(EXPECTED)
    for repo, file, _ in sft_data.NANOCHAT_FILES.values():
        assert (tmp_path / "cache" / repo / file).is_file()
    assert not list((tmp_path / "cache").rglob("*.part*"))  # written atomically
    assert info["files"][0].endswith("datasets/HuggingFaceTB/smol-smoltalk/resolve/main/data/train-00000-of-00004.parquet")


def test_a_failed_download_names_the_folder_to_copy_the_files_into(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", (tmp_path / "empty").as_uri())
    with pytest.raises(RuntimeError, match=sft_data.DIR_ENV):
        sft_data.hub_file("openai/gsm8k", "main/train-00000-of-00001.parquet", tmp_path / "cache", retries=2, backoff=0)
    assert not (tmp_path / "cache" / "openai/gsm8k/main/train-00000-of-00001.parquet").exists()


def test_a_parquet_file_without_the_column_fails_clearly(tmp_path):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"text": ["a"]}), path)
    with pytest.raises(ValueError, match="no column 'messages'"):
        sft_data.parquet_rows(path, ["messages"])


# -----------------------------------------------------------------------------
# Packing

def _conv(i, user_len, reply_len):
    return [{"role": "user", "content": chr(65 + i % 26) * user_len},
            {"role": "assistant", "content": chr(97 + i % 26) * reply_len}]


CONVS = [_conv(i, 1 + (7 * i) % 13, 1 + (5 * i) % 11) for i in range(40)]


def _segments(ids, mask):
    """A packed row cut before each <|bos|>: the (ids, mask) of the conversations in it, without
    the padding (which is <|bos|> tokens, each a segment of one)."""
    cuts = [i for i, t in enumerate(ids) if t == TOK.bos_id] + [len(ids)]
    return [(tuple(ids[a:b]), tuple(mask[a:b])) for a, b in zip(cuts, cuts[1:]) if b - a > 1]


def test_packing_learns_every_assistant_token_once_and_masks_the_rest():
    row_len = 48
    exs = sft.examples(TOK, CONVS, row_len)
    rows = list(sft.pack(exs, row_len, TOK.bos_id))
    assert all(len(ids) == len(mask) == row_len for ids, mask in rows)
    # every conversation is in exactly one row, whole, with its mask
    assert sorted(s for ids, mask in rows for s in _segments(ids, mask)) == sorted(
        (tuple(ids), tuple(mask)) for ids, mask in exs)
    # targets: the next token where it is an assistant token, -1 everywhere else
    x, y = sft.to_tensors(rows)
    assert x.shape == y.shape == (len(rows), row_len - 1)
    for r, (ids, mask) in enumerate(rows):
        assert x[r].tolist() == ids[:-1]
        assert y[r].tolist() == [t if m else -1 for t, m in zip(ids[1:], mask[1:])]
    learned = sorted(y[y != -1].tolist())
    assert learned == sorted(t for ids, mask in exs for t, m in zip(ids, mask) if m)  # each exactly once
    assert learned.count(END) == sum(len(c) // 2 for c in CONVS)  # one <|assistant_end|> per reply
    # packing fills the rows: far fewer rows than conversations, little padding
    fill = sum(len(ids) for ids, _ in exs) / (len(rows) * row_len)
    assert len(rows) < len(exs) / 2 and fill > 0.8


def test_a_row_never_joins_two_conversations_without_a_bos():
    row_len = 40
    exs = {tuple(ids) for ids, _ in sft.examples(TOK, CONVS, row_len)}
    for ids, mask in sft.pack(sft.examples(TOK, CONVS, row_len), row_len, TOK.bos_id):
        assert ids[0] == TOK.bos_id
        for seg, _ in _segments(ids, mask):  # between two <|bos|>: one whole conversation, nothing else
            assert seg in exs


def test_long_conversations_are_cut_to_one_row():
    long = [_conv(0, 5, 100)]
    (ids, mask), = sft.pack(sft.examples(TOK, long, 32), 32, TOK.bos_id)
    assert len(ids) == 32 and sum(mask) == 32 - 9  # bos, user turn of 5, assistant_start


def test_batches_are_deterministic_and_of_one_shape():
    a, b = sft.batches(TOK, CONVS, 3, 24), sft.batches(TOK, CONVS, 3, 24)
    for _ in range(30):  # several epochs
        (xa, ya), (xb, yb) = next(a), next(b)
        assert xa.shape == (3, 24) and torch.equal(xa, xb) and torch.equal(ya, yb)


@pytest.mark.parametrize("batch_rows,seq_len,cap,rows", [
    (8, 512, 4096, 8), (8, 512, 2048, 4), (8, 512, 3000, 4), (6, 512, 2048, 3), (7, 512, 3072, 1), (8, 512, 512, 1),
])
def test_micro_batches_stay_within_the_tokens_cap(batch_rows, seq_len, cap, rows):
    got = sft.micro_rows(batch_rows, seq_len, cap)
    assert got == rows and got * seq_len <= cap and batch_rows % got == 0


class _Cfg:
    """The smoke TrainConfig with the test tokenizer's vocabulary (TrainConfig pins vocab per subset)."""
    def __init__(self, cfg, model_cfg):
        self.__dict__.update(dataclasses.asdict(cfg))
        self.model = model_cfg


def _tiny(seq_len=32):
    cfg = make_config("smoke")
    model_cfg = dataclasses.replace(cfg.model, vocab_size=TOK.vocab_size, sequence_len=seq_len)
    cfg = _Cfg(cfg, model_cfg)
    torch.manual_seed(0)
    model = GPT(model_cfg)
    model.init_weights()
    return model, cfg


def test_finetune_accumulates_micro_batches_within_the_cap(monkeypatch):
    model, cfg = _tiny()
    seen = []
    real = sft.to_tensors

    def spy(rows):
        x, y = real(rows)
        seen.append(x.numel())
        return x, y

    monkeypatch.setattr(sft, "to_tensors", spy)
    losses = sft.finetune(model, TOK, cfg, CONVS, steps=3, device="cpu", batch_size=4, micro_batch_tokens=64)
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert seen == [2 * 32] * 6  # 2 micro-batches of 2 rows per update, each within 64 tokens


def test_finetune_is_deterministic_on_cpu():
    def run():
        model, cfg = _tiny()
        losses = sft.finetune(model, TOK, cfg, CONVS, steps=3, device="cpu", batch_size=2)
        return losses, model.lm_head.weight.detach().clone()
    (la, wa), (lb, wb) = run(), run()
    assert la == lb and torch.equal(wa, wb)


def test_heldout_loss_is_per_assistant_token():
    model, cfg = _tiny()
    loss = sft.heldout_loss(model, TOK, cfg, CONVS[:5], "cpu")
    assert 0 < loss < 2 * torch.log(torch.tensor(float(TOK.vocab_size))).item()


def test_lr_warms_up_then_decays_to_zero():
    lrs = [sft.lr_multiplier(it, 10, 0.5, warmup_steps=4) for it in range(10)]
    assert lrs[:5] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert lrs[4:] == sorted(lrs[4:], reverse=True) and 0 < lrs[-1] < 0.1
    assert sft.lr_multiplier(0, 2, 1.0, warmup_steps=4) == pytest.approx(0.5)  # warm-up at most half the run


# -----------------------------------------------------------------------------
# Arguments are checked before any work

@pytest.mark.parametrize("kwargs,name", [
    (dict(steps=0), "sft_steps"), (dict(steps=-3), "sft_steps"), (dict(steps=2.5), "sft_steps"),
    (dict(batch_rows=0), "sft_batch_rows"), (dict(micro_batch_tokens=-1), "sft_micro_batch_tokens"),
    (dict(micro_batch_tokens=16), "sft_micro_batch_tokens"), (dict(lr_scale=0), "sft_lr_scale"),
    (dict(lr_scale=float("nan")), "sft_lr_scale"), (dict(max_conversations=0), "sft_max_conversations"),
    (dict(max_conversations=sft.HELDOUT), "sft_max_conversations"), (dict(warmup_steps=-1), "sft_warmup_steps"),
    (dict(source="hub"), "sft_data"),
])
def test_bad_sft_arguments_fail_before_any_work(tmp_path, monkeypatch, kwargs, name):
    model, cfg = _tiny()

    def no_data(*a, **k):
        raise AssertionError("data was read before the arguments were checked")

    monkeypatch.setattr(sft, "registry_data", no_data)
    monkeypatch.setattr(sft, "nanochat_data", no_data)
    with pytest.raises(ConfigError, match=name) as info:
        sft.ensure_sft(model, TOK, cfg, tmp_path, **{"steps": 2, "source": "registry", **kwargs})
    assert "\n" not in str(info.value)
    assert not list(tmp_path.iterdir())


def test_ensure_sft_records_heldout_loss_and_reuses_its_folder(tmp_path, monkeypatch):
    model, cfg = _tiny()
    convs = [_conv(i, 1 + i % 5, 1 + i % 3) for i in range(sft.HELDOUT + 40)]
    monkeypatch.setattr(sft, "registry_data", lambda bundle, n: (convs[:n], {"source": "test"}))
    info = sft.ensure_sft(model, TOK, cfg, tmp_path, steps=3, source="registry", batch_rows=2)
    assert info["heldout_loss_before"] > 0 and info["heldout_loss_after"] > 0
    assert info["data"]["conversations_heldout"] == sft.HELDOUT and info["data"]["conversations_trained"] == 40
    (folder,) = tmp_path.iterdir()
    assert folder.name.startswith("registry-3-") and (folder / "model.pt").is_file()
    monkeypatch.setattr(sft, "registry_data", lambda *a: pytest.fail("a cached fine-tune was redone"))
    assert sft.ensure_sft(GPT(cfg.model), TOK, cfg, tmp_path, steps=3, source="registry", batch_rows=2) == info


@pytest.mark.parametrize("kwargs,name", [(dict(sft_steps=0), "sft_steps"), (dict(sft_batch_rows=-2), "sft_batch_rows"),
                                         (dict(sft_micro_batch_tokens=0), "sft_micro_batch_tokens"),
                                         (dict(sft_data="hub"), "sft_data")])
def test_evaluate_run_chat_checks_sft_arguments_before_loading_the_run(tmp_path, kwargs, name):
    from xsa.evaluate.run import evaluate_run_chat
    with pytest.raises(ConfigError, match=name):  # tmp_path holds no run: loading it would fail otherwise
        evaluate_run_chat(tmp_path / "no-run", **kwargs)
