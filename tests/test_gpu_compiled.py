"""The compiled bf16 path (what CUDA runs, emulated on a CPU by gpu_path=True) against the fp32 eager
path, with tolerances that decide something:

- one fixed validation batch, the same trained weights: the bf16-autocast compiled loss is within
  LOSS_TOL of the fp32 eager loss, and every matrix's gradient has cosine > GRAD_COS with fp32's;
  turning XSA off moves the loss by far more than LOSS_TOL, so the tolerance can see a wrong model;
- XSA's output is orthogonal to the token's value inside the compiled bf16 model (|cos(z, v)|), while
  the attention output before it (y) is not;
- training steps with a changing learning rate compile no new graph after the first;
- a run on the compiled path stopped and resumed ends with the uninterrupted run's weights bit for
  bit (under torch.use_deterministic_algorithms: without it two uninterrupted compiled runs already
  differ at 2 threads, inductor's embedding backward adding with atomics), and it learns: its final val
  bpb 0.2 below the initial model's, a margin every host measured gives (at matrix_lr 0.01: at the smoke
  preset's 0.02 this toy model spikes on the bf16 path, see STABLE).

Tolerances, measured on the smoke preset after 30 fp32 steps (loss about 6.3 nats on one 4 x 64
batch): |loss_bf16 - loss_fp32| about 4e-4 nats, so LOSS_TOL = 5e-3 (about 1e-3 relative, 10x the
measurement: bf16 keeps 8 significant bits, 4e-3 relative rounding per matmul input, which averages
down over 256 tokens); gradient cosines above 0.9999 for every matrix, so GRAD_COS = 0.99 (the bound
the issue asks for; a wrong gradient path, e.g. a detached XSA coefficient, gives far less);
mean |cos(z, v)| about 2e-4 and its max about 9e-4: what is left is the rounding of z to bf16
(2^-9 relative per element, so about 2^-9 / sqrt(head_dim) on a unit vector), hence a bound of
1e-3 on the mean and 4e-3 on the max, against mean |cos(y, v)| of order 0.1 without the projection.
Each test runs at 1 and at 2 torch threads.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from xsa.stack.presets import make_config
from xsa.stack.model import GPT
from xsa.base.records import read_jsonl
from xsa.train import train

from conftest import QUIET, train_smoke

LOSS_TOL = 5e-3
GRAD_COS = 0.99
ZV_MEAN, ZV_MAX = 1e-3, 4e-3
THREADS = (1, pytest.param(2, marks=pytest.mark.slow))  # 2 threads: compiled again, kernels per thread count
# a stable toy: the smoke preset's matrix_lr 0.02 spikes on the bf16 path (below), and its embedding lr,
# 0.3 x (64 / 768)^-0.5 = 1.04 at this width, moves the embeddings (stored in bf16 on this path, as
# nanochat stores them) by about their own size a step: val bpb then rose from 3.72 to 3.88 at step
# 15 before falling, where 0.1 falls at every evaluation
STABLE = dict(matrix_lr=0.01, embedding_lr=0.1)


@pytest.fixture
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def trained(smoke_data, tmp_path_factory):
    """Weights after 30 fp32 steps of the smoke preset with XSA at every layer (away from the
    near-uniform predictions of the initialisation, where every precision agrees trivially)."""
    out = tmp_path_factory.mktemp("trained") / "r"
    train_smoke(out, smoke_data, xsa_alpha=1.0)
    return torch.load(out / "ckpt" / "model.pt", weights_only=True)["model"]


def _graphs() -> int:
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("threads", THREADS, indirect=True)
def test_bf16_compiled_matches_fp32_eager(trained, smoke_data, threads):
    from xsa.data.loader import val_batches
    from xsa.stack.step import Step
    torch._dynamo.reset()
    cfg = make_config("smoke", xsa_alpha=1.0, gpu_path=True, **QUIET)
    x, y = next(iter(val_batches(smoke_data, batch_size=4, seq_len=64, max_tokens=256, device="cpu")))

    ref = GPT(cfg.model)
    ref.load_state_dict(trained)
    model = copy.deepcopy(ref)
    loss32 = ref(x, y)
    loss32.backward()

    step = Step(model, cfg, torch.device("cpu"))
    assert step.precision.compile and step.precision.autocast == torch.bfloat16
    for block in model.blocks:  # capture set before the first call: one graph, captures included
        block.attn.capture = {}
    with step.precision.context():
        loss16 = step.forward(x, y)
    loss16.backward()
    assert loss16.dtype == torch.float32  # the logits and the loss leave autocast in fp32
    assert abs(loss16.item() - loss32.item()) < LOSS_TOL, (loss16.item(), loss32.item())
    for (name, a), (_, b) in zip(ref.named_parameters(), model.named_parameters()):
        if a.ndim == 2:
            cos = F.cosine_similarity(a.grad.flatten().double(), b.grad.flatten().double(), dim=0).item()
            assert cos > GRAD_COS, (name, cos)

    # the tolerance sees a wrong model: XSA off moves the fp32 loss by several times it (after these 30
    # steps, 0.04-0.05 nats on the CPUs seen so far, an AMD EPYC and an Intel Xeon; bf16 moves it by 4e-4)
    plain = copy.deepcopy(ref)
    for block in plain.blocks:
        block.attn.xsa_alpha = None
    with torch.no_grad():
        assert abs(plain(x, y).item() - loss32.item()) > 4 * LOSS_TOL

    # XSA inside the compiled bf16 model: z orthogonal to v (positions >= 1; at 0, y is v itself)
    for block in model.blocks:
        cap = block.attn.capture
        assert cap["z"].dtype == torch.bfloat16
        v = cap["v"].transpose(1, 2)[:, 1:].float()
        zv = F.cosine_similarity(cap["z"][:, 1:].float(), v, dim=-1).abs()
        yv = F.cosine_similarity(cap["y"][:, 1:].float(), v, dim=-1).abs()
        assert zv.mean().item() < ZV_MEAN and zv.max().item() < ZV_MAX, (zv.mean().item(), zv.max().item())
        assert yv.mean().item() > 20 * ZV_MEAN  # without the projection y leans on v
        block.attn.capture = None

    # steps with a changing learning rate: no graph after the first step's
    model.zero_grad(set_to_none=True)
    losses, graphs, lrs = [], [], []
    for it in range(10, 14):  # the start of the warm-down: the lr falls every step
        losses.append(step(it, [(x, y)], 1).item())
        graphs.append(_graphs())
        lrs.append(step.lr)
    assert len(set(lrs)) == 4
    assert graphs[1:] == [graphs[0]] * 3, graphs
    assert all(torch.isfinite(torch.tensor(losses)))


@pytest.fixture
def deterministic():
    """torch's deterministic algorithms: inductor then lowers index_put with accumulate (the
    embedding's backward) to aten's deterministic kernel instead of a parallel loop of atomic adds,
    whose order changes from run to run at more than one thread (and on CUDA)."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@pytest.mark.parametrize("threads", THREADS, indirect=True)
