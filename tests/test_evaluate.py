"""CORE evaluator: prompt rendering, few-shot sampling, scoring rules, bundle errors."""

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from xsa.stack.config import GPTConfig
from xsa.evaluate import core
from xsa.data.bundle import BundleError, load_bundle, read_task_file
from xsa.stack.model import GPT

REPO = Path(__file__).resolve().parent.parent
SHARED_BUNDLE = REPO.parent / "shared" / "eval_bundle"


class ByteTokenizer:
    """UTF-8 bytes shifted by one, so id 0 is free for <|bos|>."""
    bos_id = 0
    vocab_size = 257
    token_bytes = torch.tensor([0] + [1] * 256, dtype=torch.int32)  # one byte a token, none for bos

    def encode(self, text):
        return [b + 1 for b in text.encode("utf-8")]

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]

    def decode(self, ids):
        return bytes(i - 1 for i in ids if i > 0).decode("utf-8", errors="replace")


TOK = ByteTokenizer()


def write_bundle(root: Path, tasks: dict) -> Path:
    """tasks: label -> (icl_task_type, num_fewshot, baseline_percent, records or None)."""
    (root / "eval_data").mkdir(parents=True)
    lines, meta = ["icl_tasks:"], ["Eval Task,Random baseline"]
    for label, (ttype, shots, baseline, records) in tasks.items():
        lines.append(f"- {{label: {label}, dataset_uri: {label}.jsonl, num_fewshot: [{shots}], "
                     f"icl_task_type: {ttype}}}")
        meta.append(f"{label},{baseline}")
        if records is not None:
            (root / "eval_data" / f"{label}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (root / "core.yaml").write_text("\n".join(lines) + "\n")
    (root / "eval_meta_data.csv").write_text("\n".join(meta) + "\n")
    return root


def synthetic_tasks(n: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    words = ["red", "green", "blue", "gold", "stone", "river", "cloud", "ember"]
    mc = [{"query": f"Q{i}: pick", "choices": rng.sample(words, 4), "gold": rng.randrange(4)} for i in range(n)]
    letters = [{"query": f"Q{i}: letter?", "choices": ["A", "B", "C", "D"], "gold": rng.randrange(4)} for i in range(n)]
    schema = [{"context_options": [f"S{i} the {w}" for w in rng.sample(words, 2)],
               "continuation": f"ends {i}.", "gold": rng.randrange(2)} for i in range(n)]
    lm = [{"context": f"Count {i} to", "continuation": f"{i + 1} {i + 2}"} for i in range(n)]
    return {"mc": ("multiple_choice", 3, 25, mc), "letters": ("multiple_choice", 0, 25, letters),
            "schema": ("schema", 2, 50, schema), "lm": ("language_modeling", 3, 0, lm)}


def tiny_model(seq_len=256):
    torch.manual_seed(0)
    model = GPT(GPTConfig(sequence_len=seq_len, vocab_size=TOK.vocab_size, n_layer=1, n_head=2,
                          n_kv_head=2, n_embd=32))
    model.init_weights()
    return model.eval()


# -----------------------------------------------------------------------------
# rendering

def test_render_multiple_choice_matches_hand_written():
    shots = [{"query": "Sky is", "choices": ["green", "blue"], "gold": 1}]
    item = {"query": "Grass is", "choices": ["green", "red"], "gold": 0}
    assert core.render_mc(item, "\nAnswer: ", shots) == [
        "Sky is\nAnswer: blue\n\nGrass is\nAnswer: green",
        "Sky is\nAnswer: blue\n\nGrass is\nAnswer: red",
    ]


def test_render_schema_matches_hand_written():
    shots = [{"context_options": ["Ann hugged Bo because Ann", "Ann hugged Bo because Bo"],
              "continuation": "was sad.", "gold": 1}]
    item = {"context_options": ["The cup hit the jar so the cup", "The cup hit the jar so the jar"],
            "continuation": "broke.", "gold": 1}
    assert core.render_schema(item, " ", shots) == [
        "Ann hugged Bo because Bo was sad.\n\nThe cup hit the jar so the cup broke.",
        "Ann hugged Bo because Bo was sad.\n\nThe cup hit the jar so the jar broke.",
    ]


def test_render_language_modeling_matches_hand_written():
    shots = [{"context": "Capital of France: ", "continuation": "Paris"}]
    item = {"context": "Capital of Peru:  ", "continuation": "Lima"}
    assert core.render_lm(item, " ", shots) == [
        "Capital of France: Paris\n\nCapital of Peru:",
        "Capital of France: Paris\n\nCapital of Peru: Lima",
    ]


# -----------------------------------------------------------------------------
# few-shot and subsampling

def test_no_item_in_its_own_fewshot_context():
    n, k = 25, 10
    for idx in range(n):
        picks = core.fewshot_indices(n, idx, k)
        assert idx not in picks and len(set(picks)) == k and all(0 <= j < n for j in picks)
        assert picks == core.fewshot_indices(n, idx, k)  # fixed seed
    # and end to end: each rendered prompt holds its own query exactly once
    items = [{"query": f"<q{i}>", "choices": ["x", "y"], "gold": 0} for i in range(n)]
    for i, item in enumerate(items):
        shots = [items[j] for j in core.fewshot_indices(n, i, k)]
        assert core.render_mc(item, " ", shots)[0].count(f"<q{i}>") == 1


def test_subsample_is_a_fixed_shuffle():
    a = core.subsample(100, 10)
    assert a == core.subsample(100, 10) and len(set(a)) == 10 and a != list(range(10))
    assert sorted(core.subsample(100, None)) == list(range(100))


def test_rows_are_left_truncated_and_keep_the_continuation():
    item = {"context": "word " * 200, "continuation": "end"}
    rows = core.build_rows("language_modeling", [item], [item], [0], 0, " ", TOK, max_len=64)
    (row,) = rows
    assert len(row.tokens) <= 64
    assert TOK.decode(row.targets) == " end"  # the bare prompt is stripped, so the delimiter is scored too
    assert row.cols[-1] == len(row.tokens) - 1


# -----------------------------------------------------------------------------
# scoring rules

def oracle_scorer(gold_prompts: list[str]):
    """Loss 0 and a correct prediction exactly where the scored prefix follows a gold prompt."""
    def score(ids, cols, targets):
        losses = torch.ones(cols.shape)
        preds = torch.zeros(cols.shape, dtype=torch.long)
        for b in range(ids.size(0)):
            for k in range(cols.size(1)):
                text = TOK.decode(ids[b, 1:cols[b, k] + 1].tolist() + [int(targets[b, k])])
                if any(g.startswith(text) for g in gold_prompts):
                    losses[b, k], preds[b, k] = 0.0, targets[b, k]
        return losses, preds
    return score


def gold_prompts(bundle) -> list[str]:
    out = []
    for spec in bundle.tasks:
        pool = read_task_file(spec.path, spec.task_type)
        for i, item in enumerate(pool):
            shots = [pool[j] for j in core.fewshot_indices(len(pool), i, spec.num_fewshot)]
            prompts = core.RENDER[spec.task_type](item, spec.continuation_delimiter, shots)
            out.append(prompts[-1] if spec.task_type == "language_modeling" else prompts[item["gold"]])
    return out


def test_oracle_scores_one_on_every_task_type(tmp_path):
    bundle = load_bundle(write_bundle(tmp_path, synthetic_tasks(12)))
    res = core.evaluate_core(bundle, TOK, oracle_scorer(gold_prompts(bundle)), max_len=10_000)
    assert {t: r["accuracy"] for t, r in res["tasks"].items()} == {"mc": 1.0, "letters": 1.0, "schema": 1.0, "lm": 1.0}
    assert res["core"] == 1.0 and res["missing"] == [] and res["core_complete"]


def test_uniform_model_lands_at_random_baseline(tmp_path):
    n = 400
    bundle = load_bundle(write_bundle(tmp_path, synthetic_tasks(n, seed=1)))
    model = tiny_model()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # uniform next-token distribution everywhere
    res = core.evaluate_core(bundle, TOK, core.model_scorer(model), max_len=48)
    for label, p in [("mc", 0.25), ("letters", 0.25), ("schema", 0.5)]:
        assert abs(res["tasks"][label]["accuracy"] - p) < 4 * math.sqrt(p * (1 - p) / n), label
    assert res["tasks"]["lm"]["accuracy"] == 0.0
    assert abs(res["core"]) < 0.15


def test_mean_loss_not_sum_decides_multiple_choice(tmp_path):
    # choice 0 is four tokens at loss 1 (sum 4, mean 1); choice 1 one token at loss 2 (sum 2, mean 2)
    records = [{"query": "Q", "choices": ["aaaa", "b"], "gold": 0}]
    bundle = load_bundle(write_bundle(tmp_path, {"t": ("multiple_choice", 0, 50, records)}))
    table = torch.zeros(TOK.vocab_size)
    table[TOK.encode("a")[0]], table[TOK.encode("b")[0]] = 1.0, 2.0

    def scorer(ids, cols, targets):
        return table[targets], torch.zeros_like(targets)
    res = core.evaluate_core(bundle, TOK, scorer, max_len=100)
    assert res["tasks"]["t"]["accuracy"] == 1.0  # a sum-of-loss rule would pick "b"


def test_likelihood_measures_by_hand(tmp_path):
    # the scored tokens are what the choices add after their common prefix "Q ": "aaaa" (4 bytes at
    # loss 1: 4 nats) and "b" (1 byte at loss 2)
    records = [{"query": "Q", "choices": ["aaaa", "b"], "gold": 0}, {"query": "Q", "choices": ["aaaa", "b"], "gold": 1}]
    bundle = load_bundle(write_bundle(tmp_path, {"t": ("multiple_choice", 0, 50, records)}))
    table = torch.ones(TOK.vocab_size)
    table[TOK.encode("b")[0]] = 2.0

    def scorer(ids, cols, targets):
        return table[targets], torch.zeros_like(targets)
    t = core.evaluate_core(bundle, TOK, scorer, max_len=100)["tasks"]["t"]
    ln2 = math.log(2)
    a_bpb, b_bpb = 4 / (4 * ln2), 2 / (1 * ln2)
    items = dict(zip(t["items"]["index"], zip(t["items"]["correct_bpb"], t["items"]["margin_bpb"])))
    assert items[0] == pytest.approx((a_bpb, b_bpb - a_bpb), rel=1e-5)  # correct "aaaa": preferred by 1.44 bits/byte
    assert items[1] == pytest.approx((b_bpb, a_bpb - b_bpb), rel=1e-5)  # correct "b": a negative margin
    assert t["correct_bpb"] == pytest.approx((a_bpb + b_bpb) / 2, rel=1e-5) and t["margin_bpb"] == pytest.approx(0.0, abs=1e-6)


def test_model_scorer_matches_full_logits():
    model = tiny_model(64)
    ids = torch.randint(1, TOK.vocab_size, (3, 20))
    cols = torch.tensor([[2, 5], [19 - 1, 0], [7, 7]])
    targets = torch.randint(1, TOK.vocab_size, (3, 2))
    losses, preds = core.model_scorer(model)(ids, cols, targets)
    with torch.no_grad():
        logp = torch.log_softmax(model(ids), -1)
    for b in range(3):
        for k in range(2):
            assert losses[b, k].item() == pytest.approx(-logp[b, cols[b, k], targets[b, k]].item(), abs=1e-4)
            assert preds[b, k] == logp[b, cols[b, k]].argmax()


def test_common_prefix_of_any_sequences():
    def by_hand(seqs):  # the first position where some sequence differs from the first one
        n = min(len(s) for s in seqs)
        return next((i for i in range(n) if any(s[i] != seqs[0][i] for s in seqs)), n)
    rng = random.Random(0)
    for _ in range(5000):
        base = [rng.randrange(3) for _ in range(rng.randrange(8))]
        seqs = [base[:rng.randrange(len(base) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(4))]
                for _ in range(rng.randint(1, 5))]
        assert core._common_prefix(seqs) == by_hand(seqs), seqs


def test_scores_do_not_depend_on_the_batch_size(tmp_path):
    # batches only group rows: every size (one row a batch, the CPU default, one batch for all)
    # gives the same scores to float rounding and the same decisions
    bundle = load_bundle(write_bundle(tmp_path, synthetic_tasks(24, seed=2)))
    model = tiny_model()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    scorer = core.model_scorer(model)
    runs = [core.evaluate_core(bundle, TOK, scorer, max_len=96, max_batch_tokens=n)
            for n in (core.MAX_BATCH_TOKENS, 1, core.CPU_BATCH_TOKENS, 10**6)]
    for res in runs[1:]:
        for label, t in res["tasks"].items():
            ref = runs[0]["tasks"][label]
            assert t["items"]["correct"] == ref["items"]["correct"], label
            assert t["items"]["correct_bpb"] == pytest.approx(ref["items"]["correct_bpb"], rel=1e-4), label
    assert core.default_batch_tokens("cpu") == core.CPU_BATCH_TOKENS == 4096
    assert core.default_batch_tokens("cuda") == core.MAX_BATCH_TOKENS == 16384


def test_centered_accuracy():
    assert core.centered(0.25, 25) == 0.0 and core.centered(1.0, 62) == 1.0
    assert core.centered(0.5, 0) == 0.5


# -----------------------------------------------------------------------------
# bundle errors

def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"context": "a", "continuation": "b"}\n\n{"context": oops}\n')
    with pytest.raises(BundleError, match=r"bad\.jsonl:3"):
        read_task_file(path)


def test_record_missing_a_field_names_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"query": "q", "choices": ["a"]}\n')
    with pytest.raises(BundleError, match=r"t\.jsonl:1: .*gold"):
        read_task_file(path, "multiple_choice")


