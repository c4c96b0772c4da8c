"""
The parts of the GPU quick check (xsa/gpu_check.py, whose docstring lists them) and what they share:
an Arm (a model with its training Step, the optimizers timed apart) and the Check (device, shapes,
the synthetic batch, the record). Each part takes the Check and returns its record, "ok": False
where it failed.
"""

from __future__ import annotations

import copy
import math
import platform
import statistics
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import profile

from xsa.stack import checkpoint as ckpt
from xsa.base.common import Timer, datasheet_peak_flops, device_name, matmul_peak_flops, mfu, sync
from xsa.evaluate.decode_speed import measure
from xsa.stack.model import build
from xsa.stack.presets import make_config
from xsa.base.records import atomic_write_json
from xsa.stack.step import Precision, Step
from xsa.throughput import copy_task_batch

LOSS_TOL = 2e-2  # nats: bf16 keeps 8 significant bits; about 1e-3 of a loss near 10 (one step in)
GRAD_COS = 0.99
# The resume part's tolerance, in units of how far the steps move each tensor: a GPU's kernels sum in
# a varying order, and Muon's orthogonalisation amplifies that noise over a few steps, so the bound is
# set from two identical resumes (the noise floor) rather than fixed; the minimum holds where they agree
# bitwise (a CPU). Lost optimizer state moves the matrices by about their whole movement.
RESUME_NOISE_MULT = 5
RESUME_MIN_TOL = 1e-4
MEMORY_BATCHES = (("d12", 32), ("d24-nanochat", 16), ("d24-nanochat", 8))
SDPA_KERNELS = ("flash", "efficient", "cudnn", "math")


class Arm:
    """A model of the check with its training Step: compiled + bf16 on the GPU (and the dry XSA
    arm), eager + bf16 autocast otherwise. The optimizers' steps are timed apart (`opt_marks`)."""

    def __init__(self, cfg, device: torch.device, compile: bool, timer: Timer):
        self.cfg, self.timer = cfg, timer
        self.model = build(cfg.model, 0, device)  # both arms start from the same weights
        self.step = Step(self.model, cfg, device)
        if not compile:  # the bf16 autocast path without the compile's minute
            self.step.precision = Precision(torch.bfloat16, False, device.type)
            self.step.forward = self.model
        self.flops_per_token = self.model.estimate_flops()
        self.opt_marks: list = []
        for opt in self.step.optimizers:
            opt.step = self._timed(opt.step)

    def _timed(self, fn):
        def step(*args, **kw):
            t = self.timer.start()
            out = fn(*args, **kw)
            self.opt_marks.append(self.timer.mark(t))
            return out
        return step

    def optimizer_seconds(self) -> float:
        """Seconds in the optimizers since the last call (after a synchronising Timer.stop)."""
        marks, self.opt_marks = self.opt_marks, []
        return sum(self.timer.seconds(m) for m in marks)

    def __call__(self, it, batch, n_micro: int = 1):
        return self.step(it, [batch] * n_micro, n_micro)


@dataclass
class Check:
    """What the parts share: device, shapes, the synthetic batch, the arms, the record."""
    dry: bool
    out: Path
    batch: int
    rounds: int
    say: object = print
    device: torch.device = None
    rec: dict = field(default_factory=dict)
    arms: dict = field(default_factory=dict)
    t_start: float = field(default_factory=time.perf_counter)

    @property
    def preset(self) -> str:
        return "smoke" if self.dry else "d12"

    def config(self, xsa: bool, rows: int | None = None, preset: str | None = None, real: bool = False):
        """The check's config: one micro-batch of `rows` (default the check's batch) or, with
        real=True, the preset's own batch (the dry mode: two micro-batches of the smoke preset)."""
        preset = preset or self.preset
        kw = dict(gpu_path=True, **(dict(xsa_alpha=1.0) if xsa else {}))
        base = make_config(preset, **kw)
        if real:
            total = 2 * base.total_batch_size if self.dry else base.total_batch_size
            return make_config(preset, total_batch_size=total, **kw)
        rows = rows or self.batch
        return make_config(preset, device_batch_size=rows, total_batch_size=rows * base.model.sequence_len, **kw)

    def data(self, rows: int, cfg) -> tuple:
        gen = torch.Generator().manual_seed(0)
        return copy_task_batch(gen, rows, cfg.model.sequence_len, cfg.model.vocab_size, self.device)

    def write(self) -> None:
        self.rec["elapsed_s"] = round(time.perf_counter() - self.t_start, 3)
        atomic_write_json(self.out, self.rec)

    def part(self, name: str, fn) -> dict:
        t0 = time.perf_counter()
        try:
            result = fn(self)
            result = {"ok": result.pop("ok", True), **result}
        except Exception as e:  # first contact: record what broke, carry on with the next part
            result = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        result["seconds"] = round(time.perf_counter() - t0, 3)
        self.rec["parts"][name] = result
        self.write()
        self.say(f"[{self.rec['elapsed_s']:7.1f}s] {name:9s} {'ok' if result['ok'] else 'FAILED'}  "
                 + ", ".join(f"{k}={_short(v)}" for k, v in result.items()
                             if k not in ("ok", "traceback") and not isinstance(v, (dict, list))))
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return result


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# -----------------------------------------------------------------------------
# The parts, in order

