"""Fixtures shared by the test modules: one CPU thread, the smoke data, the offline eval bundle,
a short smoke training run, and stub notebooks for the pipeline."""

import os
import socket
from pathlib import Path

import nbformat
import pytest
import torch
import torch.multiprocessing as mp
from nbformat.v4 import new_code_cell, new_notebook

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO.parent / "shared" / "eval_bundle"
KERNEL_META = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
               "language_info": {"name": "python"}}
QUIET = dict(eval_every=1000, checkpoint_every=1000)  # evals and checkpoints only at the end
if (BUNDLE / "core.yaml").exists():  # offline, as in CI: the bundle beside the checkout, never a download
    os.environ.setdefault("XSA_EVAL_BUNDLE", str(BUNDLE))


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Smoke-sized matmuls gain nothing from threads, and on a busy machine a thread waiting for
    a descheduled peer makes every op slow; one thread keeps the tests fast everywhere."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def smoke_data():
    """The smoke data dir, built once (from the registries) and shared by every test."""
    from xsa.data import ensure_data
    return ensure_data("smoke")


@pytest.fixture(scope="session")
def bundle():
    """The offline CORE bundle beside the checkout (as in CI), or skip."""
    if not (BUNDLE / "core.yaml").exists():
        pytest.skip(f"no eval bundle at {BUNDLE}")
    return BUNDLE


def train_smoke(out, data_dir, max_steps=None, **overrides):
    """A quiet smoke run of `overrides` into `out` (the summary)."""
    from xsa.stack.presets import make_config
    from xsa.train import train
    return train(make_config("smoke", **{**QUIET, **overrides}), out, data_dir=data_dir, max_steps=max_steps,
                 progress=False)


def stub_notebook(folder: Path, name: str, code: str, params: str = "strict = True") -> None:
    """A notebook of a parameters cell (`params`) and one code cell, as the pipeline runs them."""
    cell = new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(new_notebook(cells=[cell, new_code_cell(code)], metadata=KERNEL_META), folder / name)


def kill_during(cfg, out, data_dir, step: int):
    """Train `cfg` into `out` and kill the run while it loads the batch of update `step` (as a
    kill -9 would: no record of that update, the last checkpoint left as it was)."""
    from xsa.data.loader import TokenLoader
    from xsa.train import train
    orig = TokenLoader.get

    def get_or_die(self, s, micro):
        if s == step:
            raise KeyboardInterrupt("simulated kill")
        return orig(self, s, micro)
    TokenLoader.get = get_or_die
    try:
        with pytest.raises(KeyboardInterrupt):
            train(cfg, out, data_dir=data_dir, progress=False)
    finally:
        TokenLoader.get = orig


# A tokenizer for chat-format tests: characters 0..255 as themselves, the chat specials after them
SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>"]


class CharTokenizer:
    """Characters 0..255 as themselves, specials after them."""
    vocab_size = 256 + len(SPECIALS)
    bos_id = 256

    def special_id(self, name):
        return 256 + SPECIALS.index(name)

    def encode(self, text):
        return [min(ord(c), 255) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i < 256)


TOK = CharTokenizer()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_rank(rank: int, world: int, port: int, fn, args: tuple) -> None:
    """One rank as torchrun starts it (its environment, one thread: the ranks share the cores), running
    `fn(rank, *args)`."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    fn(rank, *args)
    # Leave without the interpreter's teardown: its work is written and its group destroyed, and gloo's
    # threads, torn down at exit, can abort a finished rank ("terminate called without an active
    # exception", once in a full run of the suite), which fails the test for nothing it checks.
    os._exit(0)


def spawn_ranks(fn, *args, world: int = 2) -> None:
    """`fn(rank, *args)` on `world` processes, each a rank of a fresh gloo world (fn initialises the
    group from the environment, or lets train do it); raises if a rank fails."""
    mp.spawn(_as_rank, args=(world, _free_port(), fn, args), nprocs=world)
