"""
CORE (DCLM, arXiv:2406.11794): 22 in-context-learning tasks scored by a base model.

Three task types, all decided from one forward pass per prompt row:
- multiple_choice: one row per choice; the choice whose continuation tokens have the lowest MEAN
  loss wins (the mean, not the sum, so long choices are not penalised for their length).
- schema: one row per context option, all sharing the continuation; the option under which the
  continuation has the lowest mean loss wins.
- language_modeling: one row; correct if the greedy (argmax) prediction at every continuation
  position equals the reference token.

The model sits behind a Scorer: ids (B, T) -> (losses (B, T-1), preds (B, T-1)), where column t
scores ids[:, t+1]. Tests plug in oracles; real runs use model_scorer(model).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from xsa.data.bundle import Bundle, BundleError, TaskSpec, read_task_file

# scorer(ids (B, T), cols (B, K), targets (B, K)) -> (losses (B, K), preds (B, K)):
# losses[b, k] = -log p(targets[b, k] | ids[b, :cols[b, k] + 1]); preds[b, k] = argmax there.
Scorer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], "tuple[torch.Tensor, torch.Tensor]"]
SUBSAMPLE_SEED = 1337  # fixed shuffle for --max-per-task
FEWSHOT_SEED = 1234  # few-shot draw for item i uses Random(FEWSHOT_SEED + i)
# tokens per scorer call (rows of similar length, longest first); the scores are the same to float
# rounding at any size (batches only group the rows). On a CPU 4,096 (eight rows of 512) scores
# about 8% faster than 16,384 at cpu-w64-d4 on one thread: a batch's activations stay in cache.
MAX_BATCH_TOKENS = 16384
CPU_BATCH_TOKENS = 4096


def default_batch_tokens(device) -> int:
    """Tokens per scorer call on `device` (evaluate_run_core's default)."""
    return CPU_BATCH_TOKENS if torch.device(device).type == "cpu" else MAX_BATCH_TOKENS


def model_scorer(model) -> Scorer:
    """Wrap a GPT as a Scorer that projects to the vocabulary only at the scored positions.

    Continuations are a few tokens of rows hundreds long, so the (B, T, V) logits would be mostly
    waste (the lm_head is ~40% of the small models' matmul FLOPs, and the full-vocab softcap and
    softmax dominate memory traffic). A forward pre-hook on lm_head gathers the scored columns
    from its input, so the model returns logits (B, K, V) instead of (B, T, V).
    """
    head = getattr(model, "lm_head", None)

    @torch.inference_mode()
    def score(ids: torch.Tensor, cols: torch.Tensor, targets: torch.Tensor):
        if head is None:  # any idx -> logits model: gather afterwards
            logits = model(ids).gather(1, cols[..., None].expand(-1, -1, model.config.vocab_size))
        else:
            def gather(_module, args):
                x = args[0]
                return (x.gather(1, cols[..., None].expand(-1, -1, x.size(-1))),)
            handle = head.register_forward_pre_hook(gather)
            try:
                logits = model(ids)
            finally:
                handle.remove()
        logits = logits.float()
        losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        return losses.view_as(targets), logits.argmax(dim=-1)
    return score


# -----------------------------------------------------------------------------
# Prompt rendering: few-shot examples each end with a blank line, then the item.

def render_mc(item: dict, delim: str, fewshot: list[dict]) -> list[str]:
    shots = "".join(f"{ex['query']}{delim}{ex['choices'][ex['gold']]}\n\n" for ex in fewshot)
    return [f"{shots}{item['query']}{delim}{choice}" for choice in item["choices"]]


def render_schema(item: dict, delim: str, fewshot: list[dict]) -> list[str]:
    shots = "".join(f"{ex['context_options'][ex['gold']]}{delim}{ex['continuation']}\n\n" for ex in fewshot)
    return [f"{shots}{ctx}{delim}{item['continuation']}" for ctx in item["context_options"]]


def render_lm(item: dict, delim: str, fewshot: list[dict]) -> list[str]:
    """[prompt without continuation, prompt with it]. Contexts are stripped because some carry
    trailing whitespace, and the bare prompt is stripped so its tokens stay a prefix of the full one."""
    shots = "".join(f"{ex['context'].strip()}{delim}{ex['continuation']}\n\n" for ex in fewshot)
    prefix = f"{shots}{item['context'].strip()}{delim}"
    return [prefix.strip(), prefix + item["continuation"]]


RENDER = {"multiple_choice": render_mc, "schema": render_schema, "language_modeling": render_lm}


def fewshot_indices(n: int, idx: int, k: int) -> list[int]:
    """k distinct indices of [0, n) other than idx, the same for every run."""
    if k == 0:
        return []
    if k > n - 1:
        raise ValueError(f"asked for {k} few-shot examples from a task of {n} items")
    picks = random.Random(FEWSHOT_SEED + idx).sample(range(n - 1), k)
    return [j + (j >= idx) for j in picks]  # skip over idx itself


# -----------------------------------------------------------------------------
# Rows: one model input each, with the (column, target token, option) triples it scores

@dataclass
class Row:
    item: int
    tokens: list[int]
    cols: list[int]  # column t predicts the token after tokens[t]
    targets: list[int]
    options: list[int]  # which option (choice / context) each scored token belongs to


def _common_prefix(seqs: list[list[int]]) -> int:
    # the prefix every sequence shares is the one the lexicographically first and last share
    lo, hi = min(seqs), max(seqs)
    return next((i for i, (a, b) in enumerate(zip(lo, hi)) if a != b), min(len(lo), len(hi)))


def spans(task_type: str, seqs: list[list[int]]) -> list[tuple[int, int]]:
    """(start, end) of the scored tokens of each row (bos included in seqs)."""
    if task_type == "multiple_choice":  # shared context, choices differ: a common prefix
        start = min(_common_prefix(seqs), min(len(s) for s in seqs) - 1)
        return [(start, len(s)) for s in seqs]
    if task_type == "schema":  # contexts differ, continuation shared: a common suffix
        suffix = _common_prefix([s[::-1] for s in seqs])
        suffix = min(suffix, min(len(s) for s in seqs) - 1)
        return [(len(s) - suffix, len(s)) for s in seqs]
    if task_type == "language_modeling":  # [without, with]: score what `with` adds
        without, full = seqs
        start = min(_common_prefix([without, full]), len(full) - 1)
        return [(start, len(full))]
    raise BundleError(f"unknown task type {task_type!r}")


def item_rows(task_type: str, i: int, seqs: list[list[int]], max_len: int) -> list[Row]:
    """Rows of one item, left-truncated to max_len (the continuation sits at the end and survives)."""
    sp = spans(task_type, seqs)
    if task_type == "language_modeling":
        seqs = seqs[1:]
    # choices that are one token after an identical context (letter answers, yes/no) need only
    # one forward pass: score each choice's token at the same column of one row
    if task_type == "multiple_choice" and all(e - s == 1 for s, e in sp) and len({len(q) for q in seqs}) == 1:
        seq = seqs[0][:-1]
        crop = max(0, len(seq) - max_len)
        col = len(seq) - 1 - crop
        return [Row(i, seq[crop:], [col] * len(seqs), [q[-1] for q in seqs], list(range(len(seqs))))]
    rows = []
    for option, (seq, (start, end)) in enumerate(zip(seqs, sp)):
        seq = seq[:-1]  # the last token is only ever a target
        crop = max(0, len(seq) - max_len)
        cols = list(range(max(0, start - 1 - crop), end - 1 - crop))
        rows.append(Row(i, seq[crop:], cols, [seqs[option][c + 1 + crop] for c in cols], [option] * len(cols)))
    return rows


def build_rows(task_type: str, items: list[dict], pool: list[dict], item_ids: list[int],
               num_fewshot: int, delim: str, tokenizer, max_len: int) -> list[Row]:
    """Render, tokenize and truncate every prompt of `items` (pool[item_ids[i]] == items[i])."""
    if task_type not in RENDER:
        raise BundleError(f"unknown task type {task_type!r} (expected one of {', '.join(RENDER)})")
    render = RENDER[task_type]
    prompts, counts = [], []
    for item, idx in zip(items, item_ids):
        shots = [pool[j] for j in fewshot_indices(len(pool), idx, num_fewshot)]
        p = render(item, delim, shots)
        prompts.extend(p)
        counts.append(len(p))
    encoded = tokenizer.encode_batch(prompts)
    bos = tokenizer.bos_id
    rows, k = [], 0
    for i, count in enumerate(counts):
        rows.extend(item_rows(task_type, i, [[bos] + e for e in encoded[k:k + count]], max_len))
        k += count
    return rows


# -----------------------------------------------------------------------------
# Scoring: batch rows of similar length, one scorer call per batch

@dataclass
class Scores:
    """Per (item, option): mean and summed loss (nats) of the scored tokens, their UTF-8 bytes, and
    whether every scored token was the greedy prediction. Options no row scores: mean +inf."""
    mean: torch.Tensor
    total: torch.Tensor
    nbytes: torch.Tensor
    exact: torch.Tensor


def score_all(rows: list[Row], n_items: int, n_options: int, scorer: Scorer, pad_id: int, device,
              max_batch_tokens: int = MAX_BATCH_TOKENS, progress: bool = False, token_bytes: torch.Tensor | None = None) -> Scores:
    """Score every row with one scorer call per batch of similar-length rows (longest first)."""
    n_groups = n_items * n_options
    loss_sum = torch.zeros(n_groups + 1, dtype=torch.float64)  # the extra group collects padding
    count = torch.zeros(n_groups + 1)
    nbytes = torch.zeros(n_groups + 1, dtype=torch.float64)
    wrong = torch.zeros(n_groups + 1)
    order = sorted(range(len(rows)), key=lambda r: -len(rows[r].tokens))
    batches, i = [], 0
    while i < len(order):  # longest first, so each batch's width is its first row's length
        b = max(1, max_batch_tokens // len(rows[order[i]].tokens))
        batches.append(order[i:i + b])
        i += b
    for batch in tqdm(batches, desc="batches", leave=False, disable=not progress):
        width = len(rows[batch[0]].tokens)
        k = max(len(rows[r].cols) for r in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        cols = torch.zeros((len(batch), k), dtype=torch.long)
        targets = torch.zeros((len(batch), k), dtype=torch.long)
        groups = torch.full((len(batch), k), n_groups, dtype=torch.long)
        for j, r in enumerate(batch):
            row = rows[r]
            n = len(row.cols)
            ids[j, :len(row.tokens)] = torch.tensor(row.tokens)
            cols[j, :n] = torch.tensor(row.cols)
            targets[j, :n] = torch.tensor(row.targets)
            groups[j, :n] = torch.tensor(row.options) + row.item * n_options
        losses, preds = scorer(ids.to(device), cols.to(device), targets.to(device))
        g = groups.flatten()
        loss_sum.index_add_(0, g, losses.flatten().double().cpu())
        count.index_add_(0, g, torch.ones(g.numel()))
        wrong.index_add_(0, g, (preds.cpu() != targets).flatten().float())
        if token_bytes is not None:
            nbytes.index_add_(0, g, token_bytes[targets].flatten().double())
    mean = (loss_sum[:-1] / count[:-1]).float().masked_fill(count[:-1] == 0, float("inf"))
    exact = (wrong[:-1] == 0) & (count[:-1] > 0)
    shape = (n_items, n_options)
    return Scores(mean.view(shape), loss_sum[:-1].view(shape), nbytes[:-1].view(shape), exact.view(shape))


def score_rows(rows: list[Row], n_items: int, n_options: int, scorer: Scorer, pad_id: int, device,
               max_batch_tokens: int = MAX_BATCH_TOKENS, progress: bool = False):
    """-> (mean loss (n_items, n_options), all-greedy-exact (n_items, n_options))."""
    s = score_all(rows, n_items, n_options, scorer, pad_id, device, max_batch_tokens, progress)
    return s.mean, s.exact


def likelihoods(task_type: str, items: list[dict], s: Scores) -> tuple[list[float], list[float | None]]:
    """Per item: the loss of the correct continuation in bits per byte (its summed loss over its
    UTF-8 bytes; the likelihood of the task's reference text, not a capability), and its margin over
    the best wrong option in the same unit (positive: the correct option is the more likely;
    None for language modelling, which has no wrong option). For schema tasks the continuation is
    shared, so the options differ in the context it follows."""
    bpb = (s.total / (math.log(2) * s.nbytes.clamp_min(1))).masked_fill(s.nbytes == 0, float("inf"))
    if task_type == "language_modeling":
        return bpb[:, 0].tolist(), [None] * len(items)
    gold = torch.tensor([item["gold"] for item in items])
    correct = bpb.gather(1, gold[:, None])[:, 0]
    wrong = bpb.scatter(1, gold[:, None], float("inf")).min(dim=1).values
    return correct.tolist(), (wrong - correct).tolist()


def item_correct(task_type: str, items: list[dict], mean_loss, exact) -> list[bool]:
    if task_type == "language_modeling":
        return exact[:, 0].tolist()
    # argmin returns the first minimum, so ties go to the first option
    pred = mean_loss.argmin(dim=1).tolist()
    return [p == item["gold"] for p, item in zip(pred, items)]


def centered(accuracy: float, baseline_percent: float) -> float:
    b = baseline_percent / 100.0
    return (accuracy - b) / (1.0 - b)


def check_max_per_task(max_per_task) -> None:
    if max_per_task is not None and (isinstance(max_per_task, bool) or not isinstance(max_per_task, int)
                                     or max_per_task < 1):
        raise ValueError(f"max_per_task must be a positive integer (or None for every item), got {max_per_task!r}")


def subsample(n: int, max_per_task: int | None) -> list[int]:
    """The first max_per_task items of a fixed shuffle (every item for None): the same for every run."""
    check_max_per_task(max_per_task)
    order = list(range(n))
    random.Random(SUBSAMPLE_SEED).shuffle(order)
    return order if max_per_task is None else order[:max_per_task]


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else None


def evaluate_task(spec: TaskSpec, tokenizer, scorer: Scorer, max_len: int, device="cpu",
                  max_per_task: int | None = None, max_batch_tokens: int = MAX_BATCH_TOKENS,
                  progress: bool = False) -> dict:
    """One task: accuracy (centered against its random baseline) and, per item, the likelihood
    measures of `likelihoods`, on the same fixed items for every run."""
    pool = read_task_file(spec.path, spec.task_type)
    if not pool:
        raise BundleError(f"{spec.path}: task {spec.label!r} has no items")
    ids = subsample(len(pool), max_per_task)
    items = [pool[i] for i in ids]
    rows = build_rows(spec.task_type, items, pool, ids, spec.num_fewshot,
                      spec.continuation_delimiter, tokenizer, max_len)
    n_options = max((o for r in rows for o in r.options), default=0) + 1
    s = score_all(rows, len(items), n_options, scorer, tokenizer.bos_id, device, max_batch_tokens, progress,
                  token_bytes=tokenizer.token_bytes)
    correct = item_correct(spec.task_type, items, s.mean, s.exact)
    loss_bpb, margin_bpb = likelihoods(spec.task_type, items, s)
    acc = sum(correct) / len(correct)
    return {"n": len(correct), "accuracy": acc, "centered": centered(acc, spec.baseline),
            "correct_bpb": _mean(loss_bpb), "margin_bpb": _mean(margin_bpb),
            "items": {"index": ids, "correct": [int(c) for c in correct],
                      "correct_bpb": [_round(x) for x in loss_bpb], "margin_bpb": [_round(x) for x in margin_bpb]}}


def _round(x):
    """Per-item numbers are kept to 6 significant digits (their noise is far larger)."""
    return None if x is None or not math.isfinite(x) else float(f"{x:.6g}")


def evaluate_core(bundle: Bundle, tokenizer, scorer: Scorer, max_len: int, device="cpu",
                  max_per_task: int | None = None, max_batch_tokens: int = MAX_BATCH_TOKENS,
                  labels: list[str] | None = None) -> dict:
    """Every task of the bundle -> {core, tasks, missing, ...}. CORE is the mean centered accuracy
    of the tasks scored; missing tasks are listed and `core_complete` says whether any were."""
    specs = [t for t in bundle.tasks if labels is None or t.label in labels]
    tasks = {}
    bar = tqdm(specs, desc="CORE", unit="task")
    for spec in bar:
        bar.set_postfix_str(spec.label)
        tasks[spec.label] = evaluate_task(spec, tokenizer, scorer, max_len, device, max_per_task,
                                          max_batch_tokens, progress=True)
    missing = [m for m in bundle.missing if labels is None or m in labels]
    core = sum(t["centered"] for t in tasks.values()) / len(tasks) if tasks else float("nan")
    lm = [t for t in tasks.values() if t["margin_bpb"] is not None]
    return {"core": core, "core_complete": not missing and bool(tasks), "tasks": tasks, "missing": missing,
            "core_bpb": _mean(t["correct_bpb"] for t in tasks.values()), "core_margin_bpb": _mean(t["margin_bpb"] for t in lm),
            "max_per_task": max_per_task, "max_len": max_len, "bundle": str(bundle.root)}