def _graphs() -> int | None:
    try:
        from torch._dynamo.utils import counters  # lazy: optional dependency (a private counter)
        return int(counters["stats"]["unique_graphs"])
    except Exception:  # a private counter: its absence must not stop the check
        return None


def versions_part(c: Check) -> dict:
    rec = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": device_name(c.device), "device_type": c.device.type}
    try:
        import triton  # lazy: optional dependency
        rec["triton"] = triton.__version__
    except ImportError:
        rec["triton"] = None
    if c.device.type == "cuda":
        props = torch.cuda.get_device_properties(c.device)
        rec.update(gpu_memory_bytes=props.total_memory, capability=f"{props.major}.{props.minor}")
    peak, dtype = matmul_peak_flops(c.device, seconds=1.0 if c.device.type == "cuda" else 0.2, wall=True)
    rec.update(matmul_peak_flops=peak, matmul_peak_dtype=dtype, datasheet_peak_flops=datasheet_peak_flops(c.device))
    return rec


def compile_part(c: Check) -> dict:
    cfg = c.config(xsa=True)
    c.arms["xsa"] = arm = Arm(cfg, c.device, True, Timer(c.device))
    data, g0 = c.data(c.batch, cfg), _graphs()
    sync(c.device)
    t0 = time.perf_counter()  # wall time: the compile is host work
    loss = arm(0, data)
    sync(c.device)
    first, times = time.perf_counter() - t0, []
    for it in (1, 2):
        t = arm.timer.start()
        loss = arm(it, data)
        times.append(arm.timer.stop(t))
    return {"first_step_s": first, "next_step_s": statistics.median(times), "loss": loss.item(),
            "graphs_compiled": None if g0 is None else _graphs() - g0, "params": arm.model.num_params(),
            "tokens_per_step": c.batch * cfg.model.sequence_len}


def steps_part(c: Check) -> dict:
    arm = c.arms["xsa"]
    cfg, data = arm.cfg, c.data(c.batch, arm.cfg)
    n = cfg.num_iterations
    its = range(n - round(cfg.warmdown_ratio * n), n)[:4]  # the warm-down's first steps: the lr falls each step
    g0, lrs, losses = _graphs(), [], []
    for it in its:
        losses.append(arm(it, data).item())
        lrs.append(arm.step.lr)
    new = None if g0 is None else _graphs() - g0
    finite = all(torch.isfinite(torch.tensor(losses)).tolist())
    return {"ok": finite and len(set(lrs)) == len(lrs) and new in (0, None), "lr_mults": lrs,
            "losses": losses, "new_graphs": new}


def precision_part(c: Check) -> dict:
    arm = c.arms["xsa"]
    ref = copy.deepcopy(arm.model).float()
    x, y = c.data(c.batch, arm.cfg)
    loss32 = ref(x, y)
    loss32.backward()
    with arm.step.precision.context():
        loss16 = arm.step.forward(x, y)
    loss16.backward()
    cos = {}
    for (name, a), (_, b) in zip(ref.named_parameters(), arm.model.named_parameters()):
        if a.ndim == 2 and a.grad is not None and a.grad.norm() > 0:
            cos[name] = F.cosine_similarity(a.grad.flatten().double(), b.grad.float().flatten().double(), dim=0).item()
    arm.model.zero_grad(set_to_none=True)
    diff, worst = abs(loss16.item() - loss32.item()), min(cos, key=cos.get)
    return {"ok": diff < LOSS_TOL and cos[worst] > GRAD_COS, "loss_fp32": loss32.item(), "loss_bf16": loss16.item(),
            "loss_diff": diff, "loss_tol": LOSS_TOL, "grad_cos_min": cos[worst], "grad_cos_min_matrix": worst,
            "grad_cos_bound": GRAD_COS, "per_matrix": cos}


