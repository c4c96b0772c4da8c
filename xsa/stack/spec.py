"""
One run, named once: a preset, the overrides that make its arm, and a seed.

    run = Run.of("cpu-w64-d4", seed=0, xsa_alpha=1.0)    # cpu-w64-d4_xsa1_s0
    cfg = run.config()                              # the TrainConfig it trains
    Run.from_config(cfg) == run                     # the config diffed against its preset

Overrides are kept in canonical form: exactly the fields where the run's config differs from what
its preset (and recipe) gives, sorted by name. Two spellings of the same run (`xsa_alpha=1` alone,
or with `xsa_layers="all"`) are therefore one Run, with one name and one folder, and a config read
back from disk gives back the Run that trained it. Every stage (the study, the pipeline, notebook
01, `python -m xsa.train`, the report) names runs through `Run.run_id`.

An Arm is a Run without its seed: what seeds are averaged over and what comparisons pair up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from xsa.stack.config import ARM_LABELS, XSA_FIELDS, ConfigError, GPTConfig, TrainConfig, optional_fields
from xsa.stack.presets import make_config

# fields that never make an arm: the preset names the run's base, the seed is its own part
_NOT_OVERRIDES = {"preset", "model", "seed"}
# short names of fields in run ids (others appear under their own name)
ALIASES = {"matrix_lr": "mlr", "embedding_lr": "elr", "unembedding_lr": "ulr", "sequence_len": "seq",
           "num_tokens": "tok", "weight_decay": "wd", "n_head": "h", "n_kv_head": "kvh", "n_embd": "w",
           "diag_every": "diag", "loss_chunk": "lchunk", "recipe": ""}
# switches named by a word when on (cpu_compile: on -> "compiled")
WORDS = {"cpu_compile": "compiled"}


def _flat(cfg: TrainConfig) -> dict[str, Any]:
    """Model and training fields in one JSON-normal dict (the names make_config accepts)."""
    d = cfg.to_dict()
    model = d.pop("model")
    return {**{k: v for k, v in d.items() if k not in _NOT_OVERRIDES}, **model}


def _canonical(preset: str, config: TrainConfig) -> tuple[tuple[str, Any], ...]:
    # against the preset at the run's own recipe: another recipe is one override (its name), not the
    # dozens of fields it sets
    base, mine = _flat(make_config(preset, seed=config.seed, recipe=config.recipe)), _flat(config)
    diff = {k: v for k, v in mine.items() if base.get(k) != v}
    if config.recipe != make_config(preset).recipe:
        diff["recipe"] = config.recipe
    if "xsa_layers" in diff:  # make_config reads layers without alpha as alpha 1: keep alpha explicit
        diff["xsa_alpha"] = mine["xsa_alpha"]
    return tuple(sorted(diff.items()))


def _label(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).replace(":", "").replace(",", "+").replace(" ", "")


def arm_name(preset: str, overrides: dict, model: GPTConfig) -> str:
    """The one naming rule: preset, optimizer if not the preset's, the attention arm, other overrides.

    The attention arm is `base` (standard attention) or `{variant}{alpha}` (`xsa` unless another
    variant of config.XSA_VARIANTS runs) with the layer spec and the value mode appended where they
    are not the defaults (e.g. xsa1, xsa0, xsa1-last2, xsa1-plain).
    """
    rest = dict(overrides)
    parts = [preset]
    if "optimizer" in rest:
        parts.append(str(rest.pop("optimizer")))
    for key in XSA_FIELDS:
        rest.pop(key, None)
    if not model.xsa_layer_set():
        label = "base"
    else:
        label = f"{model.xsa_variant}{model.xsa_alpha:g}"  # xsa1, or another variant's name
        if model.xsa_layers != "all":
            label += "-" + _label(model.xsa_layers)
        if model.xsa_value != "mixed":
            label += "-" + model.xsa_value
        if model.xsa_gate:
            label += "-gate"
    for field, word in ARM_LABELS.items():  # the other ways to attend to nothing (base-attngate, xsa1-sink)
        if getattr(model, field):
            label += f"-{word}"
    for key, value in sorted(rest.items()):
        label += f"-{WORDS[key]}" if value is True and key in WORDS else f"-{ALIASES.get(key, key)}{_label(value)}"
    parts.append(label)
    return "_".join(parts)


@dataclass(frozen=True)
class Arm:
    """A preset and its canonical overrides: a run without its seed."""
    preset: str
    overrides: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, preset: str, **overrides) -> "Arm":
        return Run.of(preset, seed=0, **overrides).arm

    def config(self, seed: int = 0) -> TrainConfig:
        return make_config(self.preset, seed=seed, **dict(self.overrides))

    def run(self, seed: int) -> "Run":
        return Run(self.preset, self.overrides, seed)

    def runs(self, seeds) -> list["Run"]:
        return [self.run(s) for s in seeds]

    def with_(self, **overrides) -> "Arm":
        """This arm with more overrides (canonicalised again: an override back to the preset's
        value drops out)."""
        return Arm.of(self.preset, **{**dict(self.overrides), **overrides})

    def with_xsa(self) -> "Arm":
        """This arm with XSA at alpha 1 on every layer: the XSA arm of every study's main pair."""
        return self.with_(xsa_alpha=1.0, xsa_layers="all")

    def get(self, name: str):
        """The value of a config field (model or training) in this arm."""
        return _flat(self.config())[name]

    @property
    def name(self) -> str:
        return arm_name(self.preset, dict(self.overrides), self.config().model)


