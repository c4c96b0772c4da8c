"""
Run records: the one place that writes results to disk.

Every write is atomic (write to a temporary file in the same folder, fsync, rename), so a killed
process leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import os
import platform
import subprocess
import tempfile
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]  # xsa/base/records.py


def atomic_write_bytes(path, data: bytes) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _named(e, path) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes files private; records are meant to be read
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):  # a full disk, say: name the file (the old one, if any, is intact)
            raise _named(e, path) from None
        raise


def _named(error: OSError, path) -> OSError:
    """The same OSError (class and errno), with a message that names the file written."""
    return type(error)(error.errno, f"cannot write {path} ({error.strerror or error})")


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(Path(path), text.encode("utf-8"))


def atomic_write_json(path, obj: Any) -> None:
    """JSON with sorted keys and a trailing newline, so identical content gives identical bytes."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n")


def atomic_torch_save(path, obj: Any) -> None:
    import torch  # lazy: start-up time (the report reads records without torch)
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(Path(path), buf.getvalue())


def append_jsonl(path, record: dict) -> None:
    """Append one JSON line (a line is written whole; a torn last line is dropped by read_jsonl)."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
    except OSError as e:
        raise _named(e, path) from None


@contextmanager
def records_without(results, run_ids):
    """The results folder `results` as if the runs `run_ids` had never been trained: a temporary folder
    of links to every entry but those runs' folders (`results` itself when there are none). Code that
    reads records, the scale study's pre-registered analysis among it, then runs unchanged without them."""
    results, run_ids = Path(results), set(run_ids or ())
    if not run_ids:
        yield results
        return
    with tempfile.TemporaryDirectory(prefix="xsa-records-") as tmp:
        view = Path(tmp)
        for entry in results.iterdir():
            if entry.name != "runs":
                (view / entry.name).symlink_to(entry.resolve())
        (view / "runs").mkdir()
        for run in (results / "runs").iterdir() if (results / "runs").is_dir() else ():
            if run.name not in run_ids:
                (view / "runs" / run.name).symlink_to(run.resolve())
        yield view


def read_json(path) -> Any:
    """The JSON value of a file; anything else (a missing file, binary garbage, a run folder's record
    that is not a JSON object) is an error naming the file."""
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: corrupt JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text, so not JSON ({e.reason} at byte {e.start})") from None
    if path.suffix == ".json" and path.name in RUN_RECORDS and not isinstance(value, dict):
        raise ValueError(f"{path}: holds a JSON {type(value).__name__}, not the JSON object of a run's "
                         f"{RUN_RECORDS[path.name]} record")
    return value


def read_jsonl(path) -> list[dict]:
    """All complete lines of a JSONL file of objects; a torn final line (a killed writer) is ignored,
    anything else that is not a JSON object names the file and line."""
    return read_jsonl_tail(path)[0]


def read_jsonl_tail(path) -> tuple[list[dict], int | None]:
    """(records, the number of a torn last line or None): read_jsonl, saying what it dropped."""
    out = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                return out, i + 1
            raise ValueError(f"{path}:{i + 1}: corrupt JSON line") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{i + 1}: expected a JSON object, got {type(record).__name__}")
        out.append(record)
    return out, None


def check_steps(records: list[dict], path) -> list[dict]:
    """The records of a metrics log, refused unless their steps strictly increase: a repeated or
    earlier step means two runs wrote into one folder, or a file was doubled."""
    last = None
    for i, r in enumerate(records):
        step = r.get("step")
        if last is not None and (not isinstance(step, int) or step <= last):
            what = "repeats" if step == last else "comes after"
            raise ValueError(f"{path}: record {i + 1} has step {step!r}, which {what} step {last} "
                             "(steps must strictly increase: two runs in one folder, or a doubled file)")
        last = step
    return records