def sdpa_part(c: Check) -> dict:
    """The attention kernel the model's forward dispatched, from the profiler's operator names."""
    arm = c.arms["xsa"]
    x, _ = c.data(2, arm.cfg)
    with torch.no_grad(), arm.step.precision.context(), profile() as prof:
        arm.model(x)
    names = {e.key for e in prof.key_averages() if "scaled_dot_product" in e.key}
    ran = sorted(k for k in SDPA_KERNELS if any(f"_{k}_attention" in n for n in names)) or ["math"]
    return {"backend": "+".join(ran), "operators": sorted(names)}


def timing_part(c: Check) -> dict:
    """Baseline against XSA at the preset's real batch in ABBA order; the optimizers timed apart."""
    del c.arms["xsa"]  # its memory, before two models at the real batch
    cfgs = {"baseline": c.config(xsa=False, real=True), "xsa": c.config(xsa=True, real=True)}
    cfg = cfgs["xsa"]
    rows, T = cfg.device_batch_size, cfg.model.sequence_len
    n_micro, tokens = cfg.total_batch_size // (rows * T), cfg.total_batch_size
    data, timer = c.data(rows, cfg), Timer(c.device)
    compiled = {"baseline": not c.dry, "xsa": True}  # dry: the XSA arm alone compiles (a CPU compile is slow)
    arms = {name: Arm(cf, c.device, compiled[name], timer) for name, cf in cfgs.items()}
    for arm in arms.values():  # compile and warm up
        arm(0, data, n_micro)
        timer.stop(timer.start())
        arm.optimizer_seconds()
    times = {name: [] for name in arms}
    opt = {name: [] for name in arms}
    for r in range(c.rounds):
        for name in (("baseline", "xsa") if r % 2 == 0 else ("xsa", "baseline")):
            t = timer.start()
            arms[name](5, data, n_micro)
            times[name].append(timer.stop(t))
            opt[name].append(arms[name].optimizer_seconds())
    peak, sheet = c.rec["parts"]["versions"].get("matmul_peak_flops"), c.rec["parts"]["versions"].get("datasheet_peak_flops")
    med = {k: statistics.median(v) for k, v in times.items()}
    res = {"rows": rows, "micro_batches": n_micro, "tokens_per_step": tokens, "rounds": c.rounds, "order": "ABBA",
           "timer": "CUDA events" if timer.cuda else "wall clock", "compiled": compiled,
           "overhead_ratio": med["xsa"] / med["baseline"] - 1}
    for name, arm in arms.items():
        res.update({f"{name}_step_s": med[name], f"{name}_optimizer_s": statistics.median(opt[name]),
                    f"{name}_optimizer_share": statistics.median(opt[name]) / med[name],
                    f"{name}_tok_per_s": tokens / med[name],
                    f"{name}_mfu": mfu(arm.flops_per_token, tokens, med[name], peak),
                    f"{name}_mfu_datasheet": mfu(arm.flops_per_token, tokens, med[name], sheet)})
    res["step_times_s"] = times
    c.arms["xsa"] = arms["xsa"]
    return res


def cos_part(c: Check) -> dict:
    model = c.arms["xsa"].model
    x, _ = c.data(2, c.arms["xsa"].cfg)
    for block in model.blocks:
        block.attn.capture = {}
    try:  # eager under autocast: a capture in the compiled model would compile it again
        with torch.no_grad(), torch.autocast(c.device.type, dtype=torch.bfloat16):
            model(x)
        means, maxes = [], []
        for block in model.blocks:
            cap = block.attn.capture
            cos = F.cosine_similarity(cap["z"][:, 1:].float(), cap["v"].transpose(1, 2)[:, 1:].float(), dim=-1).abs()
            means.append(cos.mean().item())
            maxes.append(cos.max().item())
    finally:
        for block in model.blocks:
            block.attn.capture = None
    return {"ok": max(means) < 1e-3, "z_dtype": str(cap["z"].dtype).removeprefix("torch."),
            "mean_abs_cos_per_layer": means, "max_abs_cos_per_layer": maxes, "mean_bound": 1e-3}


