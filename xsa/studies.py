"""
The studies, as data: which runs (preset, arm, seed) a study trains, and how each stage is run.

A study is what `python -m xsa.pipeline --study NAME` executes. Nothing here runs anything; the
pipeline reads these tables, the training notebook builds its config with `Run.config()`, and the
report groups records by the fields of `Run`.

- smoke:   the whole pipeline in a few minutes at the smoke preset (tests, CI).
- default: the CPU-scale study (two CPU presets with a 2:1 depth ratio, seeds, an alpha sweep, a
           layer ablation, the plain-value variant and an AdamW-only control). Not d12/d24.
- gpu:     the seed paper's depths d12 and d24, both arms, for a GPU server.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from xsa.config import PRESETS, TrainConfig, make_config


@dataclass(frozen=True)
class Run:
    """One training run: a preset, an arm (the XSA and optimizer settings) and a seed."""
    preset: str
    alpha: float = 0.0  # 0: the baseline, standard attention (no XSA code runs)
    xsa_layers: str = "all"  # where XSA runs when alpha > 0
    xsa_value: str = "mixed"
    optimizer: str = "muon"
    seed: int = 0
    max_steps: int | None = None  # a cap below the preset's horizon (None: the full horizon)

    @property
    def arm(self) -> str:
        """The run id without the seed: what seeds are averaged over."""
        parts = [self.preset]
        if self.optimizer != "muon":
            parts.append(self.optimizer)
        if self.alpha == 0:
            parts.append("base")  # alpha = 0 is the baseline whatever the layer spec says
        else:
            xsa = f"xsa{float(self.alpha):g}"
            if self.xsa_layers != "all":
                xsa += "-" + self.xsa_layers.replace(":", "").replace(",", "+")
            if self.xsa_value != "mixed":
                xsa += "-" + self.xsa_value
            parts.append(xsa)
        return "_".join(parts)

    @property
    def run_id(self) -> str:
        """Readable and unique per (preset, arm, seed), e.g. cpu-d4_xsa1_s0, cpu-d4_adamw_base_s2."""
        return f"{self.arm}_s{self.seed}"

    def config(self) -> TrainConfig:
        if self.alpha == 0:  # the baseline: xsa_layers "none", so not even a zero-strength formula runs
            return make_config(self.preset, optimizer=self.optimizer, seed=self.seed)
        return make_config(self.preset, xsa_alpha=float(self.alpha), xsa_layers=self.xsa_layers,
                           xsa_value=self.xsa_value, optimizer=self.optimizer, seed=self.seed)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Study:
    name: str
    scale: str  # said plainly in the paper: "smoke scale", "CPU scale", "GPU scale"
    runs: tuple[Run, ...]
    main_presets: tuple[str, ...]  # the depth pair of the main table (smaller first)
    validation: dict = field(default_factory=dict)  # parameters of 00_validation
    evaluate: dict = field(default_factory=dict)  # parameters of 02_evaluate (all runs)
    chat_arms: tuple[str, ...] = ()  # arms whose runs also get SFT + ChatCORE
    diagnostics: dict = field(default_factory=dict)  # parameters of 03_diagnostics
    throughput: dict = field(default_factory=dict)  # parameters of 04_throughput, per preset

    def presets(self) -> list[str]:
        return sorted({r.preset for r in self.runs}, key=list(PRESETS).index)

    def data_subsets(self) -> list[str]:
        return sorted({PRESETS[p]["data"] for p in self.presets()})


def _unique(runs) -> tuple[Run, ...]:
    """Drop repeated runs (alpha 0 of the sweep is the baseline), keeping the first order."""
    seen, out = set(), []
    for r in runs:
        if r.run_id not in seen:
            seen.add(r.run_id)
            out.append(r)
    return tuple(out)


def _pair(preset, seeds, optimizer="muon"):
    """Baseline and XSA (alpha 1, every layer) for each seed; the two arms of a seed share data order."""
    return [Run(preset, alpha, optimizer=optimizer, seed=s) for s in seeds for alpha in (0.0, 1.0)]


def _half(preset) -> str:
    return f"last:{PRESETS[preset]['model']['n_layer'] // 2}"


def _smoke() -> Study:
    return Study(
        name="smoke", scale="smoke scale (a 2-layer toy; tests the pipeline, says nothing about XSA)",
        runs=_unique(_pair("smoke", [0])), main_presets=("smoke",),
        evaluate=dict(max_per_task=4, sft_steps=10), chat_arms=("smoke_base", "smoke_xsa1"),
        diagnostics=dict(), throughput=dict(presets=["smoke"], steps=4),
    )


def _default() -> Study:
    small, large = "cpu-d4", "cpu-d8"
    runs = _pair(small, range(3)) + _pair(large, range(3))
    runs += [Run(small, a, seed=s) for a in (0.0, 0.25, 0.5, 0.75, 1.0) for s in range(2)]  # alpha sweep
    runs += [Run(small, 1.0, xsa_layers=_half(small), seed=s) for s in range(2)]  # XSA on the last half only
    runs += [Run(small, 1.0, xsa_value="plain", seed=s) for s in range(2)]  # project against c_v(x) alone
    runs += _pair(small, range(3), optimizer="adamw")  # the AdamW-only control
    main = [f"{p}_{a}" for p in (small, large) for a in ("base", "xsa1")]
    return Study(
        name="default", scale="CPU scale (2-core CPU, fp32; not the seed paper's d12/d24)",
        runs=_unique(runs), main_presets=(small, large),
        # sized to fit a 2-core CPU in a few hours (README, "The default study"): CORE and ChatCORE
        # on a fixed 10 items per task, a short SFT, a one-thread A/B benchmark (larger preset
        # first, so the two shards of `make paper` get one slow and one fast job)
        evaluate=dict(max_per_task=10, sft_steps=8), chat_arms=tuple(main),
        throughput=dict(presets=[large, small], steps=10, warmup=2, threads=1),
    )


def _gpu() -> Study:
    runs = _pair("d12", [0]) + _pair("d24", [0])
    return Study(
        name="gpu", scale="GPU scale (the seed paper's d12 and d24 on ClimbMix)",
        runs=_unique(runs), main_presets=("d12", "d24"),
        evaluate=dict(max_per_task=None, sft_steps=300), chat_arms=("d12_base", "d12_xsa1", "d24_base", "d24_xsa1"),
        throughput=dict(presets=["d12", "d24"], steps=50),
    )


STUDIES = {"smoke": _smoke, "default": _default, "gpu": _gpu}


def get_study(name: str) -> Study:
    if name not in STUDIES:
        raise ValueError(f"study: unknown study {name!r} (choose from {', '.join(STUDIES)})")
    return STUDIES[name]()
