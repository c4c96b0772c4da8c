"""
Chat format and ChatCORE: ARC-Easy, ARC-Challenge, MMLU (letter answers), GSM8K (final number of a
generated answer) and HumanEval (generated code run against its tests).

A conversation is <|bos|>, then per turn <|user_start|> text <|user_end|> or
<|assistant_start|> text <|assistant_end|>. Training loss falls on the assistant's tokens only
(its text and the <|assistant_end|> that closes it, so the model learns to stop).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from tqdm.auto import tqdm

from xsa.data.bundle import read_task_file
from xsa.evaluate.core import Row, model_scorer, score_rows, subsample
from xsa.evaluate.sandbox import run_program  # HumanEval's programs run in the sandbox
from xsa.stack.kvcache import KVCache

LETTERS = "ABCDEFGHIJ"
# (label, file under eval_data/, kind, random baseline as a fraction)
CHAT_TASKS = [
    ("ARC-Easy", "world_knowledge/arc_easy.jsonl", "letter", 0.25),
    ("ARC-Challenge", "world_knowledge/arc_challenge.jsonl", "letter", 0.25),
    ("MMLU", "world_knowledge/mmlu.jsonl", "letter", 0.25),
    ("GSM8K", "symbolic_problem_solving/gsm8k.jsonl", "gsm8k", 0.0),
    ("HumanEval", "programming/human_eval.jsonl", "humaneval", 0.0),
]


# -----------------------------------------------------------------------------
# Chat template

def render_conversation(tokenizer, messages: list[dict], max_len: int | None = None):
    """(ids, mask): mask[i] = 1 where ids[i] is an assistant token the model should learn."""
    sp = tokenizer.special_id
    ids, mask = [tokenizer.bos_id], [0]
    for m in messages:
        role = m["role"]
        if role not in ("user", "assistant"):
            raise ValueError(f"message role must be user or assistant, got {role!r}")
        body = tokenizer.encode(m["content"])
        ids += [sp(f"<|{role}_start|>")] + body + [sp(f"<|{role}_end|>")]
        learn = int(role == "assistant")
        mask += [0] + [learn] * (len(body) + 1)
    if max_len is not None:
        ids, mask = ids[:max_len], mask[:max_len]
    return ids, mask


def render_prompt(tokenizer, user_text: str) -> list[int]:
    """A one-question conversation, primed for the assistant's reply."""
    ids, _ = render_conversation(tokenizer, [{"role": "user", "content": user_text}])
    return ids + [tokenizer.special_id("<|assistant_start|>")]


def letter_question(item: dict) -> str:
    query = item["query"].removeprefix("Question: ").strip()
    options = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(item["choices"]))
    return f"{query}\n\n{options}\n\nAnswer with the letter of the correct option."


def gsm8k_question(item: dict) -> str:
    return item["context"]


def gsm8k_reply(item: dict) -> str:
    """The training-style answer: worked steps (calculator annotations removed), then '#### n'."""
    steps = re.sub(r"<<[^>]*>>", "", item["chain_of_thought"])
    return f"{steps}\n#### {item['answer']}"


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_number(text: str) -> str | None:
    """The number after '####' if present, else the last number in the text, without commas."""
    tail = text.split("####")[-1] if "####" in text else text
    found = _NUMBER.findall(tail)
    if not found:
        return None
    n = found[-1 if "####" not in text else 0].replace(",", "")
    return n[:-2] if n.endswith(".0") else n


def humaneval_question(item: dict) -> str:
    return f"Complete this Python function.\n\n```python\n{item['prompt']}```"


def extract_code(reply: str) -> str:
    fenced = re.findall(r"```(?:python)?\n(.*?)```", reply, re.S)
    return fenced[0] if fenced else reply


def humaneval_program(item: dict, reply: str) -> str:
    """The candidate's program: the prompt and the reply, without the tests (they run outside it)."""
    code = extract_code(reply)
    if f"def {item['entry_point']}" not in code:  # a body only: continue the given signature
        return item["prompt"] + code + "\n"
    return item["prompt"] + "\n    pass\n\n" + code + "\n"  # a whole function: the prompt's imports and helpers first


def humaneval_tests(item: dict):
    """client(call): the item's check() run in this process on the candidate's answers. The prompt
    is run first for its imports and helpers, which some tests use (HumanEval/32's poly, say);
    its own function is the stub, never the candidate."""
    namespace: dict = {}
    try:
        exec(compile(item["prompt"], "prompt.py", "exec"), namespace)
    except Exception:  # a prompt that does not run alone: the tests get no helpers
        namespace = {}
    exec(compile(item["test"], "test.py", "exec"), namespace)
    return lambda call: namespace["check"](call)


def run_humaneval(item: dict, reply: str, timeout: float = 5.0, memory_mb: int = 512):
    """Outcome (passed, status) of a reply: the program in the sandbox serves its function, the
    tests judge it from here (xsa/evaluate/calls.py)."""
    return run_program(humaneval_program(item, reply), timeout=timeout, memory_mb=memory_mb,
                       serve=item["entry_point"], client=humaneval_tests(item))


# -----------------------------------------------------------------------------
# Evaluation