def _max_diff(a: dict, b: dict) -> float:
    return max((a[n] - b[n]).abs().max().item() for n in a)


def _spread(a: dict, b: dict, moved: dict) -> float:
    """The largest difference between two sets of weights, each tensor's divided by how far the steps
    moved it: the embeddings (bf16, moved by whole units) and the matrices (moved by hundredths) then
    count alike, and no single tensor's rounding hides a lost state in the others."""
    worst = 0.0
    for name in a:
        d = (a[name] - b[name]).abs().max().item()
        worst = max(worst, d / moved[name] if moved[name] > 0 else (0.0 if d == 0 else math.inf))
    return worst


def resume_part(c: Check, k: int = 3, at: int = 6) -> dict:
    """Save with xsa.stack.checkpoint, run k steps, load, run them again, twice; the two resumes' spread is
    the noise floor the tolerance is set from. Then once more with the optimizer state dropped after
    loading (the control the tolerance must reject)."""
    arm = c.arms["xsa"]
    data, n_micro = c.data(arm.cfg.device_batch_size, arm.cfg), arm.cfg.total_batch_size // (
        arm.cfg.device_batch_size * arm.cfg.model.sequence_len)
    kw = dict(model=arm.model, optimizers=arm.step.optimizers, config=arm.cfg)

    def weights() -> dict:
        return {n: t.detach().float().clone() for n, t in arm.model.state_dict().items()}

    def run_on() -> dict:
        for it in range(at, at + k):
            arm(it, data, n_micro)
        return weights()

    with tempfile.TemporaryDirectory() as tmp:
        ckpt.save_training_state(tmp, step=at, loop_state={}, **kw)
        start, straight = weights(), run_on()
        resumed = []
        for _ in range(2):
            ckpt.load_training_state(tmp, **kw)
            resumed.append(run_on())
        ckpt.load_training_state(tmp, **kw)
        for opt in arm.step.optimizers:
            opt.state.clear()
        lost = run_on()
    moved = {n: (straight[n] - start[n]).abs().max().item() for n in start}
    floor = _spread(*resumed, moved)
    tol = max(RESUME_NOISE_MULT * floor, RESUME_MIN_TOL)
    diff, lost_diff = _spread(straight, resumed[0], moved), _spread(straight, lost, moved)
    abs_diff = _max_diff(straight, resumed[0])
    return {"ok": diff <= tol < lost_diff, "diff": diff, "noise_floor": floor, "tolerance": tol,
            "lost_state_diff": lost_diff, "max_abs_diff": abs_diff, "moved": max(moved.values()), "steps": k,
            "bitwise_equal": abs_diff == 0.0}


def memory_part(c: Check) -> dict:
    """Peak memory of one compiled training step at each preset's device batch (GPU only)."""
    c.arms.clear()
    if c.device.type != "cuda":
        return {"note": "peak memory is measured on CUDA only", "peak_mem_bytes": None}
    out = {}
    for preset, rows in MEMORY_BATCHES:
        cfg = c.config(xsa=True, rows=rows, preset=preset)
        torch._dynamo.reset()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(c.device)
        try:
            arm = Arm(cfg, c.device, True, Timer(c.device))
            arm(0, c.data(rows, cfg))
            torch.cuda.synchronize(c.device)
            out[f"{preset}@{rows}"] = torch.cuda.max_memory_allocated(c.device)
        except torch.cuda.OutOfMemoryError:
            out[f"{preset}@{rows}"] = "out of memory"
        arm = None
    return {"peak_mem_bytes": out}


def decode_part(c: Check) -> dict:
    """ChatCORE's decoding at the check's preset: 32 questions one at a time against all at once,
    in bf16 on a GPU (xsa.evaluate.decode_speed)."""
    c.arms.clear()
    n, tokens = (4, 4) if c.dry else (32, 64)
    return measure(c.preset, c.device, questions=n, tokens=tokens, gen_batch=n)


PARTS = (("versions", versions_part), ("compile", compile_part), ("steps", steps_part),
         ("precision", precision_part), ("sdpa", sdpa_part), ("timing", timing_part), ("xsa_cos", cos_part),
         ("resume", resume_part), ("memory", memory_part), ("decode", decode_part))
