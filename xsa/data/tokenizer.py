"""BPE tokenizer: trained with rustbpe, run with tiktoken.

rustbpe learns the merges (byte-level BPE over GPT-4-style pre-split chunks); tiktoken encodes and
decodes fast. The special tokens follow nanochat's chat format and sit after the learned ranks.
Saved as a pickle of plain data (pattern, mergeable ranks, specials) plus a token_bytes table.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Iterable

import numpy as np
import tiktoken
import torch

# GPT-4's (cl100k) pre-tokenisation pattern
SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)
SPECIAL_TOKENS = [
    "<|bos|>",  # starts every document
    "<|user_start|>", "<|user_end|>",
    "<|assistant_start|>", "<|assistant_end|>",
    "<|python_start|>", "<|python_end|>",
    "<|output_start|>", "<|output_end|>",
]


class Tokenizer:
    def __init__(self, pattern: str, mergeable_ranks: dict[bytes, int], special_tokens: dict[str, int]):
        self.pattern, self.mergeable_ranks, self.special_tokens = pattern, mergeable_ranks, special_tokens
        self.enc = tiktoken.Encoding(name="xsa", pat_str=pattern, mergeable_ranks=mergeable_ranks,
                                     special_tokens=special_tokens)
        self.bos_id = special_tokens["<|bos|>"]
        self._token_bytes = None

    # -- training and persistence

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> "Tokenizer":
        """Learn vocab_size - len(SPECIAL_TOKENS) ranks (256 bytes + merges), then add the specials."""
        import rustbpe  # lazy: optional dependency
        n_ranks = vocab_size - len(SPECIAL_TOKENS)
        if n_ranks < 256:
            raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)}, got {vocab_size}")
        bpe = rustbpe.Tokenizer()
        bpe.train_from_iterator(iter(texts), n_ranks, pattern=SPLIT_PATTERN)
        ranks = {bytes(k): v for k, v in bpe.get_mergeable_ranks()}
        specials = {name: len(ranks) + i for i, name in enumerate(SPECIAL_TOKENS)}
        return cls(bpe.get_pattern(), ranks, specials)

    def save(self, directory) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {"pattern": self.pattern, "mergeable_ranks": self.mergeable_ranks,
                 "special_tokens": self.special_tokens}
        tmp = directory / f".tokenizer.pkl.tmp{os.getpid()}"
        tmp.write_bytes(pickle.dumps(state, protocol=4))
        os.replace(tmp, directory / "tokenizer.pkl")
        tmp = directory / f".token_bytes.tmp{os.getpid()}.npy"
        np.save(tmp, self.token_bytes.numpy())
        os.replace(tmp, directory / "token_bytes.npy")

    @classmethod
    def load(cls, directory) -> "Tokenizer":
        path = Path(directory) / "tokenizer.pkl"
        try:
            state = pickle.loads(path.read_bytes())
            return cls(state["pattern"], state["mergeable_ranks"], state["special_tokens"])
        except FileNotFoundError:
            raise FileNotFoundError(f"no tokenizer at {path} (build it: python -m xsa.data build)") from None
        except Exception as e:
            raise ValueError(f"tokenizer file {path} is corrupt: {e}") from e

    @classmethod
    def from_data_dir(cls, data_dir) -> "Tokenizer":
        return cls.load(Path(data_dir) / "tokenizer")

    # -- use

    @property
    def vocab_size(self) -> int:
        return self.enc.n_vocab

    def special_id(self, name: str) -> int:
        return self.special_tokens[name]

    def encode(self, text: str) -> list[int]:
        """Ordinary text to ids: special-token strings inside the text are encoded as plain text."""
        return self.enc.encode_ordinary(text)

    def encode_batch(self, texts: list[str], num_threads: int = 4) -> list[list[int]]:
        return self.enc.encode_ordinary_batch(texts, num_threads=num_threads)

    def decode(self, ids) -> str:
        return self.enc.decode(list(ids))

    @property
    def token_bytes(self) -> torch.Tensor:
        """int32 [vocab_size]: UTF-8 bytes of each token, 0 for special tokens (for bits per byte)."""
        if self._token_bytes is None:
            tb = np.zeros(self.vocab_size, np.int32)
            for token, rank in self.mergeable_ranks.items():
                tb[rank] = len(token)
            self._token_bytes = torch.from_numpy(tb)
        return self._token_bytes
