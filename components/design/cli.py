"""`invfold design MODEL STRUCTURE --out designs.fasta ...` (one record), or
`invfold design MODEL STRUCTURES --out designs/ | designs.jsonl ...` (a batch)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path


def add_parser(subparsers) -> None:
    from invfold.components.design.design import DesignConfig
    from invfold.components.tracking import CommandTracking
    from invfold.options import add_command

    add_command(
        subparsers,
        "design",
        run,
        DesignConfig,
        CommandTracking,
        help="sample sequences for backbones with a trained model",
        description="Sample sequences for one protein chain with a model checkpoint (.pt) or an "
        "exported ONNX model (.onnx); write FASTA with each sequence's mean NLL and its recovery "
        "of the native sequence. Batch: STRUCTURE a folder of PDB/mmCIF files, a chain-set jsonl or "
        "a text list of structure paths (*.txt, one per line) with --out FOLDER (one FASTA per "
        "structure) or --out designs.jsonl (one line per design); records that cannot be designed "
        "are skipped and counted by reason in summary.json. Several temperatures: -T 0.1,0.2.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold.components.design.design import DesignConfig
    from invfold.components.tracking import CommandTracking, Tracker
    from invfold.options import from_args

    cfg = from_args(DesignConfig, args)
    tracking = from_args(CommandTracking, args).context()
    if tracking is None:
        _design(cfg)
        return 0
    with Tracker(tracking, "design", params=dataclasses.asdict(cfg)) as tracker:
        figures = _design(cfg)
        tracker.log_metrics(figures)
        out = Path(cfg.out)
        if out.is_dir():
            tracker.log_artifacts(out, "designs")
        else:
            structures = Path(cfg.out_structure) if cfg.out_structure else None
            written = [structures.parent.glob(f"{structures.stem}*{structures.suffix}")] if structures else []
            for path in [out, out.with_suffix(".summary.json"), *(p for found in written for p in found)]:
                if path.is_file():
                    tracker.log_artifact(path, "designs")
    print(tracker.where(), file=sys.stderr)
    return 0


def _design(cfg) -> dict[str, float]:
    """Design and print what was written; returns the figures the design pipeline records too."""
    import statistics

    from invfold.components.design.batch import design_batch, is_batch
    from invfold.components.design.design import design

    if is_batch(cfg) and cfg.out_structure:
        from invfold.errors import ConfigError

        raise ConfigError(
            f"--out-structure {cfg.out_structure}: structures are written for one record (--out x.fasta with one "
            "structure), not in batch mode"
        )
    if is_batch(cfg):
        summary = design_batch(cfg)
        print(f"designed {summary.designs} sequences for {summary.designed} records in {summary.seconds:.1f} s")
        if summary.skipped:
            counts = ", ".join(f"{reason} {n}" for reason, n in sorted(summary.skip_counts.items()))
            print(f"skipped {len(summary.skipped)} records ({counts}); see the summary")
        print(f"wrote {cfg.out} (summary: {summary.path})")
        return {"designs": summary.designs, "structures_designed": summary.designed, "skipped": len(summary.skipped)}
    designs = design(cfg)
    for d in designs:
        print(f"{d.name} sample {d.index} T={d.temperature:g}: mean NLL {d.mean_nll:.3f}, recovery {d.recovery:.3f}")
    print(f"wrote {len(designs)} sequences to {cfg.out}")
    return {
        "designs": len(designs),
        "structures_designed": 1,
        "skipped": 0,
        "mean_recovery": statistics.fmean(d.recovery for d in designs),
        "mean_design_nll": statistics.fmean(d.mean_nll for d in designs),
    }
