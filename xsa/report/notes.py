"""
What the paper says about its records rather than its results, from the records alone: runs left
out on purpose, and pairs whose two arms were trained on machines the records tell apart.
"""

from __future__ import annotations

from xsa.base.records import cpu_key


def left_out_note(left_out) -> str:
    """The sentence that names the runs left out on purpose ('' when none is)."""
    return f"Left out by choice, so in no number below: {', '.join(left_out)}." if left_out else ""


def machine_warnings(study, runs) -> list[str]:
    """Pairs whose two arms of a seed were trained on machines the records tell apart."""
    out = []
    by = {(r["arm"], r["spec"].seed): r for r in runs if r["provenance"]}
    for p in study.main:
        for (arm, seed), r in sorted(by.items(), key=lambda x: x[0][1]):
            if arm != p.a.name or (p.b.name, seed) not in by:
                continue
            a, b = r["provenance"], by[(p.b.name, seed)]["provenance"]
            ka, kb = cpu_key(a) or a.get("cpu_model"), cpu_key(b) or b.get("cpu_model")
            if ka != kb or a.get("torch_version") != b.get("torch_version"):
                out.append(f"{p.name}, seed {seed}: baseline on {ka} (torch {a.get('torch_version')}), XSA on {kb} "
                           f"(torch {b.get('torch_version')})")
    return out
