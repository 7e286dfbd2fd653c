"""TrainConfig: every option of a training run, validated before any process starts.

The same JSON file drives every rank (`rank_entry --config`), locally and on a cluster.
"""

from __future__ import annotations

import dataclasses
import dataclasses as dc
import json
from dataclasses import dataclass
from typing import Any, Literal

from invfold.components.model.config import PRESETS, ModelConfig
from invfold.components.protein.sampler import BALANCE_MODES
from invfold.components.train.strategies import STRATEGIES
from invfold.errors import ConfigError
from invfold.options import check_values, config_from_dict, option

# model fields a fine-tuning run may change; the rest must match the initial weights
FINE_TUNE_OVERRIDES = ("dropout", "activation_checkpointing")


def _one_of(names) -> str:
    """ "a, b or c"."""
    names = list(names)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


@dataclass
class TrainConfig:
    """Options of `train`.

    data: a prepared folder (prep output; path or URI). train_dataset / validation_dataset: names
        in it (validation None or absent from the data: no validation).
    out: local folder for model.pt, metrics.jsonl, tensorboard/, summary.json and logs.
    checkpoint_dir: where checkpoints go (default `out`/checkpoints); may be an fsspec URI
        (object storage) for ddp and horovod; DeepSpeed writes local files only.
    preset / model_overrides: ModelConfig.preset(preset, **model_overrides).
    init_from: start from these weights instead of random ones (fine-tuning): a model file (path
        or URI) or a published name such as "proteinmpnn:v_48_020". The architecture is the
        initial model's (preset ignored); model_overrides may change only FINE_TUNE_OVERRIDES.
        A checkpoint to resume from wins over init_from.
    freeze_encoder: with init_from, train only the decoder and read-out (the edge/node embeddings
        and encoder layers keep the initial weights).
    tokens_per_batch: padded-residue budget of one micro-batch on one process.
    balance: how each step's batches are made alike across ranks (sampler.py): "interleaved"
        (dealt from one length-sorted run: same rows, neighbouring lengths) or "pairs" (packed
        alone, then paired by padded size; the earlier scheme).
    max_steps / epochs: optimizer steps or passes over the data (one of them; max_steps wins).
    schedule: "noam" (linear warm-up to lr, then lr * sqrt(warmup / step)); "one_cycle" (linear
        warm-up, then cosine to 0 at the last step; needs the step count up front).
    backbone_noise: std (Angstrom) of Gaussian noise added to coordinates at train time.
    grad_clip: max global gradient norm (0 = no clipping).
    validate_every / checkpoint_every / log_every: in optimizer steps (0 = only at the end).
    time_budget_s: wall seconds for the whole job, counted from the start of the process that
        launched it (`invfold train`, the pipeline's train step; a TrainJob pod: its own start),
        so start-up, data and model loading, resume, validations and checkpoints count. The loop
        stops (checkpoint, model.pt, exit 0) when the time left is no more than what the rest
        needs: one more step, the final validation, checkpoint and model.pt (as last timed in
        the run, else estimated) and the exit (train/budget.py). Not bounded: the first step
        always runs, and a machine that slows down after the stop overruns by the difference.
    cpu_time_budget_s: the same, counted in CPU seconds of each training process (all its
        threads; the ranks stop together when the first reaches it): a budget that a loaded
        machine does not shrink.
    max_nonfinite_steps: a step whose loss or gradient is NaN/inf on any rank is skipped on every
        rank (counted in metrics); this many such steps in a row fail the job (nothing is saved).
    The default recipe (default preset, lr 2e-3, noise 0.1 A, short warm-up) learns fast on CPU.

    Marked on the fields (options.option): `pipeline`, a parameter of the pipeline and of its train
    step (scripts/generate_signatures.py writes them); group "deciding", what the run a person
    opens first records (train/record.py); group "resume", what a checkpoint resumes only under
    (trainer.py).
    """

    data: str = option(help="prepared folder (invfold prep output; path or URI)")
    out: str = option(help="output folder (local)")
    train_dataset: str = option("train", "dataset of the prepared folder to train on", groups=("resume",))
    validation_dataset: str | None = option("validation", "dataset to validate on (absent from the data: none)")
    checkpoint_dir: str | None = option(None, "default OUT/checkpoints; may be a URI (ddp, horovod)")
    preset: str = option(
        "default",
        "model preset",
        choices=tuple(PRESETS),
        pipeline=": small (quick CPU demo), default (a deeper ProteinMPNN-style encoder with extra geometric "
        "features, one-shot), proteinmpnn (ProteinMPNN's network, autoregressive) or tiny; ignored with init_from",
        groups=("deciding",),
    )
    model_overrides: dict[str, Any] = option(
        factory=dict,
        aliases=("--model",),
        metavar="NAME=VALUE",
        help="model config fields that override the preset (repeatable: --model-overrides hidden=64)",
        pipeline=', e.g. {"hidden": 64}; {} for the preset as is (with init_from only dropout and '
        "activation_checkpointing)",
        groups=("deciding",),
    )
    init_from: str | None = option(
        None,
        "fine-tune from these weights: a model file/URI or published ProteinMPNN weights (e.g. "
        "proteinmpnn:v_48_020; `invfold weights list` names them); the architecture is theirs",
        metavar="MODEL",
        pipeline="; empty to train from scratch. The result is registered only if its validation recovery "
        "beats these weights' on the same validation data. Pair it with the fine-tuning recipe (lr 3e-4, "
        "warmup_steps 20: what `invfold run --init-from` passes unless --lr/--warmup-steps are given; "
        "components/train/recipes.py)",
        groups=("deciding", "resume"),
    )
    freeze_encoder: bool = option(
        False,
        "with init_from, train only the decoder and read-out",
        pipeline=" (the encoder keeps the initial weights)",
        groups=("deciding", "resume"),
    )
    strategy: str = option(
        "ddp", "distributed training strategy", choices=STRATEGIES, pipeline=": " + _one_of(STRATEGIES)
    )
    zero_stage: Literal[0, 1, 2, 3] = option(
        0, "DeepSpeed ZeRO stage", pipeline=" 0-3 (deepspeed only)", groups=("deciding",)
    )
    precision: Literal["fp32", "bf16"] = option(
        "fp32",
        "numeric precision: fp32, or bf16 autocast where the device supports it",
        pipeline=True,
        groups=("deciding", "resume"),
    )
    tokens_per_batch: int = option(
        3000,
        "residue budget per process and step",
        min=1,
        pipeline=" (length-bucketed batches)",
        groups=("deciding", "resume"),
    )
    pool_batches: int = option(50, "batches the sampler packs at once", min=1, groups=("resume",))
    balance: str = option(
        "interleaved",
        "how each step's batches are made alike across ranks",
        choices=BALANCE_MODES,
        groups=("resume",),
    )
    max_steps: int | None = option(
        None, "optimizer steps to train for", min=1, pipeline=" (0 = not limited by steps)", groups=("deciding",)
    )
    epochs: int | None = option(
        None, "passes over the training data", min=1, pipeline=" (0 = not limited by epochs)", groups=("deciding",)
    )
    lr: float = option(
        2e-3,
        "peak learning rate (AdamW, warm-up, then the schedule)",
        above=0,
        max=1.0,
        pipeline=True,
        groups=("deciding", "resume"),
    )
    warmup_steps: int = option(50, "learning-rate warm-up steps", min=0, pipeline=True, groups=("deciding", "resume"))
    schedule: Literal["noam", "one_cycle"] = option(
        "noam", "learning-rate schedule after the warm-up", groups=("deciding", "resume")
    )
    weight_decay: float = option(0.01, "AdamW weight decay", min=0.0, max=1.0, groups=("resume",))
    label_smoothing: float = option(0.1, "label smoothing of the loss", min=0.0, below=1, groups=("resume",))
    # 10 A moves atoms past their neighbours: no backbone is left to learn from (design's bound too)
    backbone_noise: float = option(
        0.1, "std of the Gaussian noise added to coordinates, in Angstrom", min=0.0, max=10.0, groups=("resume",)
    )
    grad_clip: float = option(1.0, "max global gradient norm (0: no clipping)", min=0.0, groups=("resume",))
    grad_accum: int = option(1, "micro-batches per optimizer step", min=1, groups=("resume",))
    activation_checkpointing: bool = option(False, "recompute activations in backward (less memory)")
    validate_every: int = option(100, "optimizer steps between validations (0: only at the end)", min=0)
    checkpoint_every: int = option(100, "optimizer steps between checkpoints (0: only at the end)", min=0)
    keep_checkpoints: int = option(2, "newest complete checkpoints kept", min=1)
    log_every: int = option(10, "optimizer steps between metric lines", min=0)
    seed: int = option(0, "random seed of the whole run", min=0, pipeline=True, groups=("deciding", "resume"))
    threads: int = option(1, "CPU threads per process", min=1, pipeline=True)
    resume: bool = option(True, "resume from the newest complete checkpoint (--no-resume: ignore them)")
    time_budget_s: float | None = option(
        None,
        "wall seconds for the whole job, counted from this command's start (imports, data and model loading, "
        "validations, checkpoints included): training stops early enough that the final checkpoint, "
        "validation and model.pt fit, by the run's own timings of them (an estimate: the first step always "
        "runs, and a machine that slows down after the stop overruns by that much); a cluster TrainJob "
        "counts from its pods' start, not their scheduling",
        aliases=("--time-budget",),
        metavar="SECONDS",
        above=0,
        pipeline="; here its clock starts with the train step (0 = no budget)",
        groups=("deciding",),
    )
    cpu_time_budget_s: float | None = option(
        None,
        "stop (and save) after this many CPU seconds of each training process",
        aliases=("--cpu-time-budget",),
        metavar="SECONDS",
        above=0,
        groups=("deciding",),
    )
    dist_timeout_s: float = option(600.0, "seconds a collective may wait for the other ranks", above=0)
    max_nonfinite_steps: int = option(
        10, "fail after this many steps in a row with a NaN/inf loss or gradient (each is skipped)", min=1
    )

    def __post_init__(self) -> None:
        self.data, self.out = str(self.data), str(self.out)
        if not self.data or not self.out:
            raise ConfigError("TrainConfig.data and TrainConfig.out must be given")
        if "://" in self.out and not self.out.startswith("file://"):
            raise ConfigError(
                f"TrainConfig.out: expected a local folder, got {self.out!r} (use checkpoint_dir for object storage)"
            )
        self.out = self.out.removeprefix("file://")
        if self.checkpoint_dir is None:
            self.checkpoint_dir = f"{self.out.rstrip('/')}/checkpoints"
        self.checkpoint_dir = str(self.checkpoint_dir).rstrip("/")
        check_values(self)
        if not isinstance(self.model_overrides, dict):
            raise ConfigError(f"TrainConfig.model_overrides: expected a dict, got {self.model_overrides!r}")
        if self.init_from is not None:
            self.init_from = str(self.init_from)
            if not self.init_from:
                self.init_from = None
        if self.init_from is not None:
            fixed = sorted(set(self.model_overrides) - set(FINE_TUNE_OVERRIDES))
            if fixed:
                raise ConfigError(
                    f"TrainConfig.model_overrides: {fixed} cannot change when fine-tuning from "
                    f"{self.init_from!r} (its architecture is kept); only {list(FINE_TUNE_OVERRIDES)} can"
                )
        if self.freeze_encoder and self.init_from is None:
            raise ConfigError("TrainConfig.freeze_encoder: needs init_from (a random encoder would stay random)")
        spec = STRATEGIES[self.strategy]
        if self.zero_stage not in spec.zero_stages:
            able = [s.name for s in STRATEGIES.values() if self.zero_stage in s.zero_stages]
            raise ConfigError(
                f"TrainConfig.zero_stage={self.zero_stage} needs strategy {' or '.join(map(repr, able))}, "
                f"got {self.strategy!r}"
            )
        if (
            not spec.remote_checkpoints
            and "://" in self.checkpoint_dir
            and not self.checkpoint_dir.startswith("file://")
        ):
            raise ConfigError(
                f"TrainConfig.checkpoint_dir: {self.strategy} writes checkpoints as local files; "
                f"got {self.checkpoint_dir!r} (use a mounted volume)"
            )
        if (
            self.max_steps is None
            and self.epochs is None
            and self.time_budget_s is None
            and self.cpu_time_budget_s is None
        ):
            raise ConfigError("TrainConfig: give max_steps, epochs, time_budget_s or cpu_time_budget_s")
        if self.schedule == "one_cycle" and self.max_steps is None and self.epochs is None:
            raise ConfigError(
                "TrainConfig.schedule 'one_cycle' needs max_steps or epochs (its cosine ends at the last step)"
            )

    def model_config(self, initial=None):
        """The model's config: the preset with overrides, or (fine-tuning) the initial model's."""

        overrides = dict(self.model_overrides)
        if self.activation_checkpointing:
            overrides["activation_checkpointing"] = True
        if initial is not None:
            return dc.replace(initial, **overrides)
        return ModelConfig.preset(self.preset, **overrides)

    def initial_model(self):
        """The model init_from names (eval mode), or None."""
        if self.init_from is None:
            return None

        from invfold.components.model.io import load_model_or_published

        return load_model_or_published(self.init_from)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, path: str) -> None:
        with open(path, "w") as fh:
            json.dump(self.to_dict(), fh, indent=2, sort_keys=True)
            fh.write("\n")

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> TrainConfig:
        return config_from_dict(cls, data, source)

    @classmethod
    def from_json(cls, path: str) -> TrainConfig:
        with open(path) as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError as err:
                raise ConfigError(f"{path}: line {err.lineno}: invalid JSON: {err.msg}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object of TrainConfig fields")
        return cls.from_dict(data, source=path)


def preset_of(model_cfg: ModelConfig) -> str:
    """The preset a model's architecture is (fields a fine-tuning run may change ignored): what
    a fine-tuned run records as its preset, e.g. "proteinmpnn" for ProteinMPNN's published
    weights whatever `preset` said; "custom" when no preset matches."""
    return model_cfg.preset_name(ignore=FINE_TUNE_OVERRIDES) or "custom"