def test_unknown_task_type_is_a_clear_error(tmp_path):
    write_bundle(tmp_path, {"odd": ("ranking", 0, 0, [{"x": 1}])})
    with pytest.raises(BundleError, match=r"odd.*unknown icl_task_type 'ranking'"):
        load_bundle(tmp_path)


def test_missing_task_file_is_listed_not_dropped(tmp_path):
    tasks = synthetic_tasks(8)
    tasks["absent"] = ("multiple_choice", 0, 25, None)
    bundle = load_bundle(write_bundle(tmp_path, tasks))
    assert bundle.missing == ["absent"]
    res = core.evaluate_core(bundle, TOK, oracle_scorer(gold_prompts(bundle)), max_len=10_000)
    assert res["missing"] == ["absent"] and not res["core_complete"] and "absent" not in res["tasks"]


@pytest.mark.skipif(not SHARED_BUNDLE.is_dir(), reason="shared eval bundle not present")
def test_shared_bundle_reads_and_renders():
    bundle = load_bundle(SHARED_BUNDLE)
    assert len(bundle.tasks) == 22 and bundle.missing == []
    for spec in bundle.tasks:
        pool = read_task_file(spec.path, spec.task_type)
        rows = core.build_rows(spec.task_type, pool[:2], pool, [0, 1], spec.num_fewshot,
                               spec.continuation_delimiter, TOK, max_len=512)
        assert rows and all(len(r.tokens) <= 512 and r.cols for r in rows), spec.label