def sha256_file(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def git_state() -> dict:
    """The commit the code ran at, and whether the code had uncommitted changes. Outputs (results/,
    paper/) are left out of that check: a study writes them while it runs."""
    def run(*args):
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    try:
        commit = run("rev-parse", "HEAD").stdout.strip() or None
        dirty = bool(run("status", "--porcelain", "--untracked-files=no", "--", ".",
                         ":(exclude)results", ":(exclude)paper").stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {"git_commit": commit, "git_dirty": dirty}


def code_provenance(commit: str | None, dirty: bool | None) -> dict:
    """A run's code: the commit and dirty flag it started from, and beside them the state at its end
    (git_commit_end, git_dirty_end) where that differs (a run resumed across commits); a run from a dirty
    tree (XSA_ALLOW_DIRTY=1 for a registered study) also records the change, as `git diff HEAD` gives it
    when the record is written."""
    end = git_state()
    rec = {"git_commit": commit, "git_dirty": dirty}
    if (end["git_commit"], end["git_dirty"]) != (commit, dirty):
        rec.update(git_commit_end=end["git_commit"], git_dirty_end=end["git_dirty"])
    if dirty or end["git_dirty"]:  # a run from uncommitted code carries the change itself (its code, not outputs)
        rec["git_diff"] = git_diff()
    return rec


DIFF_LIMIT = 1 << 20  # characters of a recorded change; a longer one is cut, and says so


def git_diff() -> str | None:
    """The uncommitted change to the code against HEAD, outputs (results/, paper/) left out, as text."""
    try:
        out = subprocess.run(["git", "diff", "HEAD", "--", ".", ":(exclude)results", ":(exclude)paper"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out if len(out) <= DIFF_LIMIT else out[:DIFF_LIMIT] + f"\n[cut at {DIFF_LIMIT} of {len(out)} characters]\n"


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; else what platform knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# the instruction-set extensions that select torch's CPU kernels (and so the rounding of its sums)
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "amx_tile", "amx_bf16")


def cpu_identity() -> dict:
    """What tells two CPUs apart for bit-for-bit reproduction: vendor, family/model/stepping, the
    vector extensions present (of CPU_FLAGS) and the kernel set torch picks (its CPU capability).
    Two machines with the same model name ("AMD EPYC") can differ in every one of these."""
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            key = key.strip()
            if not sep:
                if info:  # the first processor's block is enough
                    break
                continue
            if key in ("vendor_id", "cpu family", "model", "stepping", "flags") and key not in info:
                info[key] = value.strip()
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    try:
        import torch  # lazy: start-up time (the report reads records without torch)
        capability = torch.backends.cpu.get_cpu_capability()
    except (ImportError, AttributeError):
        capability = None
    return {"vendor": info.get("vendor_id") or platform.processor() or None,
            "family": info.get("cpu family"), "model": info.get("model"), "stepping": info.get("stepping"),
            "flags": [f for f in CPU_FLAGS if f in flags], "torch_capability": capability}


def cpu_key(prov: dict) -> str | None:
    """A short text of a provenance record's CPU identity ("AuthenticAMD 26/2/1 AVX512"); None where
    the record predates cpu_identity (its "cpu_model" name alone cannot tell machines apart)."""
    ident = (prov or {}).get("cpu_identity")
    if not ident:
        return None
    return (f"{ident.get('vendor')} {ident.get('family')}/{ident.get('model')}/{ident.get('stepping')} "
            f"{ident.get('torch_capability')}")


def software_versions() -> dict:
    """The versions a rerun must match to reproduce numbers bit for bit."""

    import torch  # lazy: start-up time (the report reads records without torch)

    def of(package):
        try:
            return version(package)
        except PackageNotFoundError:
            return None
    return {"torch_version": torch.__version__, "numpy_version": of("numpy"), "tiktoken_version": of("tiktoken"),
            "python_version": platform.python_version()}


def provenance(*, config_hash: str, seed: int | None, device: str, wall_time_s: float | None = None,
               extra: dict | None = None) -> dict:
    """What a reader needs to repeat a result: code version, config, seed, software, hardware, date."""
    rec = {
        **git_state(),
        "config_hash": config_hash,
        "seed": seed,
        **software_versions(),
        "device": device,
        "cpu_model": cpu_model(),
        "cpu_identity": cpu_identity(),
        "hostname_kind": platform.machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": wall_time_s,
        # a preloaded allocator (e.g. tcmalloc) changes speed, never numerics: say so beside the timings
        "ld_preload": os.environ.get("LD_PRELOAD") or None,
    }
    if extra:
        rec.update(extra)
    return rec


# the records of a run folder by file name: each is written by its own stage and by no other
RUN_RECORDS = {"config.json": "config", "summary.json": "summary", "provenance.json": "provenance",
               "metrics.jsonl": "metrics", "eval.json": "eval", "core_items.json": "core items",
               "diagnostics.json": "diagnostics"}
# what diagnostics.json holds per layer (and per head), in the order tables show them; the stage, its
# schema and the paper's tables and figures read this one list
DIAGNOSTIC_METRICS = ("cos_y_v", "cos_z_v", "diag_mass", "first_mass", "entropy", "cos_v_v")
# a record's kind read from its keys, first match: (kind, keys it holds)
KIND_KEYS = (("diagnostics", {"layers"}), ("eval", {"core_detail"}), ("eval", {"chat_detail"}),
             ("throughput", {"overhead_ratio"}), ("summary", {"final_weights_sha256"}),
             ("summary", {"complete", "val_bpb"}), ("config", {"model", "num_tokens"}),
             ("provenance", {"git_commit"}), ("core items", {"max_per_task", "tasks"}))


def record_kind(value) -> str | None:
    """The kind of record a JSON value is (a key of KIND_KEYS), or None for one of no known kind."""
    if not isinstance(value, dict):
        return None
    return next((kind for kind, keys in KIND_KEYS if keys <= value.keys()), None)


def check_own(path: Path, kind: str) -> None:
    """Refuse to write a record of `kind` over a file that is not one: a run folder's config, summary,
    provenance or log (by name, also through a symlink), or a JSON record of another kind."""
    for p in dict.fromkeys((path, path.resolve())):
        named = RUN_RECORDS.get(p.name)
        if named is not None and named != kind:
            raise ValueError(f"out: {p} is a run folder's {named} record; {kind} results are never "
                             "written there (choose another --out)")
    if not path.is_file():
        return
    try:
        current = json.loads(path.read_text(encoding="utf-8")) if path.stat().st_size else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"out: {path} is not a JSON record; {kind} results are not written over it "
                         "(choose another --out or move it away)") from None
    found = record_kind(current)
    if found is not None and found != kind:
        raise ValueError(f"out: {path} holds a {found} record; {kind} results are never written over it "
                         "(choose another --out)")


def check_out(path, kind: str | None = None) -> Path:
    """Fail before any work if the results file cannot be written (a folder, a read-only place), or,
    for a record of `kind`, if it is another record's file (check_own)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"out: {path} is a folder, not a JSON file")
    if kind is not None:
        check_own(path, kind)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"out: cannot create {path.parent} ({e.strerror})") from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"out: {path} is not writable")
    return path
