"""The per-process entry every rank runs, locally and in the cluster images:

    python -m invfold.components.train.rank_entry --config train_config.json

under torchrun (ddp, deepspeed), horovodrun or mpirun (horovod, deepspeed). Exit status: 0 when
training finished (or its time budget ran out), 143 after SIGTERM with a checkpoint written, 3 when
a run of non-finite steps stopped training (nothing saved).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from invfold.components.train.config import TrainConfig
from invfold.components.train.distributed import setup, teardown
from invfold.components.train.trainer import EXIT_DIVERGED, NonFiniteTrainingError, train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="TrainConfig as JSON")
    args = parser.parse_args(argv)

    cfg = TrainConfig.from_json(args.config)
    info = setup(cfg.strategy, cfg.dist_timeout_s, trace_dir=os.path.join(cfg.out, "nccl-traces"))
    logging.basicConfig(
        level=logging.INFO if info.is_main else logging.WARNING,
        format=f"%(asctime)s rank{info.rank} %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        force=True,
    )
    # An exception leaves without teardown: a barrier would wait for ranks that may never come;
    # the launcher stops the others when this process exits non-zero.
    try:
        result = train(cfg, info)
    except NonFiniteTrainingError as err:  # every rank raises at the same step: no traceback needed
        if info.is_main:
            logging.getLogger("invfold.train").error("training failed: %s", err)
        teardown(info)
        return EXIT_DIVERGED
    teardown(info)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
