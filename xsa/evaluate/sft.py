"""
Supervised fine-tuning (SFT) of a base model on conversations, before ChatCORE.

Data: the conversations of xsa/evaluate/sft_data.py ("registry", the offline default, or
"nanochat", its SFT mixture).

Batches: conversations are packed into rows of sequence_len + 1 tokens (best fit; each conversation
starts at its <|bos|>; the rest of a row that no conversation fits is padding with no loss), so
every micro-batch has the one shape (rows, sequence_len) that torch.compile wants, and few tokens
are wasted. An update is a fixed number of rows (batch_rows), in micro-batches of at most
micro_batch_tokens tokens with the gradients accumulated.

Training: the training Step (xsa/stack/step.py: the run's optimizers, Muon + AdamW, and its precision
policy: bf16 autocast and torch.compile on CUDA, fp32 eager on CPU). Loss falls on assistant tokens
only (chat.render_conversation). The learning rate warms up over the first steps, because the
optimizers start with empty moments and AdamW's first update, bias-corrected, moves every parameter
by a full learning rate whatever its gradient; then it decays linearly to zero.

Held-out loss: a fixed set of conversations, never trained on, is scored before and after SFT
(sft.json: heldout_loss_before, heldout_loss_after): the first and last training losses are of
different batches and say little about whether SFT helped.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path
from typing import Iterable, Iterator

import torch
from tqdm.auto import tqdm

from xsa.stack.checkpoint import load_checked
from xsa.stack.config import ConfigError
from xsa.evaluate.chat import render_conversation
from xsa.evaluate.sft_data import SFT_SEED, nanochat_data, registry_data
from xsa.base.records import atomic_torch_save, atomic_write_json, read_json
from xsa.stack.step import Precision, Schedules, Step

SOURCES = ("auto", "registry", "nanochat")

# The recipe (measured on cpu-w64-d4, README "Evaluation"). nanochat's chat_sft starts at 0.02 of
# the pretraining learning rates and decays linearly; weight decay off.
LR_SCALE = 0.02
WARMUP_STEPS = 4
HELDOUT = 128  # conversations held out of training and scored before and after SFT
PACK_BUFFER = 64  # conversations the best-fit packer chooses from


# Packing conversations into rows

def examples(tokenizer, convs: list, row_len: int) -> list[tuple[list[int], list[int]]]:
    """(ids, mask) of each conversation, cut to one row; those left with nothing to learn dropped."""
    out = []
    for c in convs:
        ids, mask = render_conversation(tokenizer, c, max_len=row_len)
        if sum(mask[1:]):
            out.append((ids, mask))
    return out


def pack(stream: Iterable, row_len: int, pad_id: int, buffer: int = PACK_BUFFER) -> Iterator[tuple[list, list]]:
    """Rows of exactly row_len (ids, mask) from a stream of (ids, mask) examples of at most row_len.

    Best fit: into the row goes the longest of the next `buffer` examples that fits what is left of
    it; when none fits, the rest is padding (pad_id, mask 0) and a new row starts. A conversation is
    never split, so every one keeps its <|bos|> and each assistant token is learned exactly once.
    """
    stream, pending = iter(stream), []
    ids, mask = [], []
    while True:
        while len(pending) < buffer and (ex := next(stream, None)) is not None:
            pending.append(ex)
        if not pending:
            break
        space = row_len - len(ids)
        best = max((i for i, (e, _) in enumerate(pending) if len(e) <= space),
                   key=lambda i: len(pending[i][0]), default=None)
        if best is None:  # nothing fits: close the row (never empty, as every example fits a row)
            yield ids + [pad_id] * space, mask + [0] * space
            ids, mask = [], []
            continue
        e, m = pending.pop(best)
        ids, mask = ids + e, mask + m
    if ids:
        space = row_len - len(ids)
        yield ids + [pad_id] * space, mask + [0] * space


def to_tensors(rows: list[tuple[list, list]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) of rows of T + 1 tokens: inputs, and next-token targets with -1 wherever no loss is
    taken (user turns, specials that open a turn, the <|bos|> that starts the next conversation,
    padding)."""
    ids = torch.tensor([r for r, _ in rows], dtype=torch.long)
    mask = torch.tensor([m for _, m in rows], dtype=torch.bool)
    return ids[:, :-1].contiguous(), ids[:, 1:].masked_fill(~mask[:, 1:], -1)


