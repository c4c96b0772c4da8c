"""Small helpers shared by every stage: device detection, distributed info, printing."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import torch

from xsa.base.records import atomic_write_text


def autodetect_device(requested: str | None = None) -> torch.device:
    """cuda if present, then mps, then cpu; `requested` ("cpu", "cuda", "cuda:1", ...) wins, if this
    machine has it (a ValueError naming the device otherwise, before any work)."""
    if requested and requested != "auto":
        try:
            device = torch.device(requested)
        except RuntimeError:
            raise ValueError(f"device: {requested!r} is not a device (cpu, cuda, cuda:N, mps or auto)") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device: {requested!r} requested, but this machine has no CUDA device")
        if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ValueError(f"device: {requested!r} requested, but this machine has no MPS device")
        if device.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"device: {requested!r} is not supported (cpu, cuda, cuda:N, mps or auto)")
        return _tf32(device)
    if torch.cuda.is_available():
        return _tf32(torch.device("cuda"))
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _tf32(device: torch.device) -> torch.device:
    """On CUDA, TF32 for the fp32 matmuls that run outside bf16 autocast (as nanochat's compute_init,
    92d63d4: set_float32_matmul_precision("high")); CPUs keep full fp32."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
    return device


def device_name(device: torch.device) -> str:
    """A human-readable name of the device, for run records."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return device.type


def dist_info() -> tuple[bool, int, int, int]:
    """(is_ddp, rank, local_rank, world_size) from torchrun's environment."""
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
    if not all(k in os.environ for k in names):
        return False, 0, 0, 1
    values = {}
    for k in names:  # a value torchrun would never set names its variable, not int()'s message
        try:
            values[k] = int(os.environ[k])
        except ValueError:
            raise ValueError(f"${k}={os.environ[k]!r} is not a whole number (torchrun sets it)") from None
    if values["WORLD_SIZE"] < 1 or not 0 <= values["RANK"] < values["WORLD_SIZE"] or values["LOCAL_RANK"] < 0:
        raise ValueError(f"$RANK={values['RANK']}, $LOCAL_RANK={values['LOCAL_RANK']}, $WORLD_SIZE="
                         f"{values['WORLD_SIZE']}: need 0 <= RANK < WORLD_SIZE and LOCAL_RANK >= 0")
    return True, values["RANK"], values["LOCAL_RANK"], values["WORLD_SIZE"]


def print0(*args, **kwargs):
    """print on rank 0 only."""
    if dist_info()[1] == 0:
        print(*args, **kwargs)


def cache_dir() -> "Path":
    """Root of everything downloaded or built (data, tokenizers, eval bundle): $XSA_CACHE or ~/.cache/xsa.
    An empty XSA_CACHE (`XSA_CACHE= make ...`) is unset, as the shell means it: Path("") would be the
    working directory, and the cache would be built into the checkout."""
    return Path(os.environ.get("XSA_CACHE") or Path.home() / ".cache" / "xsa").expanduser()


# -----------------------------------------------------------------------------
# Device timing: the clocks and the matmul peak that MFU is measured against


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(device: torch.device) -> float:
    # on CPU the process's CPU time (immune to other programs' load, see top), on GPUs wall time
    return time.process_time() if device.type == "cpu" else time.perf_counter()


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
        return self.seconds(self.mark(start), sync=True)

    def mark(self, start):
        """The interval since `start`, read later by seconds() (no host sync on a GPU)."""
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            return start, end
        return time.perf_counter() - start

    def seconds(self, mark, sync: bool = False) -> float:
        if self.cuda:
            if sync:
                mark[1].synchronize()
            return mark[0].elapsed_time(mark[1]) / 1000
        return mark


PEAK_CPU_N = 2048  # the CPU peak's matmul size (part of its cache key)


def matmul_peak_flops(device: torch.device, seconds: float = 1.0, wall: bool = False) -> tuple[float, str]:
    """Best measured FLOP/s of a square matmul: bf16 n=8192 on CUDA, fp32 n=2048 on CPU (large
    enough that the kernel, not the call, sets the rate; the best of the repeats, so a busy core
    lowers it less).

    Per second of `clock` (CPU time of this process on CPU, to compare with a CPU-time MFU), or of
    wall time with wall=True (to compare with a wall-clock tokens/s, as the training log does).
    """
    tick = time.perf_counter if wall else (lambda: clock(device))
    dtype, n = (torch.bfloat16, 8192) if device.type == "cuda" else (torch.float32, PEAK_CPU_N)
    gen = torch.Generator().manual_seed(0)  # leave the global RNG (and so training) untouched
    a = torch.randn(n, n, generator=gen).to(device, dtype)
    b = torch.randn(n, n, generator=gen).to(device, dtype)
    for _ in range(3):  # warm-up (cuBLAS heuristics, CPU caches)
        a @ b
    sync(device)
    best, t_end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = tick()
        for _ in range(4):
            a @ b
        sync(device)
        best = max(best, 4 * 2 * n ** 3 / max(tick() - t0, 1e-9))
    return best, str(dtype).removeprefix("torch.")


def peak_flops(device: torch.device) -> float:
    """This device's matmul peak (`matmul_peak_flops`, per second of `clock`), measured once per
    device, thread count and torch version and cached in cache_dir()/peak_flops.json."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    size = "" if device.type == "cuda" else f"|n={PEAK_CPU_N}"
    key = f"{device.type}|{name}|threads={torch.get_num_threads()}|torch={torch.__version__}{size}"
    path = cache_dir() / "peak_flops.json"
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    if key not in table:
        table[key] = matmul_peak_flops(device)[0]
        try:
            atomic_write_text(path, json.dumps(table, indent=2, sort_keys=True) + "\n")
        except OSError:
            pass  # a read-only cache only costs a re-measurement next time
    return table[key]


def mfu(flops_per_token: float, tokens: float, seconds: float, peak: float | None, world: int = 1) -> float | None:
    """Model FLOPs utilisation, the one definition used everywhere: the model's FLOPs per second of
    `clock` (CPU time of this process on CPU, wall time on GPUs) over the matmul peak measured on
    the same clock (`peak_flops`), per device."""
    if not peak or seconds <= 0:
        return None
    return flops_per_token * tokens / seconds / (peak * world)


# bf16 dense tensor-core peaks of the datasheets (FLOP/s, no sparsity), as nanochat divides by:
# (substring of torch.cuda.get_device_name, peak), the first match wins
DATASHEET_BF16_PEAKS = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM
    ("H200 NVL", 836e12),  # the PCIe card: lower clocks and power than the SXM module
    ("H200 PCIe", 836e12),
    ("H200", 989e12),  # SXM
    ("GH200", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("A10G", 70e12),
)


def datasheet_peak_flops(device: torch.device) -> float | None:
    """The datasheet's bf16 dense peak of this GPU (DATASHEET_BF16_PEAKS), None where the table has
    no entry or on CPUs (no datasheet number). MFU against it is what nanochat reports; MFU against
    the measured matmul peak (`peak_flops`) is what this device can reach."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in DATASHEET_BF16_PEAKS if key in name), None)
