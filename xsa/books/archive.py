"""
An earlier study's rows of the robustness table, computed from its archived records
(results/archive/<commit>/runs/, restored from git history by `python -m xsa.archive`).

The records are of the stack of that time, so they are read as plain data: the arm is the run
folder's name without its seed, val bpb the summary's, the condition (heads, width, layers,
optimizer, tokens) the recorded config's. Pairs are matched by seed, as every pair of today's
studies.
"""

from __future__ import annotations

import re
from pathlib import Path

from xsa.base.records import read_json

_SEED = re.compile(r"^(?P<arm>.+)_s(?P<seed>\d+)$")


def archived_runs(root: Path) -> dict[str, dict[int, dict]]:
    """{arm: {seed: {"config", "summary", "provenance"}}} of the finished runs under root/runs."""
    out: dict[str, dict[int, dict]] = {}
    for d in sorted((Path(root) / "runs").glob("*")):
        m = _SEED.match(d.name)
        if not m or not (d / "summary.json").exists():
            continue
        rec = {name: read_json(d / f"{name}.json") for name in ("config", "summary", "provenance")
               if (d / f"{name}.json").exists()}
        if rec["summary"].get("complete") and rec["summary"].get("val_bpb") is not None:
            out.setdefault(m["arm"], {})[int(m["seed"])] = rec
    return out


def archived_list(root: Path) -> list[dict]:
    """Every finished run of the archive as {"id", "summary"}, in run-id order (for the list of runs)."""
    return [dict(id=f"{arm}_s{seed}", summary=rec["summary"]) for arm, seeds in sorted(archived_runs(root).items())
            for seed, rec in sorted(seeds.items())]


def condition(cfg: dict) -> tuple[str, dict]:
    """A label and the table's condition columns, from a recorded config of the earlier stack."""
    m = cfg["model"]
    d, layers, vocab = m["n_embd"], m["n_layer"], m["vocab_size"]
    # nanochat's unit: block matrices (q, k, v, proj and a 4x MLP: 12 d^2 a layer, one kv head per
    # head as these configs record) plus the lm head
    scaling = layers * 12 * d * d + d * vocab
    label = (f"earlier: {m['n_head']} heads, w{d}, {layers} layers"
             + (", AdamW" if cfg.get("optimizer") == "adamw" else ""))
    return label, dict(preset=cfg.get("preset"), heads=m["n_head"], seq_len=m["sequence_len"], layers="all",
                       tokens_per_param=cfg["num_tokens"] / scaling,
                       matrix_lr=(f"{cfg['adamw_matrix_lr']:g} (AdamW)" if cfg.get("optimizer") == "adamw"
                                  else f"{cfg['matrix_lr']:g}"))


