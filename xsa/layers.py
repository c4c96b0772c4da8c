"""
The package's floors, lowest first. A wing is a folder of `xsa/` (stack, runs, ...); a top-level module
(`xsa/train.py`) is a wing of its own, and so is a wing's command line (`xsa/data/__main__.py`, named
"data.__main__"): a command reads the wings, no wing reads a command. A module imports modules of its own
wing or of a wing on a lower floor, never one on its floor or above (imports inside functions count), so
the wings' import graph has no cycle. tests/test_wings.py checks it, with the other house rules in
tests/test_house_rules.py (no module-level import circle, module and function sizes, imports at the top
of a module unless a comment says why not).

Every wing is on a floor: a new folder or top-level module is placed here when it is added.
"""

from __future__ import annotations

FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # what every wing imports and that imports nothing of ours: records, run locks, statistics, devices
    # (the root package holds only its docstring; this file holds only data)
    ("ground", ("xsa", "layers", "base")),
    # the model and how it trains: configs, presets, a run's spec, the model, the step, checkpoints
    ("stack", ("stack",)),
    # the training data: sources, the tokenizer, shards, the loader
    ("data", ("data",)),
    # run folders: their paths, their log on resume, a diverged run, a trained folder loaded back, the plots
    ("runs", ("runs",)),
    # the stages that write records beside training, and restoring an earlier study's records
    ("stages", ("validation", "diagnostics", "throughput", "memory", "against", "archive")),
    # training (it runs the diagnostics on its evaluations)
    ("training", ("train",)),
    # repeating a committed run from its record
    ("reproduction", ("reproduce",)),
    # scoring trained runs: CORE, the chat evaluations, decode speed (checked against validation)
    ("evaluation", ("evaluate",)),
    # the GPU path's parts and a study's price on GPUs
    ("gpu", ("gpu",)),
    # the studies as data, their rules, analyses and registrations, and the jobs over their runs
    ("studies", ("studies",)),
    # the record checks: every record's schema, a run folder checked whole, the record set a paper is
    # built from, an adaptive study's ledger, and the records read back with the metrics they hold
    ("checks", ("checks",)),
    # the estimate books: every number the paper states, computed once from checked records and written
    # to results/estimates/<study>.json with the verdicts decided from them
    ("books", ("books",)),
    # the paper: tables, figures, claims and sentences from the books, the build and its export
    ("report", ("report",)),
    # the commands
    ("commands", ("prereg", "gpu_check", "data.__main__", "evaluate.__main__")),
    ("pipeline", ("pipeline", "gpu_study")),
)


def wing_of(module: str) -> str:
    """The wing of a dotted module name: its folder under the root package ("xsa.stack.model" ->
    "stack"), a top-level module's own name, "<folder>.__main__" for a folder's command line, and the
    root package's name for the root package itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return parts[0]
    return f"{parts[1]}.__main__" if parts[-1] == "__main__" and len(parts) > 2 else parts[1]


def floor_of(module: str, floors=FLOORS) -> int | None:
    """The index of the floor of `module`'s wing (0 is the lowest), None when its wing is on none."""
    wing = wing_of(module)
    return next((i for i, (_, wings) in enumerate(floors) if wing in wings), None)