@torch.inference_mode()
def greedy_batch(model, prompts: list[list[int]], max_tokens: int, stop: set[int]) -> list[list[int]]:
    """Greedy replies to several prompts at once, each up to (not including) its first stop token.

    The prompts are left-padded to one length and decode as one batch with a KV cache that hides
    the padding (xsa.stack.kvcache.KVCache; rotary embeddings see distances only, so the shift is unseen),
    so a reply is the one the prompt gets alone (tests/test_evaluate_chat.py). One host sync a
    step: are all rows done?"""
    device, c = model.wte.weight.device, model.config
    longest = max(len(p) for p in prompts)
    pad = torch.tensor([longest - len(p) for p in prompts], device=device)
    ids = torch.tensor([[0] * (longest - len(p)) + p for p in prompts], device=device)  # padding: any id
    cache = KVCache(c.n_layer, len(prompts), c.n_kv_head, c.head_dim, longest + max_tokens,
                    device=device, dtype=model.wte.weight.dtype, pad=pad)
    stop_ids = torch.tensor(sorted(stop), device=device)
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    out = []
    for _ in range(max_tokens):
        ids = model(ids, kv_cache=cache, last_only=True)[:, -1].argmax(dim=-1, keepdim=True)
        out.append(ids)
        done |= torch.isin(ids[:, 0], stop_ids)
        if bool(done.all()):
            break
    replies = []
    for row in torch.cat(out, dim=1).tolist():
        ends = [i for i, t in enumerate(row) if t in stop]
        replies.append(row[:ends[0]] if ends else row)
    return replies


def generate_replies(model, tokenizer, questions: list[str], max_tokens: int, max_len: int,
                     batch_size: int, desc: str = "") -> list[str]:
    """The model's greedy reply to each question, decoded batch_size at a time (prompts sorted by
    length, so little of a batch is padding); each prompt is cut from the left so that prompt and
    reply fit the context."""
    stop = {tokenizer.special_id("<|assistant_end|>"), tokenizer.bos_id}
    max_tokens = min(max_tokens, max_len // 2)
    prompts = [render_prompt(tokenizer, q)[-(max_len - max_tokens):] for q in questions]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    replies: list[str] = [""] * len(prompts)
    for start in tqdm(range(0, len(order), batch_size), desc=desc, leave=False, unit="batch"):
        batch = order[start:start + batch_size]
        for i, ids in zip(batch, greedy_batch(model, [prompts[i] for i in batch], max_tokens, stop)):
            replies[i] = tokenizer.decode(ids)
    return replies


def eval_letters(model, tokenizer, items: list[dict], max_len: int, device) -> list[bool]:
    """Pick the choice letter the model rates most likely right after <|assistant_start|>:
    one row per question, each letter scored at its last position, batched like CORE rows."""
    letter_ids = [tokenizer.encode(c)[0] for c in LETTERS]
    rows = []
    for i, item in enumerate(items):
        prompt = render_prompt(tokenizer, letter_question(item))[-max_len:]
        k = len(item["choices"])
        rows.append(Row(i, prompt, [len(prompt) - 1] * k, letter_ids[:k], list(range(k))))
    n_options = max(len(it["choices"]) for it in items)
    mean_loss, _ = score_rows(rows, len(items), n_options, model_scorer(model), tokenizer.bos_id, device)
    return [p == it["gold"] for p, it in zip(mean_loss.argmin(dim=1).tolist(), items)]


def evaluate_chatcore(model, tokenizer, bundle: Path, max_len: int, device="cpu",
                      max_per_task: int | None = None, gen_tokens: int = 256, gen_batch: int = 32) -> dict:
    """ChatCORE: the mean centred accuracy over the tasks the bundle has. The generative tasks
    decode gen_batch questions at a time (greedy, up to gen_tokens tokens each)."""
    if isinstance(gen_batch, bool) or not isinstance(gen_batch, int) or gen_batch < 1:
        raise ValueError(f"gen_batch: questions decoded at once must be a positive integer, got {gen_batch!r}")
    if isinstance(gen_tokens, bool) or not isinstance(gen_tokens, int) or gen_tokens < 1:
        raise ValueError(f"gen_tokens: the longest reply must be a positive number of tokens, got {gen_tokens!r}")
    tasks, missing = {}, []
    for label, rel, kind, baseline in tqdm(CHAT_TASKS, desc="ChatCORE", unit="task"):
        path = Path(bundle) / "eval_data" / rel
        if not path.is_file():
            missing.append(label)
            continue
        pool = read_task_file(path)
        items = [pool[i] for i in subsample(len(pool), max_per_task)]
        if kind == "letter":
            correct = eval_letters(model, tokenizer, items, max_len, device)
        else:
            ask = gsm8k_question if kind == "gsm8k" else humaneval_question
            replies = generate_replies(model, tokenizer, [ask(it) for it in items], gen_tokens, max_len,
                                       gen_batch, desc=label)
            if kind == "gsm8k":
                correct = [final_number(r) == final_number(it["answer"]) for it, r in zip(items, replies)]
            else:
                correct = [run_humaneval(it, r)[0] for it, r in zip(items, replies)]
        acc = sum(correct) / len(correct)
        tasks[label] = {"n": len(correct), "accuracy": acc, "centered": (acc - baseline) / (1 - baseline)}
    chatcore = sum(t["centered"] for t in tasks.values()) / len(tasks) if tasks else float("nan")
    return {"chatcore": chatcore, "tasks": tasks, "missing": missing, "max_per_task": max_per_task,
            "gen_tokens": gen_tokens, "gen_batch": gen_batch}
