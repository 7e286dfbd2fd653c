"""Distributed strategies behind one interface (see base.Strategy)."""

from __future__ import annotations

from invfold.errors import ConfigError


def make_strategy(cfg, info):
    """The Strategy for cfg.strategy; heavy imports (horovod, deepspeed) only when chosen."""
    if cfg.strategy == "ddp":
        from .ddp import DDPStrategy as cls
    elif cfg.strategy == "horovod":
        from .horovod import HorovodStrategy as cls
    elif cfg.strategy == "deepspeed":
        from .deepspeed import DeepSpeedStrategy as cls
    else:
        raise ConfigError(f"unknown strategy {cfg.strategy!r}")
    return cls(cfg, info)
