"""PyTorch DistributedDataParallel (gloo on CPU, NCCL on GPU), launched by torchrun."""

from __future__ import annotations

import time

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from invfold.components.train.strategies.base import (
    SchedulerFactory,
    TorchCollectives,
    TorchStateStrategy,
    make_optimizer,
)


class DDPStrategy(TorchCollectives, TorchStateStrategy):
    replicated_grads = True

    def wrap(self, model: torch.nn.Module, scheduler_factory: SchedulerFactory) -> None:
        model = model.to(self.info.device)
        device_ids = [self.info.device.index] if self.info.device.type == "cuda" else None
        # every parameter is used in every step; static_graph lets DDP skip the unused-param search
        self.model = DistributedDataParallel(model, device_ids=device_ids, static_graph=True)
        self.model.register_comm_hook(None, self._timed_allreduce)
        self._last_bucket_ready: float | None = None
        self._sync = 0.0
        self.optimizer = make_optimizer(model, self.cfg)
        self.scheduler = scheduler_factory(self.optimizer)

    @property
    def module(self) -> torch.nn.Module:
        return self.model.module

    def _timed_allreduce(self, state, bucket):
        """DDP's own all-reduce hook (average over ranks), noting when the bucket's gradients
        were ready: after the last bucket, this rank's backward has nothing left to compute."""
        self._last_bucket_ready = time.perf_counter()
        return default_hooks.allreduce_hook(state, bucket)

    def backward(self, loss: torch.Tensor) -> None:
        self._last_bucket_ready = None
        super().backward(loss)
        if self._last_bucket_ready is not None:  # backward returns once every bucket is reduced
            self._sync += time.perf_counter() - self._last_bucket_ready

    def sync_seconds(self) -> float:
        seconds, self._sync = self._sync, 0.0
        return seconds

    def accumulating(self, sync: bool):
        return super().accumulating(sync) if sync else self.model.no_sync()

    def step(self, skip: bool = False) -> float:
        if skip:
            self.optimizer.zero_grad(set_to_none=True)
            return float("nan")
        norm = self._clip()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm
