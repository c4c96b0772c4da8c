"""
The package's layers, lowest first: a module imports modules of its own layer or of a layer below,
never of a layer above, and no chain of imports comes back to where it started (imports inside
functions count). tests/test_house_rules.py checks both, with the other house rules (module and
function sizes, imports at the top of a module unless a comment says why not).

A name ending in ".*" stands for every module of that package; a module in no layer is an error, so
a new module is placed here when it is added.
"""

from __future__ import annotations

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # records on disk, hashing, paths, statistics, the figure style, run locks, the loss and bpb
    # (the wings' packages themselves hold only their docstrings)
    ("foundation", ("xsa", "xsa.stack", "xsa.runs", "xsa.studies", "xsa.gpu", "xsa.layers", "xsa.runs.records",
                    "xsa.stack.common", "xsa.stats", "xsa.runs.plot", "xsa.runs.runlock", "xsa.runs.diverged",
                    "xsa.archive",
                    "xsa.stack.loss", "xsa.stack.bpb")),
    # every field of a run's config, its checks and the recipes
    ("configuration", ("xsa.stack.config",)),
    # the presets and make_config
    ("presets", ("xsa.stack.presets",)),
    # one run: its name, its config and its output paths
    ("runs", ("xsa.stack.spec", "xsa.runs.layout")),
    # the model and its attention, the optimizer, one training step, the loop's bookkeeping, checkpoints, a
    # run folder's checks, loading a trained run folder, the data
    ("compute", ("xsa.stack.model", "xsa.stack.attention", "xsa.stack.kvcache", "xsa.stack.optim", "xsa.stack.step",
                 "xsa.stack.timers", "xsa.stack.checkpoint", "xsa.runs.runlog", "xsa.runs.load", "xsa.data",
                 "xsa.data.*")),
    # the kinds of study and comparison, and the rules of an adaptive study
    ("study kinds", ("xsa.studies.kinds", "xsa.studies.rules")),
    # the studies as data
    ("studies", ("xsa.studies.registry", "xsa.studies.scale", "xsa.factorial", "xsa.factorial.design",
                 "xsa.studies.sink", "xsa.studies.optimizer")),
    # the scale study's model and prediction, read from run records (pre-registered with it)
    ("analysis", ("xsa.studies.predict",)),
    # the stages that write run records, and the checks and benchmarks beside them
    ("stages", ("xsa.train", "xsa.evaluate", "xsa.evaluate.*", "xsa.diagnostics", "xsa.throughput",
                "xsa.validation", "xsa.against", "xsa.gpu_check", "xsa.gpu.parts", "xsa.gpu.cost", "xsa.memory",
                "xsa.reproduce", "xsa.data.__main__")),
    # tables, figures, claims and sentences, read from run records
    ("report", ("xsa.report", "xsa.report.*", "xsa.factorial.analysis", "xsa.factorial.models",
                "xsa.factorial.steps", "xsa.factorial.d12", "xsa.studies.sink_analysis",
                "xsa.studies.optimizer_analysis")),
    # a study's pre-registration (its power analysis reads the pilot's records)
    ("pre-registration", ("xsa.prereg", "xsa.studies.prereg_scale", "xsa.studies.prereg_check",
                          "xsa.factorial.prereg", "xsa.studies.sink_prereg", "xsa.studies.optimizer_prereg")),
    # the paper's export and its checks
    ("paper", ("xsa.report.export", "xsa.report.paper_checks")),
    # the pipeline over the stage notebooks and its jobs
    ("pipeline", ("xsa.runs.jobs", "xsa.pipeline", "xsa.gpu_study")),
)


def _matches(module: str, pattern: str) -> bool:
    return module.startswith(pattern[:-1]) if pattern.endswith(".*") else module == pattern


def layer_of(module: str, layers=LAYERS) -> int | None:
    """The index of the layer `module` belongs to (0 is the lowest), None when it is in none; a module
    named exactly wins over a package's ".*" (the data package's command line sits above the data)."""
    for exact in (True, False):
        for i, (_, patterns) in enumerate(layers):
            if any(module == p if exact else _matches(module, p) for p in patterns):
                return i
    return None
