"""Chat format, ChatCORE scoring helpers, the code runner, and SFT on a tiny model."""

import dataclasses
import json
import time
import zipfile

import pytest
import torch

from xsa.presets import make_config
from xsa.evaluate import chat, sft, sft_data
from conftest import TOK
from xsa.model import GPT



def test_conversation_masks_only_assistant_tokens():
    ids, mask = chat.render_conversation(TOK, [{"role": "user", "content": "hi"},
                                               {"role": "assistant", "content": "yo"}])
    sp = TOK.special_id
    assert ids == [TOK.bos_id, sp("<|user_start|>"), ord("h"), ord("i"), sp("<|user_end|>"),
                   sp("<|assistant_start|>"), ord("y"), ord("o"), sp("<|assistant_end|>")]
    assert mask == [0, 0, 0, 0, 0, 0, 1, 1, 1]


def test_letter_question_renders_options():
    item = {"query": "Question: Which is a fruit?", "choices": ["rock", "apple"], "gold": 1}
    assert chat.letter_question(item) == (
        "Which is a fruit?\n\nA. rock\nB. apple\n\nAnswer with the letter of the correct option.")


@pytest.mark.parametrize("text,number", [
    ("so 3 + 4 = 7\n#### 7", "7"), ("The answer is 1,234.", "1234"), ("no digits", None),
    ("#### -5 apples, then 9", "-5"), ("costs 18.0", "18"),
])
def test_final_number(text, number):
    assert chat.final_number(text) == number


def test_gsm8k_reply_drops_calculator_annotations():
    item = {"chain_of_thought": "16 - 3 = <<16-3=13>>13 eggs", "answer": "13"}
    assert chat.gsm8k_reply(item) == "16 - 3 = 13 eggs\n#### 13"


HUMANEVAL = {"prompt": "def add(a, b):\n    \"\"\"Add.\"\"\"\n", "entry_point": "add",
             "test": "def check(f):\n    assert f(2, 3) == 5\n"}


def test_humaneval_runner_passes_right_and_fails_wrong_code():
    assert chat.run_humaneval(HUMANEVAL, "    return a + b\n")[0]
    assert chat.run_humaneval(HUMANEVAL, "```python\ndef add(a, b):\n    return a + b\n```")[0]
    ok, status = chat.run_humaneval(HUMANEVAL, "    return a - b\n")
    assert not ok and "AssertionError" in status


def test_humaneval_runner_kills_a_looping_program_at_its_time_limit():
    t0 = time.monotonic()
    ok, status = chat.run_humaneval(HUMANEVAL, "    while True:\n        pass\n", timeout=1.0)
    assert (ok, status) == (False, "timeout")
    assert time.monotonic() - t0 < 5


def test_replies_are_plain_values_only():
    from xsa.evaluate.calls import literal
    assert literal("('ok', [1, -2.5, inf, (None, True), {'a': {1, 2}}, set(), b'x', 1+2j])") == (
        "ok", [1, -2.5, float("inf"), (None, True), {"a": {1, 2}}, set(), b"x", 1 + 2j])
    for text in ("__import__('os')", "print(1)", "x", "(lambda: 1)()", "[1][0]", "{**{}}"):
        with pytest.raises(ValueError):
            literal(text)


def test_humaneval_runner_limits_memory():
    ok, status = chat.run_program("x = bytearray(2 * 1024 ** 3)\n", memory_mb=256)
    assert not ok and "MemoryError" in status


def test_sharegpt_reader_keeps_complete_records_of_a_truncated_file(tmp_path):
    records = [{"id": "1", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
               {"id": "2", "conversations": [{"from": "gpt", "value": "starts wrong"}, {"from": "human", "value": "x"}]},
               {"id": "3", "conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}]
    text = json.dumps(records, indent=2)
    path = tmp_path / "sg.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(sft_data.SHAREGPT["member"], text[:text.rindex('"b"')])  # cut inside the last record
    assert sft_data.sharegpt_conversations(path) == [[{"role": "user", "content": "hi"},
                                                 {"role": "assistant", "content": "hello"}]]


def test_sft_batches_take_loss_on_assistant_tokens_only():
    convs = [[{"role": "user", "content": "ab"}, {"role": "assistant", "content": "cd"}]] * 2
    x, y = next(sft.batches(TOK, convs, batch_size=2, seq_len=12))
    assert x.shape == y.shape == (2, 12)
    learned = [TOK.decode([t]) if t < 256 else t for t in y[0].tolist() if t != -1]
    assert learned == ["c", "d", TOK.special_id("<|assistant_end|>")]


def test_finetune_lowers_assistant_loss():
    cfg = make_config("smoke")
    model_cfg = dataclasses.replace(cfg.model, vocab_size=TOK.vocab_size, sequence_len=32)
    torch.manual_seed(0)
    model = GPT(model_cfg)
    model.init_weights()
    convs = [[{"role": "user", "content": f"say {w}"}, {"role": "assistant", "content": w}]
             for w in ["yes", "no", "maybe"] * 4]
    losses = sft.finetune(model, TOK, _Cfg(cfg, model_cfg), convs, steps=12, device="cpu",
                          batch_size=4, lr_scale=1.0)
    assert sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3


class _Cfg:
    """The smoke TrainConfig with the test tokenizer's vocabulary (TrainConfig pins vocab per subset)."""
    def __init__(self, cfg, model_cfg):
        self.__dict__.update(dataclasses.asdict(cfg))
        self.model = model_cfg


def test_chatcore_on_a_tiny_model_lists_missing_tasks(tmp_path):
    data = tmp_path / "eval_data"
    mc = [{"query": f"Question: q{i}?", "choices": ["a", "b", "c", "d"], "gold": i % 4} for i in range(4)]
    files = {"world_knowledge/arc_easy.jsonl": mc, "world_knowledge/mmlu.jsonl": mc,
             "symbolic_problem_solving/gsm8k.jsonl": [{"context": "1+1?", "chain_of_thought": "1+1=2", "answer": "2"}],
             "programming/human_eval.jsonl": [dict(HUMANEVAL, task_id="t/0", canonical_solution="")]}
    for rel, records in files.items():
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_text("".join(json.dumps(r) + "\n" for r in records))
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(make_config("smoke").model, vocab_size=TOK.vocab_size, sequence_len=256))
    model.init_weights()
    model.eval()
    res = chat.evaluate_chatcore(model, TOK, tmp_path, max_len=256, max_per_task=4, gen_tokens=8)
    assert res["missing"] == ["ARC-Challenge"]
    assert set(res["tasks"]) == {"ARC-Easy", "MMLU", "GSM8K", "HumanEval"}
    assert res["tasks"]["ARC-Easy"]["n"] == 4 and res["tasks"]["GSM8K"]["n"] == 1
    assert res["chatcore"] == pytest.approx(sum(t["centered"] for t in res["tasks"].values()) / 4)