def test_cli_help():
    out = subprocess.run([sys.executable, "-m", "xsa.evaluate", "core", "--help"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert "--max-per-task" in out and "--bundle" in out


def test_cli_merges_core_into_eval_json(tmp_path):
    from xsa.data import ensure_data
    from xsa.stack.presets import make_config
    from xsa.evaluate.__main__ import main
    from xsa.train import train

    run = tmp_path / "run"
    cfg = make_config("smoke", eval_every=1000, checkpoint_every=1000)
    train(cfg, run, data_dir=ensure_data("smoke"), max_steps=1, progress=False)
    (run / "eval.json").write_text(json.dumps({"other": 1}))
    bundle = write_bundle(tmp_path / "bundle", {**synthetic_tasks(6), "absent": ("schema", 0, 50, None)})
    main(["core", "--run", str(run), "--bundle", str(bundle), "--max-per-task", "4", "--device", "cpu"])
    out = json.loads((run / "eval.json").read_text())
    assert out["other"] == 1 and out["missing"] == ["absent"]
    assert set(out["tasks"]) == {"mc", "letters", "schema", "lm"}
    assert all(t["n"] == 4 and 0 <= t["accuracy"] <= 1 for t in out["tasks"].values())
    assert out["core"] == pytest.approx(sum(t["centered"] for t in out["tasks"].values()) / 4)
    assert out["core_complete"] is False  # a task file is missing: the mean is not CORE
    items = json.loads((run / "core_items.json").read_text())["tasks"]
    assert set(items) == set(out["tasks"]) and all(len(t["correct_bpb"]) == 4 for t in items.values())
    assert "items" not in out["tasks"]["mc"] and out["tasks"]["mc"]["correct_bpb"] > 0


def test_cli_checks_its_arguments_before_any_work(tmp_path, capsys):
    from xsa.evaluate.__main__ import main
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")  # looks like a run folder; nothing loads before the checks
    for args, what in ((["--max-per-task", "0"], "--max-per-task"), (["--max-per-task", "-1"], "--max-per-task"),
                       (["--out", str(tmp_path)], "folder")):
        with pytest.raises(SystemExit) as exc:
            main(["core", "--run", str(run), *args])
        assert exc.value.code == 2 and what in capsys.readouterr().err


def test_subsample_refuses_zero_and_negative_counts():
    with pytest.raises(ValueError, match="max_per_task"):
        core.subsample(10, 0)
    with pytest.raises(ValueError, match="max_per_task"):
        core.subsample(10, -1)


def test_empty_task_file_names_the_file(tmp_path):
    bundle = load_bundle(write_bundle(tmp_path, {"empty": ("multiple_choice", 0, 25, [])}))
    with pytest.raises(BundleError, match="empty"):
        core.evaluate_core(bundle, TOK, oracle_scorer([]), max_len=100)


def test_task_table_is_written_as_csv_and_markdown(tmp_path):
    from xsa.evaluate.run import task_rows
    from xsa.report import write_table
    record = {"tasks": {"copa": {"n": 10, "accuracy": 0.6, "centered": 0.2}}, "missing": ["squad"],
              "chat_tasks": {"GSM8K": {"n": 5, "accuracy": 0.0, "centered": 0.0}}}
    csv_path, md_path = write_table(task_rows(record, "r1"), tmp_path, "t")  # the report's one writer
    assert csv_path.read_text().splitlines() == [
        "run,suite,task,n,accuracy,centered", "r1,CORE,copa,10,0.600000,0.200000",
        "r1,ChatCORE,GSM8K,5,0.000000,0.000000", "r1,CORE,squad,0,n/a,n/a"]
    assert md_path.read_text().splitlines()[2] == "| r1 | CORE | copa | 10 | 0.6000 | 0.2000 |"


def _zip_bundle(tmp_path) -> Path:
    import zipfile
    src = write_bundle(tmp_path / "src" / "eval_bundle", synthetic_tasks(3))
    path = tmp_path / "eval_bundle.zip"
    with zipfile.ZipFile(path, "w") as z:
        for f in src.rglob("*"):
            z.write(f, f.relative_to(src.parent))
    return path


def test_download_unpacks_once_and_checks_the_checksum(tmp_path, monkeypatch):
    from xsa.data.bundle import download_bundle
    from xsa.base.records import sha256_file
    zpath = _zip_bundle(tmp_path)
    monkeypatch.setenv("XSA_EVAL_BUNDLE_SHA256", "0" * 64)
    with pytest.raises(BundleError, match="sha256"):
        download_bundle(tmp_path / "bad", url=zpath.as_uri())
    monkeypatch.setenv("XSA_EVAL_BUNDLE_SHA256", sha256_file(zpath))
    dest = download_bundle(tmp_path / "cache" / "eval_bundle", url=zpath.as_uri())
    assert len(load_bundle(dest).tasks) == 4
    zpath.unlink()  # a second call finds the unpacked bundle and fetches nothing
    assert download_bundle(tmp_path / "cache" / "eval_bundle", url=zpath.as_uri()) == dest


def test_a_failed_bundle_download_is_a_bundle_error_that_says_what_to_do(tmp_path, monkeypatch):
    from xsa.data.bundle import download_bundle
    monkeypatch.setattr("time.sleep", lambda s: None)
    with pytest.raises(BundleError, match="XSA_EVAL_BUNDLE"):  # the CLI prints it as one line, exit 2
        download_bundle(tmp_path / "cache" / "eval_bundle", url=(tmp_path / "nowhere.zip").as_uri(), retries=2)
    assert not (tmp_path / "cache" / "eval_bundle").exists()


def test_bundle_resolution_order(tmp_path, monkeypatch):
    from xsa.data.bundle import resolve_bundle
    a = write_bundle(tmp_path / "a", synthetic_tasks(2))
    b = write_bundle(tmp_path / "b", synthetic_tasks(2))
    monkeypatch.setenv("XSA_EVAL_BUNDLE", str(b))
    assert resolve_bundle(a) == a and resolve_bundle() == b
    with pytest.raises(BundleError, match="no core.yaml"):
        resolve_bundle(tmp_path)
