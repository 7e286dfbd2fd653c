"""Horovod: DistributedOptimizer (gradient all-reduce, accumulation via backward_passes_per_step)
and broadcasts of the initial weights and optimizer state; launched by horovodrun or mpirun."""

from __future__ import annotations

import time

import torch

from invfold.components.train.strategies.base import SchedulerFactory, TorchStateStrategy, make_optimizer


def _hvd():
    import horovod.torch as hvd

    return hvd


class HorovodStrategy(TorchStateStrategy):
    replicated_grads = True

    def wrap(self, model: torch.nn.Module, scheduler_factory: SchedulerFactory) -> None:
        hvd = _hvd()
        self.model = model.to(self.info.device)
        base = make_optimizer(self.model, self.cfg)
        self.optimizer = hvd.DistributedOptimizer(
            base,
            named_parameters=self.model.named_parameters(),
            backward_passes_per_step=self.cfg.grad_accum,
            op=hvd.Average,
        )
        self.scheduler = scheduler_factory(self.optimizer)
        self._synchronized = False  # the gradient all-reduce of this step has been waited for
        self._broadcast_state()
        self._sync = 0.0

    def _broadcast_state(self) -> None:
        hvd = _hvd()
        hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)

    @property
    def module(self) -> torch.nn.Module:
        return self.model

    def _synchronize(self) -> None:
        """Finish the gradient all-reduce (once per step: a second call would start another)."""
        if not self._synchronized:
            started = time.perf_counter()
            self.optimizer.synchronize()
            self._sync += time.perf_counter() - started
            self._synchronized = True

    def local_grads_finite(self) -> bool:
        self._synchronize()  # the all-reduce writes the gradients in place
        return super().local_grads_finite()

    def step(self, skip: bool = False) -> float:
        self._synchronize()  # finish the gradient all-reduce before clipping
        self._synchronized = False
        if skip:
            self.optimizer.zero_grad()
            return float("nan")
        norm = self._clip()
        with self.optimizer.skip_synchronize():
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()  # Horovod's override takes no arguments
        return norm

    def sync_seconds(self) -> float:
        """Backward only queues the all-reduces (Horovod runs them in its background thread);
        synchronize() is where this rank waits for them."""
        seconds, self._sync = self._sync, 0.0
        return seconds

    def load(self, directory: str) -> dict:
        state = super().load(directory)
        self._broadcast_state()  # every rank read the same file; keep them provably identical
        return state

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        hvd = _hvd()
        return hvd.allreduce(tensor, op=hvd.Sum if op == "sum" else hvd.Max)

    def start_all_reduce_sum(self, tensor: torch.Tensor):
        """Horovod runs a collective only at its next cycle (HOROVOD_CYCLE_TIME): one started
        before the gradients are waited for travels in their cycle instead of the one after."""
        hvd = _hvd()
        # a fixed name lets Horovod's response cache skip the full negotiation every step
        handle = hvd.allreduce_async(tensor, op=hvd.Sum, name="invfold.agreement")
        return lambda: hvd.synchronize(handle)

    def all_gather_object(self, obj) -> list:
        return _hvd().allgather_object(obj)

    def barrier(self) -> None:
        _hvd().barrier()
