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

from xsa.records import read_json
from xsa.stats import mean_ci, relative_differences

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


def _condition(cfg: dict) -> tuple[str, dict]:
    """A label and the table's condition columns, from a recorded config of the earlier stack."""
    m = cfg["model"]
    d, layers, vocab = m["n_embd"], m["n_layer"], m["vocab_size"]
    # nanochat's unit: block matrices (q, k, v, proj and a 4x MLP: 12 d^2 a layer, one kv head per
    # head as these configs record) plus the lm head
    scaling = layers * 12 * d * d + d * vocab
    label = (f"earlier stack, {m['n_head']} heads, width {d}, {layers} layers"
             + (", AdamW only" if cfg.get("optimizer") == "adamw" else ""))
    return label, dict(preset=cfg.get("preset"), heads=m["n_head"], seq_len=m["sequence_len"], layers="all",
                       tokens_per_param=cfg["num_tokens"] / scaling,
                       matrix_lr=(f"{cfg['adamw_matrix_lr']:g} (AdamW)" if cfg.get("optimizer") == "adamw"
                                  else f"{cfg['matrix_lr']:g}"))


def archived_rows(root: Path, commit: str, pairs, seed_effect) -> list[dict]:
    """One row a (baseline arm, XSA arm) pair of the archive at root: XSA minus baseline, relative,
    paired by seed; or, where the archive is missing, one row that says how to restore it."""
    from xsa.report.robust import effect_row, minute, not_run_row
    runs = archived_runs(root)
    family = f"earlier study ({commit})"
    if not runs:
        row = not_run_row(f"earlier study: python -m xsa.archive --commit {commit}", family, "")
        return [{**row, "status": "not restored"}]
    rows = []
    for base, xsa in pairs:
        a, b = runs.get(base, {}), runs.get(xsa, {})
        val = lambda arm: {s: r["summary"]["val_bpb"] for s, r in arm.items()}
        st = mean_ci(relative_differences(val(a), val(b)).values())
        e = dict(n=st["n"], rel_mean=st["mean"], rel_ci=st["ci"], rel_sd=st["sd"])
        label, condition = _condition(next(iter(b.values()))["config"])
        dates = [r["provenance"].get("date", "") for arm in (a, b) for r in arm.values() if r.get("provenance")]
        row = effect_row(label, family, condition, e, len(a.keys() & b.keys()), seed_effect,
                         minute(min(dates)) if dates else None)
        row["status"] = f"archived ({commit})"
        rows.append(row)
    return rows


def earlier_phrase(rows) -> str:
    """The earlier study's rows in a clause: 'the stack of that time, 0.1 tokens per parameter, 3 seeds:
    +0.22% [...] (4 heads, width 256), ...', or '' where the table has none."""
    rows = [r for r in rows if r["family"].startswith("earlier study") and r.get("n")]
    if not rows:
        return ""
    from xsa.report.text import pct, pct_ci
    tpp = ", ".join(sorted({f"{r['tokens_per_param']:.2f}" for r in rows}))
    parts = [f"{pct(r['rel'])} {pct_ci(r['rel_ci95'])} ({r['condition'].removeprefix('earlier stack, ')})" for r in rows]
    return (f"on the stack of that time, at {tpp} tokens per parameter in nanochat's unit and "
            f"{max(r['n'] for r in rows)} seeds: XSA changed val bpb by {'; '.join(parts)}")
