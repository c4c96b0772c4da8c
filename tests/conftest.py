"""Fixtures shared by the test modules: one CPU thread, the smoke data, the offline eval bundle,
a short smoke training run, and stub notebooks for the pipeline."""

from pathlib import Path

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO.parent / "shared" / "eval_bundle"
KERNEL_META = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
               "language_info": {"name": "python"}}
QUIET = dict(eval_every=1000, checkpoint_every=1000)  # evals and checkpoints only at the end


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
    from xsa.config import make_config
    from xsa.train import train
    return train(make_config("smoke", **{**QUIET, **overrides}), out, data_dir=data_dir, max_steps=max_steps,
                 progress=False)


def stub_notebook(folder: Path, name: str, code: str, params: str = "strict = True") -> None:
    """A notebook of a parameters cell (`params`) and one code cell, as the pipeline runs them."""
    cell = new_code_cell(params)
    cell.metadata["tags"] = ["parameters"]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(new_notebook(cells=[cell, new_code_cell(code)], metadata=KERNEL_META), folder / name)
