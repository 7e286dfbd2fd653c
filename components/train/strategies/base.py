"""One interface for the three ways of training on several processes.

The trainer only ever calls these methods; it never touches torch.distributed, Horovod or
DeepSpeed itself. A strategy owns the wrapped model and optimizer (and, for DeepSpeed, the
scheduler), the collectives the loop needs (scalar all-reduce, object all-gather, barrier), and
the on-disk form of its checkpoints, including how they become one fp32 state dict.
"""

from __future__ import annotations

import contextlib
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable

import torch

from invfold.components.train import checkpoint as ckpt
from invfold.components.train.config import TrainConfig
from invfold.components.train.distributed import DistInfo

STATE_FILE = "state.pt"
SchedulerFactory = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW without weight decay on biases and norm weights (1-d tensors), as is usual."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.98), eps=1e-9)


def params_digest(module: torch.nn.Module) -> str:
    """sha256 over every parameter's fp32 bytes: equal digests mean bitwise-equal weights."""
    h = hashlib.sha256()
    for name, p in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


class TorchCollectives:
    """The loop's collectives over torch.distributed (DDP and DeepSpeed share the process group)."""

    info: DistInfo

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        import torch.distributed as dist

        ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
        on_device = tensor.to(self.info.device)  # NCCL reduces GPU tensors only
        dist.all_reduce(on_device, op=ops[op])
        return on_device.cpu()

    def all_gather_object(self, obj) -> list:
        import torch.distributed as dist

        out = [None] * self.info.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()


class Strategy(ABC):
    # True where every rank holds the same all-reduced gradients after the exchange, so every
    # rank judges their finiteness alike without a vote (DDP, Horovod; not ZeRO's partitions)
    replicated_grads = False

    def __init__(self, cfg: TrainConfig, info: DistInfo):
        self.cfg, self.info = cfg, info

    @abstractmethod
    def wrap(self, model: torch.nn.Module, scheduler_factory: SchedulerFactory) -> None:
        """Build the optimizer and scheduler for `model` and wrap all three for training."""

    @property
    @abstractmethod
    def module(self) -> torch.nn.Module:
        """The bare model (its state dict has the model's own keys)."""

    @abstractmethod
    def forward(self, *inputs) -> torch.Tensor: ...

    def accumulating(self, sync: bool):
        """Context for one micro-batch's forward and backward; sync=False on all but the last
        micro-batch of a step lets a strategy skip the gradient all-reduce."""
        return contextlib.nullcontext()

    @abstractmethod
    def backward(self, loss: torch.Tensor) -> None: ...

    def sync_seconds(self) -> float:
        """Seconds this rank spent blocked in the gradient exchange inside backward() and step()
        since the last call (waiting for slower ranks plus the transfer itself); 0 where the
        strategy cannot tell it apart from compute."""
        return 0.0

    @abstractmethod
    def step(self, skip: bool = False) -> float:
        """Clip, step optimizer and scheduler, zero gradients; returns the gradient norm.
        skip=True (every rank together, after a non-finite loss or gradient somewhere): drop the
        gradients and leave weights, optimizer state and schedule untouched; returns NaN."""

    def local_grads_finite(self) -> bool:
        """Whether this rank's gradients (those it holds after backward) are all finite."""
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        return not grads or bool(torch.isfinite(torch.stack(torch._foreach_norm(grads))).all())

    @abstractmethod
    def current_lr(self) -> float: ...

    @abstractmethod
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """op "sum" or "max"; returns the reduced tensor (same on every rank)."""

    def start_all_reduce_sum(self, tensor: torch.Tensor) -> Callable[[], torch.Tensor]:
        """Start a SUM all-reduce and return the function that waits for its result. Horovod
        starts it in the background, so it joins the gradients' pending exchange; elsewhere it
        runs now."""
        reduced = self.all_reduce(tensor, "sum")
        return lambda: reduced

    @abstractmethod
    def all_gather_object(self, obj) -> list: ...

    @abstractmethod
    def barrier(self) -> None: ...

    @abstractmethod
    def save(self, directory: str, trainer_state: dict) -> None:
        """Collective: write this strategy's files into `directory` (not the marker)."""

    @abstractmethod
    def load(self, directory: str) -> dict:
        """Collective: restore model/optimizer/scheduler; returns the saved trainer_state."""

    @abstractmethod
    def fp32_state_dict(self, directory: str) -> dict[str, torch.Tensor]:
        """Rank 0: the complete model in fp32 from a saved checkpoint folder."""

    def eval_module(self) -> torch.nn.Module:
        """A model with complete fp32 weights that runs without collectives (validation)."""
        return self.module

    def params_digest(self) -> str:
        return params_digest(self.module)

    def close(self) -> None:  # noqa: B027 - an optional hook; a strategy with nothing to drop keeps it
        """Drop references to engines/wrappers before the process group goes."""


class TorchStateStrategy(Strategy):
    """Shared by DDP and Horovod: replicated weights, so rank 0 writes one unsharded state.pt."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler

    def current_lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def forward(self, *inputs) -> torch.Tensor:
        bf16 = self.cfg.precision == "bf16"
        with torch.autocast(self.info.device.type, dtype=torch.bfloat16, enabled=bf16):
            return self.model(*inputs)

    def backward(self, loss: torch.Tensor) -> None:
        (loss / self.cfg.grad_accum).backward()

    def _clip(self) -> float:
        params = [p for p in self.module.parameters() if p.grad is not None]
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))

    def save(self, directory: str, trainer_state: dict) -> None:
        if self.info.is_main:
            ckpt.save_torch(
                {
                    "model": self.module.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "trainer": trainer_state,
                },
                f"{directory}/{STATE_FILE}",
            )

    def load(self, directory: str) -> dict:
        state = ckpt.load_torch(f"{directory}/{STATE_FILE}")
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        return state["trainer"]

    def fp32_state_dict(self, directory: str) -> dict[str, torch.Tensor]:
        state = ckpt.load_torch(f"{directory}/{STATE_FILE}")["model"]
        return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
