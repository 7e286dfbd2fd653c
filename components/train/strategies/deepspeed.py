"""DeepSpeed: ZeRO stages 0-3 with a config generated from TrainConfig.

Precision: bf16 uses DeepSpeed's `torch_autocast` section (fp32 master weights, bf16 matmuls,
bf16 gradient communication for linear layers), not its `bf16` section, which casts the whole
module to bf16: that puts coordinates through the distance features in bf16 (about 0.5 A of
rounding at 100 A) and, on CPU, breaks LayerNorm under autocast (bf16 weights, fp32 input).
Checkpoints: every rank writes its own shard through engine.save_checkpoint into the step folder;
the trainer writes the COMPLETE marker on rank 0 after a barrier.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import time

import torch

from invfold.components.model.network import InverseFoldingModel
from invfold.components.train import checkpoint as ckpt
from invfold.components.train.strategies.base import (
    SchedulerFactory,
    Strategy,
    TorchCollectives,
    make_optimizer,
    params_digest,
)
from invfold.errors import InputError

NEVER_PRINT = 2**31 - 1


def deepspeed_config(cfg, world_size: int) -> dict:
    """The DeepSpeed JSON config for a TrainConfig. Batches are residue budgets, so DeepSpeed's
    "micro batch" is one of our token-budget batches."""
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": cfg.grad_accum,
        "train_batch_size": cfg.grad_accum * world_size,
        "zero_optimization": {"stage": cfg.zero_stage},
        "zero_allow_untested_optimizer": True,  # our AdamW with no-decay groups
        "steps_per_print": NEVER_PRINT,
        "wall_clock_breakdown": False,
    }
    if cfg.grad_clip > 0:
        config["gradient_clipping"] = cfg.grad_clip
    if cfg.precision == "bf16":
        config["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
    return config


def _split(directory: str) -> tuple[str, str]:
    root, tag = directory.rstrip("/").rsplit("/", 1)
    return root.removeprefix("file://"), tag


class DeepSpeedStrategy(TorchCollectives, Strategy):
    def wrap(self, model: torch.nn.Module, scheduler_factory: SchedulerFactory) -> None:
        import deepspeed
        from deepspeed.utils import logger as deepspeed_logger

        deepspeed_logger.setLevel(logging.WARNING)  # its INFO lines repeat per rank and per step
        model = model.to(self.info.device)
        self._base_optimizer = make_optimizer(model, self.cfg)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model,
            optimizer=self._base_optimizer,
            lr_scheduler=scheduler_factory,
            config=deepspeed_config(self.cfg, self.info.world_size),
            dist_init_required=False,
        )
        self._sync = 0.0
        self.engine.allreduce_gradients = self._timed(self.engine.allreduce_gradients)

    def _timed(self, reduce):
        """The engine's end-of-backward gradient reduction (ZeRO-1/2: the reduce-scatter of what
        is left in its buckets; stage 0: the all-reduce), timed as sync."""

        @functools.wraps(reduce)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return reduce(*args, **kwargs)
            finally:
                self._sync += time.perf_counter() - started

        return timed

    def sync_seconds(self) -> float:
        seconds, self._sync = self._sync, 0.0
        return seconds

    @property
    def module(self) -> torch.nn.Module:
        return self.engine.module

    def forward(self, *inputs) -> torch.Tensor:
        return self.engine(*inputs)

    def backward(self, loss: torch.Tensor) -> None:
        # DeepSpeed divides by gradient_accumulation_steps itself and wants engine.step() after
        # every micro-batch; the one at the accumulation boundary (the update) waits for step().
        boundary = self.engine.is_gradient_accumulation_boundary()
        self.engine.backward(loss)
        if not boundary:
            self.engine.step()

    def step(self, skip: bool = False) -> float:
        with self._without_update() if skip else contextlib.nullcontext():
            self.engine.step()
        if skip:
            return float("nan")
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    @contextlib.contextmanager
    def _without_update(self):
        """engine.step() with our optimizer's and scheduler's own step made no-ops: DeepSpeed still
        does its bookkeeping (reduction buffers, zeroed gradients, micro-step count), and the
        weights, Adam moments and schedule stay as they were (with ZeRO >= 1 DeepSpeed itself also
        skips an update whose gradient norm is not finite)."""

        def noop(*args, **kwargs):
            return None

        saved = {id(obj): (obj, obj.__dict__.get("step")) for obj in (self._base_optimizer, self.scheduler)}
        for obj, _ in saved.values():
            obj.step = noop  # an instance attribute; a scheduler may already have put one there
        try:
            yield
        finally:
            for obj, own in saved.values():
                if own is None:
                    del obj.step
                else:
                    obj.step = own

    def current_lr(self) -> float:
        return float(self.engine.get_lr()[0])

    def _gathered(self):
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(self.module.parameters()), enabled=self.cfg.zero_stage == 3)

    def eval_module(self) -> torch.nn.Module:
        with self._gathered():
            state = {k: v.detach().clone().float() for k, v in self.module.state_dict().items()}

        model = InverseFoldingModel(copy.deepcopy(self.module.cfg)).to(self.info.device)
        model.load_state_dict(state)
        return model

    def params_digest(self) -> str:
        with self._gathered():
            return params_digest(self.module)

    def save(self, directory: str, trainer_state: dict) -> None:
        root, tag = _split(directory)
        self.engine.save_checkpoint(root, tag=tag, client_state={"trainer": trainer_state}, save_latest=False)

    def load(self, directory: str) -> dict:
        root, tag = _split(directory)
        with ckpt.safe_loading(directory):
            path, client_state = self.engine.load_checkpoint(root, tag=tag)
        if path is None:
            raise InputError(directory, None, None, "a DeepSpeed checkpoint this run can load", "none loaded")
        return client_state["trainer"]

    def fp32_state_dict(self, directory: str) -> dict[str, torch.Tensor]:
        root, tag = _split(directory)
        if self.cfg.zero_stage == 0:
            state = ckpt.load_torch(f"{root}/{tag}/mp_rank_00_model_states.pt")["module"]
        else:
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            with ckpt.safe_loading(directory):
                state = get_fp32_state_dict_from_zero_checkpoint(root, tag=tag)
        return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}

    def close(self) -> None:
        self.engine.destroy()
        del self.engine, self.optimizer, self.scheduler
