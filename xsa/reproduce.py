"""
Re-derive a committed number: retrain one run from scratch and compare it with its record.

    python -m xsa.reproduce --run cpu-w64-d4_base_s0          # make reproduce RUN=cpu-w64-d4_base_s0

Reads results/runs/<run id>/{config,summary,provenance}.json, checks that the data on this machine is
the data the run read (the fingerprint of its manifest), retrains the same config from step 0 with
the thread count the record used, in a temporary folder (the committed record is never touched),
and compares the final val bpb and the sha256 of the final weights. The comparison is written to
results/reproduce/<run id>.json. Exit status 0 when both match, 1 when either differs, 2 on bad input.

What to expect: on the machine kind of the record (CPU model, torch, numpy and thread count in
provenance.json) the weights match bit for bit, since training is deterministic given (config, seed,
data, threads). Elsewhere (another CPU's kernels, another torch) expect equal val bpb to about 1e-3
and different weight hashes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from xsa.records import REPO_ROOT, atomic_write_json, cpu_model, read_json, software_versions


def reproduce(run_dir: Path, out: Path, data_dir=None, progress: bool = True) -> dict:
    """Retrain the run of run_dir and compare (see the module docstring); returns the comparison."""
    import torch

    from xsa.checkpoint import run_data_dir
    from xsa.config import RECORD_EXTRAS, dict_hash
    from xsa.spec import Run, config_from_record
    from xsa.train import data_fingerprint, train

    record = read_json(run_dir / "config.json")
    summary, prov = read_json(run_dir / "summary.json"), read_json(run_dir / "provenance.json")
    # the file is the one that was trained (its hash as written), then read by value: fields it
    # predates at their defaults, so today's code retrains the same run
    written = dict_hash({k: v for k, v in record.items() if k not in RECORD_EXTRAS})
    if written != prov.get("config_hash"):
        raise ValueError(f"{run_dir}: config.json hashes to {written}, the record says {prov.get('config_hash')}")
    cfg = config_from_record(record, str(run_dir / "config.json"))
    data = Path(data_dir) if data_dir else run_data_dir(record.get("data_dir"), cfg.data)
    from xsa.data import ensure_data
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
    atomic_write_json(out, result)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xsa.reproduce", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a run id under results/runs (or a run folder)")
    p.add_argument("--results", default=str(REPO_ROOT / "results"), help="results folder (default: results/)")
    p.add_argument("--data-dir", default=None, help="the built data folder (default: the run's, else the cache's)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    run_dir = Path(args.run) if Path(args.run).is_dir() else Path(args.results) / "runs" / args.run
    for name in ("config.json", "summary.json", "provenance.json"):
        if not (run_dir / name).is_file():
            p.error(f"--run {args.run}: {run_dir / name} not found (a finished, committed run is needed)")
    out = Path(args.results) / "reproduce" / f"{run_dir.name}.json"
    try:
        r = reproduce(run_dir, out, args.data_dir, progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as e:
        p.error(str(e))
    print(f"{r['run']}: val bpb recorded {r['recorded']['val_bpb']:.6f}, reproduced {r['reproduced']['val_bpb']:.6f} "
          f"(|diff| {r['val_bpb_abs_diff']:.2e}); final weights {'match' if r['weights_match'] else 'DIFFER'} "
          f"bit for bit -> {out}")
    return 0 if r["weights_match"] and r["val_bpb_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