def test_compiled_resume_is_bit_identical_and_learns(smoke_data, tmp_path, threads, deterministic):
    torch._dynamo.reset()
    # STABLE: at the preset's matrix_lr 0.02 this toy spikes on the bf16 path near step 20 (val bpb
    # 3.46 -> 5.27, then 4.26 at the end, where fp32 falls steadily to 3.20); at 0.01 it falls steadily
    cfg = make_config("smoke", xsa_alpha=1.0, gpu_path=True, eval_every=15, checkpoint_every=15, **STABLE)

    def run(out, **kw):
        return train(cfg, tmp_path / out, data_dir=smoke_data, progress=False, device="cpu", **kw)
    full = run("full")
    part = run("part", max_steps=15)
    assert part["steps"] == 15 and not part["complete"]
    done = run("part", resume=True)
    assert done["complete"] and done["final_weights_sha256"] == full["final_weights_sha256"]
    assert [r["train_loss"] for r in read_jsonl(tmp_path / "part" / "metrics.jsonl") if "train_loss" in r] == \
        [r["train_loss"] for r in read_jsonl(tmp_path / "full" / "metrics.jsonl") if "train_loss" in r]
    # it learns: its final val bpb well below the initial model's. Not "at every evaluation": the middle
    # one is one trajectory's luck (3.72, 3.58, 3.35 on an AVX-512 host; 3.72, 5.40, 3.36 at 2 threads on
    # an AVX2-only one, a transient spike the run recovers from), the end is not (0.36 below on both)
    bpb = [r["val_bpb"] for r in read_jsonl(tmp_path / "full" / "metrics.jsonl") if "val_bpb" in r]
    assert len(bpb) == 3 and bpb[2] < bpb[0] - 0.2, bpb