def batches(tokenizer, convs: list, batch_size: int, seq_len: int, seed: int = SFT_SEED):
    """Endless (x, y) batches of batch_size packed rows of seq_len tokens; the conversations are
    reshuffled every epoch (a fixed seed: the same batches on every run)."""
    exs = examples(tokenizer, convs, seq_len + 1)
    if not exs:
        raise ValueError("SFT data: no conversation has an assistant token to learn")
    rng = random.Random(seed)

    def epochs():
        while True:
            order = exs[:]
            rng.shuffle(order)
            yield from order

    rows = pack(epochs(), seq_len + 1, tokenizer.bos_id)
    while True:
        yield to_tensors([next(rows) for _ in range(batch_size)])


def packing_stats(tokenizer, convs: list, seq_len: int, rows_trained: int) -> dict:
    """How full the packed rows of one epoch are, and how many epochs `rows_trained` rows make."""
    exs = examples(tokenizer, convs, seq_len + 1)
    n_rows = sum(1 for _ in pack(exs, seq_len + 1, tokenizer.bos_id))
    return {"rows_per_epoch": n_rows, "row_fill": sum(len(ids) for ids, _ in exs) / (n_rows * (seq_len + 1)),
            "assistant_tokens_per_epoch": sum(sum(mask[1:]) for _, mask in exs),
            "epochs": rows_trained / n_rows}


def micro_rows(batch_rows: int, seq_len: int, micro_batch_tokens: int) -> int:
    """Rows per micro-batch: the largest divisor of batch_rows within the tokens cap, so that every
    micro-batch of an update has the same shape (one compiled graph) and the same weight."""
    fit = micro_batch_tokens // seq_len
    if fit < 1:
        raise ConfigError(f"sft_micro_batch_tokens must be at least one row (sequence_len {seq_len}), "
                          f"got {micro_batch_tokens}")
    return max(d for d in range(1, min(fit, batch_rows) + 1) if batch_rows % d == 0)


# -----------------------------------------------------------------------------
# Training

def check_args(steps, batch_rows=None, micro_batch_tokens=None, lr_scale=LR_SCALE, seq_len=None,
               max_conversations=None, source="registry", warmup_steps=WARMUP_STEPS) -> None:
    """One ConfigError naming the bad argument, before any data is read or any model is trained.
    None stands for a default still to be taken from the run's config (checked once it is)."""
    def positive_int(name, value):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    positive_int("sft_steps", steps)
    for name, value in (("sft_batch_rows", batch_rows), ("sft_micro_batch_tokens", micro_batch_tokens),
                        ("sft_max_conversations", max_conversations)):
        if value is not None:
            positive_int(name, value)
    if max_conversations is not None and max_conversations <= HELDOUT:
        raise ConfigError(f"sft_max_conversations must exceed the {HELDOUT} held-out conversations, "
                          f"got {max_conversations}")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ConfigError(f"sft_warmup_steps must be an integer >= 0, got {warmup_steps!r}")
    if isinstance(lr_scale, bool) or not isinstance(lr_scale, (int, float)) or not 0 < lr_scale <= 1:
        raise ConfigError(f"sft_lr_scale must be a number in (0, 1], got {lr_scale!r}")
    if source not in SOURCES:
        raise ConfigError(f"sft_data must be one of {SOURCES}, got {source!r}")
    if None not in (batch_rows, micro_batch_tokens, seq_len):
        micro_rows(batch_rows, seq_len, micro_batch_tokens)  # at least one row fits a micro-batch


def lr_multiplier(it: int, steps: int, lr_scale: float, warmup_steps: int = WARMUP_STEPS) -> float:
    """lr_scale times a linear warm-up over warmup_steps (of at most half the run), then a linear
    decay to zero at `steps`."""
    warmup = min(warmup_steps, steps // 2)
    if it < warmup:
        return lr_scale * (it + 1) / (warmup + 1)
    return lr_scale * (steps - it) / (steps - warmup)


def finetune(model, tokenizer, config, convs: list, steps: int, device, batch_size: int | None = None,
             lr_scale: float = LR_SCALE, micro_batch_tokens: int | None = None,
             warmup_steps: int = WARMUP_STEPS) -> list[float]:
    """`steps` optimizer updates over `convs` with the training Step (xsa/stack/step.py: the run's
    optimizers and precision policy), each of batch_size packed rows (default: the run's
    device_batch_size) in micro-batches of at most micro_batch_tokens tokens (default: one
    pre-training micro-batch). The learning rate: lr_multiplier; Muon momentum as configured; the
    scheduled (Muon) weight decay off, as where pre-training's cosine schedule ended."""

    seq_len = config.model.sequence_len
    batch_rows = config.device_batch_size if batch_size is None else batch_size
    if micro_batch_tokens is None:
        micro_batch_tokens = config.device_batch_size * seq_len
    check_args(steps, batch_rows, micro_batch_tokens, lr_scale, seq_len, warmup_steps=warmup_steps)
    rows = micro_rows(batch_rows, seq_len, micro_batch_tokens)
    n_micro = batch_rows // rows
    torch.manual_seed(config.seed)
    model.train()
    schedules = Schedules(lambda it: lr_multiplier(it, steps, lr_scale, warmup_steps),
                          lambda it: config.muon_momentum, lambda it: 0.0)
    step = Step(model, config, torch.device(device), schedules=schedules)
    data = batches(tokenizer, convs, rows, seq_len)
    losses = []
    for it in tqdm(range(steps), desc="SFT", unit="step"):
        micro = [next(data) for _ in range(n_micro)]
        losses.append(step(it, ((x.to(device), y.to(device)) for x, y in micro), n_micro).item())
    model.eval()
    return losses


@torch.no_grad()
def heldout_loss(model, tokenizer, config, convs: list, device, batch_rows: int = 8) -> float:
    """Mean loss per assistant token of `convs` (packed as in training, in a fixed order), in the
    run's precision policy."""

    seq_len = config.model.sequence_len
    rows = list(pack(examples(tokenizer, convs, seq_len + 1), seq_len + 1, tokenizer.bos_id))
    precision = Precision.of(torch.device(device), config)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(rows), batch_rows):
        x, y = to_tensors(rows[i:i + batch_rows])
        with precision.context():
            total += model(x.to(device), y.to(device), loss_reduction="sum").item()
        count += int((y != -1).sum())
    model.train(was_training)
    return total / max(count, 1)


