"""
The CORE eval bundle: where it lives, and reading it. It sits in data/ because the data build
needs it before any evaluation does: the training corpus is decontaminated against its items
(xsa/data/decontam.py), and the evaluation stages (xsa/evaluate/) read it from here.

Layout (nanochat's eval_bundle.zip): core.yaml (the task list), eval_meta_data.csv (random
baselines in percent), eval_data/<category>/<task>.jsonl. resolve_bundle is the one lookup, for
evaluation and for the data build's decontamination alike: an explicit path, then $XSA_EVAL_BUNDLE,
then a one-time download into cache_dir()/"eval_bundle".
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from xsa.base.common import cache_dir
from xsa.base.records import sha256_file

BUNDLE_URL = "https://karpathy-public.s3.us-west-2.amazonaws.com/eval_bundle.zip"
# sha256 of the zip as published (a mismatch means upstream changed it; override deliberately
# with $XSA_EVAL_BUNDLE_SHA256 after checking what changed)
BUNDLE_SHA256 = "90a7c19e28ee7a52b4f6e1f87658deb9fde7f63deba2379045bdb1fe9ea5d200"
BUNDLE_ENV = "XSA_EVAL_BUNDLE"  # a local bundle folder (offline machines, CI, tests)
TASK_TYPES = ("multiple_choice", "schema", "language_modeling")


class BundleError(ValueError):
    """A malformed or incomplete bundle. The message names the file (and line)."""


@dataclass(frozen=True)
class TaskSpec:
    label: str
    task_type: str
    num_fewshot: int
    continuation_delimiter: str
    path: Path
    baseline: float  # random baseline in percent


@dataclass
class Bundle:
    root: Path
    tasks: list[TaskSpec]
    missing: list[str] = field(default_factory=list)  # labels whose data file is absent


# -----------------------------------------------------------------------------
# Locating

def resolve_bundle(path=None) -> Path:
    """The bundle folder: `path`, else $XSA_EVAL_BUNDLE, else the download cached in
    cache_dir()/eval_bundle (fetched once, on first use).

    The only bundle lookup of the package: evaluation and decontamination both call it.
    """
    chosen = path or os.environ.get(BUNDLE_ENV)
    if chosen:
        root = Path(chosen).expanduser()
        if not (root / "core.yaml").is_file():
            how = "" if path else f" (from ${BUNDLE_ENV})"
            raise BundleError(f"{root}{how}: not an eval bundle (no core.yaml)")
        return root
    return download_bundle()


def cached_bundle() -> Path:
    """Where download_bundle unpacks the bundle by default."""
    return Path(cache_dir()) / "eval_bundle"


def download_bundle(dest: Path | None = None, url: str | None = None, retries: int = 3) -> Path:
    """Download and unpack the bundle once; a file lock keeps concurrent processes from racing."""
    from filelock import FileLock  # lazy: optional dependency

    url = url or BUNDLE_URL
    dest = Path(dest or cached_bundle())
    if (dest / "core.yaml").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        if (dest / "core.yaml").is_file():  # another process finished while we waited
            return dest
        zip_path = dest.parent / "eval_bundle.zip"
        expected = os.environ.get("XSA_EVAL_BUNDLE_SHA256", BUNDLE_SHA256)
        for attempt in range(1, retries + 1):
            try:
                tmp = zip_path.with_suffix(".zip.part")
                urllib.request.urlretrieve(url, tmp)
                os.replace(tmp, zip_path)
                break
            except OSError as e:
                if attempt == retries:
                    raise BundleError(
                        f"could not download the eval bundle from {url} ({e}). It is needed to build the training "
                        f"corpus as well as to evaluate: the corpus build removes every text that overlaps the "
                        f"evaluation tasks (decontamination). Point {BUNDLE_ENV} at a local copy (the unzipped "
                        f"eval_bundle folder), e.g. {BUNDLE_ENV}=/path/to/eval_bundle make paper") from e
                time.sleep(2 ** attempt)
        got = sha256_file(zip_path)
        if got != expected:
            raise BundleError(f"{zip_path}: sha256 {got} != expected {expected}")
        staging = dest.parent / "eval_bundle.unpacking"
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(staging)
        # the zip holds a top-level eval_bundle/ folder; accept a flat zip too
        inner = next(p.parent for p in staging.rglob("core.yaml"))
        os.replace(inner, dest)
        shutil.rmtree(staging, ignore_errors=True)
        zip_path.unlink()
    return dest


# -----------------------------------------------------------------------------
# Reading

def read_baselines(path: Path) -> dict[str, float]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    try:
        return {row["Eval Task"]: float(row["Random baseline"]) for row in rows}
    except (KeyError, ValueError) as e:
        raise BundleError(f"{path}: expected columns 'Eval Task' and numeric 'Random baseline' ({e})") from None


def load_bundle(root) -> Bundle:
    """Parse core.yaml + baselines. Task files are not read here; absent ones go to `missing`."""
    root = Path(root)
    config_path = root / "core.yaml"
    try:
        tasks_cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))["icl_tasks"]
    except FileNotFoundError:
        raise BundleError(f"{config_path}: no such file") from None
    except (yaml.YAMLError, KeyError, TypeError) as e:
        raise BundleError(f"{config_path}: expected a mapping with 'icl_tasks' ({e})") from None
    baselines = read_baselines(root / "eval_meta_data.csv")
    tasks, missing = [], []
    for t in tasks_cfg:
        label = t["label"]
        if t["icl_task_type"] not in TASK_TYPES:
            raise BundleError(f"{config_path}: task {label!r} has unknown icl_task_type "
                              f"{t['icl_task_type']!r} (expected one of {', '.join(TASK_TYPES)})")
        if label not in baselines:
            raise BundleError(f"{root / 'eval_meta_data.csv'}: no random baseline for task {label!r}")
        path = root / "eval_data" / t["dataset_uri"]
        if not path.is_file():
            missing.append(label)
            continue
        tasks.append(TaskSpec(
            label=label, task_type=t["icl_task_type"], num_fewshot=int(t["num_fewshot"][0]),
            continuation_delimiter=t.get("continuation_delimiter", " "),  # the ICL default
            path=path, baseline=baselines[label]))
    return Bundle(root=root, tasks=tasks, missing=missing)


REQUIRED_KEYS = {
    "multiple_choice": ("query", "choices", "gold"),
    "schema": ("context_options", "continuation", "gold"),
    "language_modeling": ("context", "continuation"),
}


def read_task_file(path, task_type: str | None = None) -> list[dict]:
    """Every record of a JSONL task file; a bad line is an error naming file and line."""
    required = REQUIRED_KEYS.get(task_type, ()) if task_type else ()
    items = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise BundleError(f"{path}:{lineno}: malformed JSON line ({e.msg})") from None
            if not isinstance(record, dict):
                raise BundleError(f"{path}:{lineno}: expected a JSON object")
            absent = [k for k in required if k not in record]
            if absent:
                raise BundleError(f"{path}:{lineno}: {task_type} record lacks {', '.join(absent)}")
            items.append(record)
    return items
