"""
First contact with a GPU in about five minutes: no data, no network, one GPU, the server's own python.

    PYTHONPATH=. python -m xsa.gpu_check --quick       # on the GPU (scripts/gpu_check.sh --quick)
    PYTHONPATH=. python -m xsa.gpu_check --dry         # on a CPU, tiny shapes, eager (what the tests run)

It needs torch (2.11 or newer, a CUDA build), numpy, tiktoken and tqdm, and writes ONE JSON record,
results/gpu/quick-<UTC time>.json (or --out), rewritten as each part finishes, so a check cut short
still leaves what it measured. A part that fails records its error and the next one runs. Parts:

  versions   python, torch, CUDA, triton, the GPU; the measured bf16 matmul peak beside the datasheet's
  compile    the study's d12 (XSA at every layer) compiled: time of the first step (compile included)
             and of the steps after it
  steps      steps with a changing learning rate (the start of a warm-down): no new compiled graph
  precision  the bf16-autocast compiled loss and gradients against an fp32 eager copy, same weights,
             one batch (|loss difference|, gradient cosine per matrix)
  abba       the baseline (no XSA) against XSA, one step each in ABBA order timed with CUDA events:
             overhead, tokens/s, MFU against the measured and the datasheet peak, peak memory
  xsa_cos    |cos(z, v)| of XSA's output and the token's value per layer, under bf16 autocast
  resume     save (model, optimizers, to a file), run on; reload the file, run the same steps again:
             the weights equal the uninterrupted ones (bitwise, and the largest difference)

The batch is synthetic (the copy task of xsa.throughput), so nothing is downloaded. Shapes: d12 at
--batch rows of 2048 tokens on the GPU; the smoke preset at 4 x 64 in the dry mode.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

LOSS_TOL = 2e-2  # nats: bf16 keeps 8 significant bits; about 1e-3 of a loss near 10 (one step in)
GRAD_COS = 0.99


def _versions(device: torch.device) -> dict:
    from xsa.common import datasheet_peak_flops, device_name, matmul_peak_flops
    rec = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": device_name(device), "device_type": device.type}
    try:
        import triton
        rec["triton"] = triton.__version__
    except ImportError:
        rec["triton"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        rec.update(gpu_memory_bytes=props.total_memory, capability=f"{props.major}.{props.minor}",
                   driver_cuda=torch.cuda.driver_version() if hasattr(torch.cuda, "driver_version") else None)
    peak, dtype = matmul_peak_flops(device, seconds=1.0 if device.type == "cuda" else 0.2, wall=True)
    rec.update(matmul_peak_flops=peak, matmul_peak_dtype=dtype, datasheet_peak_flops=datasheet_peak_flops(device))
    return rec


def _graphs() -> int | None:
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:  # a private counter: its absence must not stop the check
        return None


class Timer:
    """Times device work: CUDA events on a GPU (no host sync inside the timed region), wall clock on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def start(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def stop(self, start) -> float:
        """Seconds since `start` (synchronises on the end event)."""
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000
        return time.perf_counter() - start


def _config(preset: str, batch: int, seq: int | None, gpu: bool, xsa: bool):
    from xsa.presets import make_config
    extra = {} if seq is None else {"sequence_len": seq}
    kw = dict(device_batch_size=batch, gpu_path=gpu, **extra)
    cfg = make_config(preset, **kw)
    kw["total_batch_size"] = batch * cfg.model.sequence_len  # one micro-batch a step
    return make_config(preset, **kw, **(dict(xsa_alpha=1.0) if xsa else {}))


class Arm:
    """A model of the check with its training Step; compiled + bf16 on the GPU, eager + bf16 dry."""

    def __init__(self, cfg, device: torch.device, compile: bool):
        from xsa.model import GPT
        from xsa.step import Precision, Step
        self.cfg = cfg
        torch.manual_seed(0)  # both arms start from the same weights
        self.model = GPT(cfg.model)
        self.model.init_weights()
        self.model.to(device)
        self.step = Step(self.model, cfg, device)
        if not compile:  # the dry mode: the bf16 autocast path without the compile's minute
            self.step.precision = Precision(torch.bfloat16, False, device.type)
            self.step.forward = self.model
        self.flops_per_token = self.model.estimate_flops()

    def __call__(self, it, batch):
        return self.step(it, [batch], 1)


def _state(arm: Arm) -> dict:
    return {"model": arm.model.state_dict(), "optimizers": [o.state_dict() for o in arm.step.optimizers]}


def run_check(*, dry: bool, out: Path, batch: int | None = None, rounds: int | None = None,
              progress: bool = True) -> dict:
    from xsa.checkpoint import weights_sha256
    from xsa.common import autodetect_device, mfu, sync
    from xsa.records import atomic_write_json, provenance
    from xsa.throughput import copy_task_batch

    t_start = time.perf_counter()
    device = torch.device("cpu") if dry else autodetect_device("cuda")
    preset, seq = ("smoke", None) if dry else ("d12", None)
    batch = batch or (4 if dry else 8)  # 8 rows: the fp32 eager copy of d12 fits an 80 GB GPU beside it
    rounds = rounds or (4 if dry else 10)
    compile = not dry
    say = print if progress else (lambda *a, **k: None)
    rec = {"kind": "gpu quick check", "dry": dry, "preset": preset, "batch": batch, "compiled": compile,
           "autocast": "bfloat16", "parts": {}, "complete": False}

    def write():
        rec["elapsed_s"] = round(time.perf_counter() - t_start, 3)
        atomic_write_json(out, rec)

    def part(name, fn):
        t0 = time.perf_counter()
        try:
            result = fn()
            result = {"ok": result.pop("ok", True), **result}
        except Exception as e:  # first contact: record what broke, carry on with the next part
            result = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        result["seconds"] = round(time.perf_counter() - t0, 3)
        rec["parts"][name] = result
        write()
        say(f"[{rec['elapsed_s']:7.1f}s] {name:9s} {'ok' if result['ok'] else 'FAILED'}  "
            + ", ".join(f"{k}={_short(v)}" for k, v in result.items() if k not in ("ok", "traceback", "per_matrix")
                        and not isinstance(v, (dict, list))))
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return result

    versions = part("versions", lambda: _versions(device))
    peak, sheet = versions.get("matmul_peak_flops"), versions.get("datasheet_peak_flops")
    xsa_cfg = _config(preset, batch, seq, gpu=compile, xsa=True)
    base_cfg = _config(preset, batch, seq, gpu=compile, xsa=False)
    T, V = xsa_cfg.model.sequence_len, xsa_cfg.model.vocab_size
    gen = torch.Generator().manual_seed(0)
    data = copy_task_batch(gen, batch, T, V, device)
    timer = Timer(device)
    arms: dict = {}

    def compile_part():
        arms["xsa"] = arm = Arm(xsa_cfg, device, compile)
        g0 = _graphs()
        sync(device)
        t0 = time.perf_counter()  # wall time: the compile is host work
        loss = arm(0, data)
        sync(device)
        first = time.perf_counter() - t0
        times = []
        for it in (1, 2):
            t = timer.start()
            loss = arm(it, data)
            times.append(timer.stop(t))
        return {"first_step_s": first, "next_step_s": statistics.median(times), "loss": loss.item(),
                "graphs_compiled": None if g0 is None else _graphs() - g0,
                "params": arm.model.num_params(), "tokens_per_step": batch * T}
    part("compile", compile_part)

    def steps_part():
        arm = arms["xsa"]
        its = range(xsa_cfg.num_iterations - round(xsa_cfg.warmdown_ratio * xsa_cfg.num_iterations),
                    xsa_cfg.num_iterations)[:4]  # the first steps of the warm-down: the lr falls each step
        g0, lrs, losses = _graphs(), [], []
        for it in its:
            losses.append(arm(it, data).item())
            lrs.append(arm.step.lr)
        new = None if g0 is None else _graphs() - g0
        finite = all(torch.isfinite(torch.tensor(losses)).tolist())
        return {"ok": finite and len(set(lrs)) == len(lrs) and new in (0, None), "lr_mults": lrs,
                "losses": losses, "new_graphs": new}
    part("steps", steps_part)

    def precision_part():
        arm = arms["xsa"]
        ref = copy.deepcopy(arm.model).float()
        x, y = data
        loss32 = ref(x, y)
        loss32.backward()
        with arm.step.precision.context():
            loss16 = arm.step.forward(x, y)
        loss16.backward()
        cos = {}
        for (name, a), (_, b) in zip(ref.named_parameters(), arm.model.named_parameters()):
            if a.ndim == 2 and a.grad is not None and a.grad.norm() > 0:
                cos[name] = F.cosine_similarity(a.grad.flatten().double(), b.grad.flatten().double(), dim=0).item()
        arm.model.zero_grad(set_to_none=True)
        del ref
        diff = abs(loss16.item() - loss32.item())
        worst = min(cos, key=cos.get)
        return {"ok": diff < LOSS_TOL and cos[worst] > GRAD_COS, "loss_fp32": loss32.item(),
                "loss_bf16": loss16.item(), "loss_diff": diff, "loss_tol": LOSS_TOL,
                "grad_cos_min": cos[worst], "grad_cos_min_matrix": worst, "grad_cos_bound": GRAD_COS,
                "per_matrix": cos}
    part("precision", precision_part)

    def abba_part():
        arms["baseline"] = Arm(base_cfg, device, compile)
        base = arms["baseline"]
        sync(device)
        t0 = time.perf_counter()
        base(0, data)  # the baseline's compile
        sync(device)
        compile_s = time.perf_counter() - t0
        times = {"baseline": [], "xsa": []}
        mem = {"baseline": 0, "xsa": 0}
        for r in range(rounds):
            for name in (("baseline", "xsa") if r % 2 == 0 else ("xsa", "baseline")):
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                t = timer.start()
                arms[name](5, data)
                times[name].append(timer.stop(t))
                if device.type == "cuda":
                    mem[name] = max(mem[name], torch.cuda.max_memory_allocated(device))
        tokens = batch * T
        res = {"baseline_compile_s": compile_s, "rounds": rounds, "order": "ABBA",
               "timer": "CUDA events" if device.type == "cuda" else "wall clock"}
        med = {k: statistics.median(v) for k, v in times.items()}
        res["overhead_ratio"] = med["xsa"] / med["baseline"] - 1
        for name, arm in arms.items():
            res[f"{name}_step_s"] = med[name]
            res[f"{name}_tok_per_s"] = tokens / med[name]
            res[f"{name}_mfu"] = mfu(arm.flops_per_token, tokens, med[name], peak)
            res[f"{name}_mfu_datasheet"] = mfu(arm.flops_per_token, tokens, med[name], sheet)
            res[f"{name}_peak_mem_bytes"] = mem[name] if device.type == "cuda" else None
        res["step_times_s"] = times
        del arms["baseline"]
        return res
    part("abba", abba_part)

    def cos_part():
        model = arms["xsa"].model
        for block in model.blocks:
            block.attn.capture = {}
        try:  # eager under autocast: a capture in the compiled model would compile it again
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
                model(data[0][:2])
            means, maxes = [], []
            for block in model.blocks:
                cap = block.attn.capture
                c = F.cosine_similarity(cap["z"][:, 1:].float(), cap["v"].transpose(1, 2)[:, 1:].float(), dim=-1).abs()
                means.append(c.mean().item())
                maxes.append(c.max().item())
        finally:
            for block in model.blocks:
                block.attn.capture = None
        return {"ok": max(means) < 1e-3, "z_dtype": str(cap["z"].dtype).removeprefix("torch."),
                "mean_abs_cos_per_layer": means, "max_abs_cos_per_layer": maxes, "mean_bound": 1e-3}
    part("xsa_cos", cos_part)

    def resume_part():
        arm, k = arms["xsa"], 3
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "state.pt"
            torch.save(_state(arm), path)
            for it in range(6, 6 + k):
                arm(it, data)
            straight = {n: t.detach().clone() for n, t in arm.model.state_dict().items()}
            saved = torch.load(path, map_location=device, weights_only=True)
            arm.model.load_state_dict(saved["model"])
            for opt, st in zip(arm.step.optimizers, saved["optimizers"]):
                opt.load_state_dict(st)
            for it in range(6, 6 + k):
                arm(it, data)
        again = arm.model.state_dict()
        diff = max((straight[n].float() - again[n].float()).abs().max().item() for n in straight)
        equal = weights_sha256(straight) == weights_sha256(again)
        scale = max(t.float().abs().max().item() for t in straight.values())
        return {"ok": equal or diff <= 1e-3 * scale, "bitwise_equal": equal, "max_abs_diff": diff, "steps": k,
                "note": None if equal else "not bitwise: inductor adds the embedding gradient with atomics "
                "(run under torch.use_deterministic_algorithms(True, warn_only=True) for bit-exact repeats)"}
    part("resume", resume_part)

    rec["complete"] = True
    rec["ok"] = all(p["ok"] for p in rec["parts"].values())
    rec["provenance"] = provenance(config_hash=xsa_cfg.config_hash(), seed=0, device=versions.get("device", "?"),
                                   wall_time_s=round(time.perf_counter() - t_start, 3))
    write()
    say(f"gpu quick check: {'all parts ok' if rec['ok'] else 'SOME PARTS FAILED'} in {rec['elapsed_s']:.0f}s, "
        f"record {out}")
    return rec


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def main(argv=None):
    from xsa.records import REPO_ROOT
    p = argparse.ArgumentParser(prog="python -m xsa.gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_true", help="the five-minute check on the GPU")
    mode.add_argument("--dry", action="store_true", help="the same parts on a CPU, tiny shapes, eager")
    p.add_argument("--out", default=None, help="the JSON record (default results/gpu/quick-<UTC time>.json)")
    p.add_argument("--batch", type=int, default=None, help="rows of 2048 tokens a step (default 8; dry: 4)")
    p.add_argument("--rounds", type=int, default=None, help="ABBA rounds (default 10; dry: 4)")
    args = p.parse_args(argv)
    if args.quick and not torch.cuda.is_available():
        p.exit(2, f"{p.prog}: error: --quick needs a visible CUDA GPU (torch {torch.__version__}, "
                  f"CUDA {torch.version.cuda}); --dry runs the parts on a CPU\n")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) if args.out else REPO_ROOT / "results" / "gpu" / f"quick-{'dry-' if args.dry else ''}{stamp}.json"
    if out.exists():
        p.exit(2, f"{p.prog}: error: {out} exists (results are never overwritten)\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    rec = run_check(dry=args.dry, out=out, batch=args.batch, rounds=args.rounds)
    sys.exit(0 if rec["ok"] else 1)


if __name__ == "__main__":
    main()
