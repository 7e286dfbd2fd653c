"""What every rank of a TrainJob runs (the launcher's command names this module):

    torchrun --module invfold.components.launch.trainjob_entry --config-json JSON --output URI

Writes the TrainConfig to a local file, runs the per-rank training entry (train/rank_entry.py), and on success rank 0
copies the output folder (model.pt, metrics.jsonl, summary.json, tensorboard/) to URI, from
where the pipeline step fetches it. Checkpoints are not copied: they already live at the
config's checkpoint_dir.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from invfold import storage
from invfold.components.train import rank_entry
from invfold.components.train.config import TrainConfig
from invfold.components.train.distributed import launcher_ranks

log = logging.getLogger(__name__)


def upload(out: str, uri: str) -> None:
    """Checkpoints already live at their own (remote) location; the rest goes to `uri`."""

    storage.upload_folder(out, uri, skip_top=("checkpoints",))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-json", required=True, help="TrainConfig as a JSON object")
    parser.add_argument("--output", required=True, help="URI the output folder is copied to")
    args = parser.parse_args(argv)

    cfg = TrainConfig.from_dict(json.loads(args.config_json), source="--config-json")
    rank = launcher_ranks()[0]
    os.makedirs(cfg.out, exist_ok=True)
    config_path = os.path.join(cfg.out, f"train_config.rank{rank}.json")
    cfg.to_json(config_path)
    code = rank_entry.main(["--config", config_path])
    if code == 0 and rank == 0:
        upload(cfg.out, args.output)
        log.info("outputs copied to %s", args.output)
    return code


if __name__ == "__main__":
    sys.exit(main())
