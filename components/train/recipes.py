"""Named training recipes: the one place a default of a training run is written.

A recipe is the TrainConfig fields it sets on top of the trainer's own defaults (as torchtitan's
named configs), plus the processes it runs on. `invfold train --recipe` and `invfold run` start
from the same one (`DEFAULT`); the pipeline's parameter defaults (pipelines/defaults.py), the
quality gate and the benches read theirs from here, so a knob such as `warmup_steps` is restated
nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from types import MappingProxyType
from typing import Any

from invfold.components.train.config import TrainConfig
from invfold.errors import ConfigError


@dataclass(frozen=True)
class Recipe:
    name: str
    summary: str  # one line for --help: what it is for
    settings: Mapping[str, Any] = field(default_factory=dict)  # TrainConfig field -> value
    procs_per_node: int = 2

    def __post_init__(self):
        known = {f.name for f in fields(TrainConfig)}
        unknown = sorted(set(self.settings) - known)
        if unknown:
            raise ConfigError(f"recipe {self.name!r}: {unknown} are not TrainConfig fields")
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))

    def values(self) -> dict[str, Any]:
        """Every TrainConfig field with a default, as this recipe sets it."""
        return {**trainer_defaults(), **self.settings}

    def config(self, **fields_given: Any) -> TrainConfig:
        """A TrainConfig of this recipe; `fields_given` (data, out, and anything the caller sets) win."""
        return TrainConfig(**{**self.settings, **fields_given})


def trainer_defaults() -> dict[str, Any]:
    """TrainConfig's own field defaults (what the recipe `full` runs)."""
    out = {}
    for f in fields(TrainConfig):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


# The bundled sample on 2 CPU processes in minutes: the small preset (the default one-shot
# architecture shrunk: hidden 64, 4 encoder layers, k = 16), batches that keep both processes busy
# on short chains, and a warm-up short enough for a few hundred steps.
CPU_DEMO = Recipe(
    "cpu_demo",
    "the bundled sample on 2 CPU processes in a few minutes (small preset, 180 s budget)",
    {"preset": "small", "tokens_per_batch": 1500, "warmup_steps": 30, "time_budget_s": 180.0},
)
# The quality gate: cpu_demo bounded by optimizer steps instead of seconds, so what it trains
# (and the recovery it reaches) does not depend on how busy the machine is.
QUALITY_GATE = Recipe(
    "quality_gate",
    "cpu_demo bounded by steps (120), not seconds: the same model on a busy or an idle machine",
    {**CPU_DEMO.settings, "time_budget_s": None, "max_steps": 120},
)
FULL = Recipe("full", "the trainer's own defaults: default preset, no budget (set --epochs or --max-steps)")

RECIPES: dict[str, Recipe] = {r.name: r for r in (CPU_DEMO, QUALITY_GATE, FULL)}
DEFAULT = CPU_DEMO.name

# Fine-tuning (--init-from) on top of any recipe, where the user sets neither: a lower peak and a
# short warm-up, so the first steps do not undo what the published weights already know.
FINE_TUNE = MappingProxyType({"lr": 3e-4, "warmup_steps": 20})


def fine_tuning(settings: Mapping[str, Any], given: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """`settings` with FINE_TUNE's values for the fields the user did not give."""
    return {**settings, **{k: v for k, v in FINE_TUNE.items() if k not in given}}


def recipe(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise ConfigError(f"unknown recipe {name!r}: expected one of {', '.join(RECIPES)}") from None


def help_text() -> str:
    """The --recipe help of `invfold train`, `run` and `submit`: each recipe in a line."""
    lines = [f"{r.name}: {r.summary}" for r in RECIPES.values()]
    return f"training recipe (default {DEFAULT}) - " + "; ".join(lines)
