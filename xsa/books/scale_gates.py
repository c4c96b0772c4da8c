"""
The learnable gate's levels of the scale study (gate at width 64, gate at 8 heads): the XSA strength each
gate run learned per layer and head (its summary's learned_gates; git keeps no weights), as a map with
an interval over seeds per layer and head, the strength averaged over a run's layers and heads, and
the counts the paper's text states (gates kept above zero, reaching zero, including full XSA).

    rows = gate_map(results, study)           # the map, one row per level, layer and head
    book.update(gate_facts(name, prefix, est)) # what the text reads, keys gate_w64_* and gate_h8_*
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xsa.studies.predict import declared_seeds
from xsa.studies.scale import GATE_H8, GATE_W64
from xsa.base.records import read_json
from xsa.books.estimates import Estimate, fact
from xsa.base.stats import mean_ci

GATES = {GATE_W64: "gate_w64", GATE_H8: "gate_h8"}  # the gate levels, their keys' prefix


def learned_gates(results: Path, study, name: str) -> dict[str, list]:
    """{run id: learned strengths [layer][head]} of each gate run of level `name` with a record, by seed."""
    try:
        pair = study.comparison(name)
    except KeyError:
        return {}
    gates = {}
    for s in sorted(declared_seeds(study, pair)):
        run_id = pair.b.run(s).run_id
        path = results / "runs" / run_id / "summary.json"
        if path.exists() and (g := read_json(path).get("learned_gates")):
            gates[run_id] = g
    return gates


def gate_strength(results: Path, study, name: str) -> dict:
    """A gate level's learned strength averaged over its layers and heads in each run: the mean and 95%
    interval over seeds (0: the gate turned XSA off, 1: full XSA)."""
    gates = learned_gates(results, study, name)
    st = mean_ci(float(np.mean([v for layer in g if layer for v in layer])) for g in gates.values())
    return dict(key=f"{name} strength", value=st["mean"], lo=st["ci"].lo, hi=st["ci"].hi, n=st["n"],
                runs=list(gates))


def gate_map(results: Path, study) -> list[dict]:
    """The learned XSA strength per layer and head of every gate arm: mean and 95% interval over seeds,
    read from each run's summary (learned_gates)."""
    rows = []
    for name in GATES:
        gates = list(learned_gates(results, study, name).values())
        for layer in range(len(gates[0]) if gates else 0):
            for head in range(len(gates[0][layer] or [])):
                st = mean_ci(g[layer][head] for g in gates)
                rows.append(dict(level=name, layer=layer, head=head, n=st["n"], value=st["mean"],
                                 lo=st["ci"].lo, hi=st["ci"].hi))
    return rows


def gate_facts(name: str, prefix: str, est: dict) -> dict[str, Estimate]:
    """What a gate level learned, as the text states it: its strength averaged over layers and heads
    (with its interval over seeds), and how many of its layer-and-head gates have an interval above
    zero (XSA kept), one that includes zero (XSA off, or not told apart from off) and one that includes
    one (full XSA)."""
    g, rows = est[f"{name} strength"], [r for r in est["gate map"] if r["level"] == name]
    runs = tuple(g["runs"])
    book = {f"{prefix}_strength": Estimate(
        f"{prefix}_strength", g["value"], g["lo"], g["hi"], g["n"], unit="strength", metric="", family="descriptive",
        runs=runs, reason="" if g["n"] else "not run", definition=f"{name}: the learned XSA strength averaged over "
        "layers and heads in each gate run, mean and 95% t-interval over seeds (0: no XSA, 1: full XSA)")}
    defined = [r for r in rows if r["lo"] is not None]
    counts = {"heads": (len(rows), "layer-and-head gates of the level"),
              "heads_on": (sum(r["lo"] > 0 for r in defined), "gates whose 95% interval over seeds lies above 0"),
              "heads_off": (sum(r["lo"] <= 0 for r in defined), "gates whose 95% interval over seeds reaches 0"),
              "heads_full": (sum(r["lo"] <= 1 <= r["hi"] for r in defined), "gates whose 95% interval includes 1")}
    for k, (v, what) in counts.items():
        book[f"{prefix}_{k}"] = fact(f"{prefix}_{k}", v, "gates", f"{name}: {what}", family="descriptive", runs=runs)
    for k, pick, what in (("head_lo", min, "lowest"), ("head_hi", max, "highest")):
        v = pick((r["value"] for r in rows), default=None)
        book[f"{prefix}_{k}"] = fact(f"{prefix}_{k}", v, "strength", f"{name}: the {what} mean learned strength "
                                     "of a layer and head", family="descriptive", runs=runs)
    return book