@dataclass(frozen=True)
class Run:
    """One training run: (preset, overrides, seed). Construct with Run.of (canonical overrides)."""
    preset: str
    overrides: tuple[tuple[str, Any], ...] = ()
    seed: int = 0

    @classmethod
    def of(cls, preset: str, seed: int = 0, **overrides) -> "Run":
        return cls.from_config(make_config(preset, seed=seed, **overrides))

    @classmethod
    def from_config(cls, config: TrainConfig) -> "Run":
        """The inverse of config(): the config diffed against its preset."""
        return cls(config.preset, _canonical(config.preset, config), config.seed)

    @classmethod
    def from_dict(cls, d: dict) -> "Run":
        """From the JSON form (what the pipeline hands notebook 01): {preset, overrides, seed}."""
        try:
            return cls.of(d["preset"], seed=d.get("seed", 0), **dict(d.get("overrides") or {}))
        except (KeyError, TypeError) as e:
            raise ConfigError(f"run: expected {{preset, overrides, seed}}, got {d!r} ({e})") from None

    def to_dict(self) -> dict:
        return {"preset": self.preset, "overrides": dict(self.overrides), "seed": self.seed}

    def config(self) -> TrainConfig:
        return make_config(self.preset, seed=self.seed, **dict(self.overrides))

    @property
    def arm(self) -> Arm:
        return Arm(self.preset, self.overrides)

    @property
    def run_id(self) -> str:
        """Readable and unique per (preset, overrides, seed), e.g. cpu-w64-d4_xsa1_s0, cpu-w64-d4_adamw_base_s2."""
        return f"{self.arm.name}_s{self.seed}"

    def __str__(self) -> str:
        return self.run_id

    def command(self) -> str:
        """The command that trains this run by hand (its folder: results/runs/<run id>)."""
        sets = "".join(f" --set {k}={format_value(v)}" for k, v in self.overrides)
        return f"python -m xsa.train --preset {self.preset}{sets} --seed {self.seed}"


def arm_record(config: TrainConfig) -> dict:
    """A run's arm in full, for its records: the arm's name (the run id without the seed), the
    overrides it sets on its preset, and every attention field (variant and gate included)."""
    arm = Run.from_config(config).arm
    return {"arm": arm.name, "overrides": dict(arm.overrides), **{k: getattr(config.model, k) for k in XSA_FIELDS}}


def parse_overrides(pairs: list[str], flag: str = "--set") -> dict:
    """FIELD=VALUE strings (a command line's --set) -> {field: value}, each value read as JSON where
    it parses (true, 512, 0.5) and as a string otherwise (all, last:2)."""
    out = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise ValueError(f"{flag}: expected FIELD=VALUE, got {pair!r}")
        if name in out:
            raise ValueError(f"{flag} {name}=...: given twice; give it once")
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
        if out[name] is None and name not in optional_fields():
            raise ValueError(f"{flag} {name}=null: {name} takes no null (only "
                             f"{', '.join(sorted(optional_fields()))} do); give a value, or leave it out for the "
                             "preset's")
    return out


def format_value(value) -> str:
    """A field's value as parse_overrides reads it back."""
    return value if isinstance(value, str) and not _is_json(value) else json.dumps(value, separators=(",", ":"))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True