def resolve_source(source: str, device) -> str:
    """auto: nanochat's mixture on CUDA (GPU servers have the network), the offline registry data elsewhere."""
    if source == "auto":
        return "nanochat" if torch.device(device).type == "cuda" else "registry"
    return source


def ensure_sft(model, tokenizer, config, out_dir: Path, steps: int = 300, source: str = "auto",
               device="cpu", bundle: Path | None = None, max_conversations: int = 20000,
               batch_rows: int | None = None, micro_batch_tokens: int | None = None,
               lr_scale: float = LR_SCALE, warmup_steps: int = WARMUP_STEPS) -> dict:
    """Fine-tune `model` in place, or load the weights a previous call saved: each (data source,
    steps, recipe) has its own folder under out_dir, so a finished fine-tune is never overwritten.
    The first HELDOUT conversations (of a fixed shuffle) are held out and scored before and after."""
    seq_len = config.model.sequence_len
    batch_rows = config.device_batch_size if batch_rows is None else batch_rows
    if micro_batch_tokens is None:  # one pre-training micro-batch: the shape known to fit the device
        micro_batch_tokens = config.device_batch_size * seq_len
    check_args(steps, batch_rows, micro_batch_tokens, lr_scale, seq_len, max_conversations, source, warmup_steps)
    source = resolve_source(source, device)
    recipe = {"steps": steps, "source": source, "lr_scale": lr_scale, "warmup_steps": warmup_steps,
              "batch_rows": batch_rows, "seq_len": seq_len, "max_conversations": max_conversations,
              "heldout_conversations": HELDOUT, "packing": f"best-fit, buffer {PACK_BUFFER}"}
    tag = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:8]
    out_dir = Path(out_dir) / f"{source}-{steps}-{tag}"
    weights, record = out_dir / "model.pt", out_dir / "sft.json"
    if weights.exists() and record.exists():
        model.load_state_dict(load_checked(weights))
        model.eval()
        return read_json(record)
    t0 = time.time()
    convs, data_info = (nanochat_data(max_conversations) if source == "nanochat"
                        else registry_data(bundle, max_conversations))
    heldout, train = convs[:HELDOUT], convs[HELDOUT:]
    if not train:
        raise ValueError(f"SFT data: {len(convs)} conversations, none left after the {HELDOUT} held out")
    before = heldout_loss(model, tokenizer, config, heldout, device)
    losses = finetune(model, tokenizer, config, train, steps, device, batch_size=batch_rows, lr_scale=lr_scale,
                      micro_batch_tokens=micro_batch_tokens, warmup_steps=warmup_steps)
    after = heldout_loss(model, tokenizer, config, heldout, device)
    rows = micro_rows(batch_rows, seq_len, micro_batch_tokens)
    info = {**recipe, "micro_batch_rows": rows, "micro_batch_tokens": rows * seq_len,
            "heldout_loss_before": before, "heldout_loss_after": after,
            **packing_stats(tokenizer, train, seq_len, steps * batch_rows),
            "loss_first": losses[0], "loss_last": losses[-1],
            "loss_last10_mean": sum(losses[-10:]) / len(losses[-10:]), "wall_time_s": time.time() - t0,
            "data": {**data_info, "conversations_heldout": len(heldout), "conversations_trained": len(train)}}
    atomic_torch_save(weights, model.state_dict())
    atomic_write_json(record, info)
    return info
