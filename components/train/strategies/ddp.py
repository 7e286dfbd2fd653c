"""PyTorch DistributedDataParallel (gloo on CPU, NCCL on GPU), launched by torchrun."""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from .base import SchedulerFactory, TorchCollectives, TorchStateStrategy, make_optimizer


class DDPStrategy(TorchCollectives, TorchStateStrategy):
    def wrap(self, model: torch.nn.Module, scheduler_factory: SchedulerFactory) -> None:
        model = model.to(self.info.device)
        device_ids = [self.info.device.index] if self.info.device.type == "cuda" else None
        # every parameter is used in every step; static_graph lets DDP skip the unused-param search
        self.model = DistributedDataParallel(model, device_ids=device_ids, static_graph=True)
        self.optimizer = make_optimizer(model, self.cfg)
        self.scheduler = scheduler_factory(self.optimizer)

    @property
    def module(self) -> torch.nn.Module:
        return self.model.module

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
