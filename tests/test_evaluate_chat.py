"""Chat format, ChatCORE scoring helpers, the code runner, and SFT on a tiny model."""

import dataclasses
import json
import time
import zipfile

import pytest
import torch

from xsa.stack.presets import make_config
from xsa.evaluate import chat, sft, sft_data
from conftest import TOK
from xsa.stack.model import GPT



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


# -----------------------------------------------------------------------------
# Batched greedy decoding: prompts of unequal length, left-padded, decode as each would alone

def _padded_model():
    from xsa.validation import random_model
    # GQA, XSA with its learnable gate, the smear and value embeddings: every path padding could reach
    return random_model(11, n_kv_head=2, xsa_alpha=1.0, xsa_layers="all", xsa_gate=True, smear=True).eval()


def test_padded_prefill_gives_each_row_its_own_logits():
    from xsa.stack.kvcache import KVCache
    model, g = _padded_model(), torch.Generator().manual_seed(0)
    c = model.config
    prompts = [torch.randint(0, c.vocab_size, (n,), generator=g).tolist() for n in (3, 9, 14)]
    pad = torch.tensor([14 - len(p) for p in prompts])
    ids = torch.tensor([[5] * (14 - len(p)) + p for p in prompts])
    cache = KVCache(c.n_layer, 3, c.n_kv_head, c.head_dim, 20, pad=pad)
    with torch.no_grad():
        batched = model(ids, kv_cache=cache)
        steps = model(torch.tensor([[1], [2], [3]]), kv_cache=cache)  # one decode step after the prefill
        for row, p in enumerate(prompts):
            alone = model(torch.tensor([p + [row + 1]]))
            assert torch.isfinite(batched).all()
            assert (batched[row, -len(p):] - alone[0, :len(p)]).abs().max() < 1e-5
            assert (steps[row, 0] - alone[0, -1]).abs().max() < 1e-5


def test_greedy_batch_replies_as_each_prompt_alone_and_stops_per_row():
    model, g = _padded_model(), torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in (2, 7, 5, 12)]
    alone = [list(model.generate(p, max_tokens=10)) for p in prompts]
    assert chat.greedy_batch(model, prompts, 10, stop=set()) == alone
    stop = {alone[1][3]}  # a token row 1 makes: its reply ends before it, the others at their own
    cut = [r[:next((i for i, t in enumerate(r) if t in stop), len(r))] for r in alone]
    assert chat.greedy_batch(model, prompts, 10, stop=stop) == cut
    assert len(cut[1]) <= 3


def test_generate_replies_keeps_question_order_at_any_batch_size():
    from xsa.validation import random_model
    shape = dataclasses.replace(make_config("smoke").model, vocab_size=TOK.vocab_size, sequence_len=64)
    model = random_model(0, **dataclasses.asdict(shape))
    questions = ["1+1?", "what is the capital of a country with a long name?", "hi", "seven"]
    one = chat.generate_replies(model.eval(), TOK, questions, 6, 64, batch_size=1)
    assert chat.generate_replies(model, TOK, questions, 6, 64, batch_size=3) == one
    with pytest.raises(ValueError, match="gen_batch"):
        chat.evaluate_chatcore(model, TOK, "nowhere", max_len=64, gen_batch=0)


def test_decode_speed_compares_alone_with_batched_and_refuses_bad_sizes(capsys):
    from xsa.evaluate import decode_speed
    from xsa.gpu.parts import Check, decode_part
    res = decode_speed.measure("smoke", torch.device("cpu"), questions=3, tokens=4, gen_batch=2)
    assert res["replies_agree"] == 1.0 and res["autocast"] == "None"  # fp32 on a CPU: every reply the same
    assert res["tokens_per_s_alone"] > 0 and res["speedup"] > 0
    c = Check(dry=True, out=None, batch=4, rounds=1, device=torch.device("cpu"))
    assert decode_part(c)["questions"] == 4
    with pytest.raises(SystemExit):
        decode_speed.main(["--tokens", "0"])
    assert "--tokens must be a positive integer, got 0" in capsys.readouterr().err
    for argv, said in ((["--preset", "nope"], "--preset 'nope': not a preset"), (["--device", "nodev"], "--device:")):
        with pytest.raises(SystemExit):  # one line naming the argument, never a traceback
            decode_speed.main(["--preset", "smoke", *argv] if argv[0] == "--device" else argv)
        assert said in capsys.readouterr().err


def test_batched_decoding_under_bf16_autocast_stays_finite_and_mostly_agrees():
    model = _padded_model()
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in (3, 8, 13, 6)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        alone = [chat.greedy_batch(model, [p], 6, stop=set())[0] for p in prompts]
        batched = chat.greedy_batch(model, prompts, 6, stop=set())
    assert all(len(r) == 6 for r in batched)
    assert sum(a == b for a, b in zip(alone, batched)) >= 3


def test_last_only_logits_are_the_last_row_of_the_full_ones():
    model = _padded_model()
    idx = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full, last = model(idx), model(idx, last_only=True)
    assert last.shape == (2, 1, model.config.vocab_size)
    assert (last[:, 0] - full[:, -1]).abs().max() < 1e-5  # one row of the head: rounding apart, equal
