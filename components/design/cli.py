"""`invfold design MODEL STRUCTURE --out designs.fasta ...` (one record), or
`invfold design MODEL STRUCTURES --out designs/ | designs.jsonl ...` (a batch)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

# the subcommands this module adds, with their line in `invfold --help` (listed without building them)
COMMANDS = {
    "design": "sample sequences for backbones with a trained model",
}

# examples at the end of each subcommand's --help (real commands, as the README runs them)
EXAMPLES = {
    "design": (
        "invfold design model.pt 1abc.cif --chain A -n 8 -T 0.1 --out designs.fasta",
        "invfold design model.pt structures/ -T 0.1,0.2 -n 4 --out designs/   # one FASTA per structure",
        "invfold design proteinmpnn:v_48_020 complex.pdb --design-chains A --omit-aa C --out d.fasta",
        "invfold design models:/invfold-inverse-folding@champion 1abc.cif --chain A --out d.fasta --tracking-uri URI",
    ),
}


def add_parser(subparsers) -> None:
    from invfold.components.design.config import DesignConfig
    from invfold.components.tracking.tracker import CommandTracking
    from invfold.options import add_command

    add_command(
        subparsers,
        "design",
        run,
        DesignConfig,
        CommandTracking,
        help=COMMANDS["design"],
        description="Sample sequences for one protein chain with a model checkpoint (.pt) or an "
        "exported ONNX model (.onnx); write FASTA with each sequence's mean NLL and its recovery "
        "of the native sequence. Batch: STRUCTURE a folder of PDB/mmCIF files, a chain-set jsonl or "
        "a text list of structure paths (*.txt, one per line) with --out FOLDER (one FASTA per "
        "structure) or --out designs.jsonl (one line per design); records that cannot be designed "
        "are skipped and counted by reason in summary.json. Several temperatures: -T 0.1,0.2.",
    )


def run(args: argparse.Namespace) -> int:
    from invfold import storage
    from invfold.components.design.config import DesignConfig
    from invfold.components.model.reference import check_model, resolve_model
    from invfold.components.tracking.tracker import CommandTracking
    from invfold.errors import ConfigError
    from invfold.options import from_args

    # every input judged before torch is imported: a mistake costs a fraction of a second
    cfg = from_args(DesignConfig, args)
    tracking = from_args(CommandTracking, args)
    context = tracking.context()  # --experiment with nowhere to record: refused first
    check_model(cfg.model)
    storage.require_local(cfg.structure, "an existing structure file or folder")
    constraints = (cfg.fixed_positions_json, cfg.tied_positions, cfg.bias_aa, cfg.bias_by_res, cfg.omit_aa_jsonl,
                   cfg.pssm_jsonl)  # fmt: skip
    for constraint in (*constraints, cfg.chain_id_jsonl):
        storage.require_local(constraint, "an existing JSON file")
    to_stdout = cfg.out == "-"  # the FASTA on stdout (one record), what was done on stderr
    if to_stdout:
        cfg.out = os.path.join(tempfile.mkdtemp(prefix="invfold-design-"), "designs.fasta")
    report = sys.stderr if to_stdout else sys.stdout
    from invfold.components.design.batch import is_batch

    if cfg.chain_id_jsonl:  # ProteinMPNN's file form of --design-chains, for the one structure designed
        if is_batch(cfg):
            raise ConfigError("--chain-id-jsonl: designs one structure (--out x.fasta); a batch takes --design-chains")
        from invfold.components.design.constraints import designed_chains

        cfg.design_chains = designed_chains(cfg.chain_id_jsonl, cfg.name)
    if to_stdout and is_batch(cfg):
        raise ConfigError(f"--out -: FASTA on stdout is for one record; {cfg.structure} holds several (--out FOLDER)")
    if (cfg.save_probs or cfg.save_score or cfg.fasta_layout != "invfold") and (
        to_stdout or cfg.out.lower().endswith(".jsonl")
    ):
        what = "--save-probs" if cfg.save_probs else "--save-score" if cfg.save_score else "--fasta-layout"
        what = f"{what} {cfg.fasta_layout}" if what == "--fasta-layout" else what
        raise ConfigError(
            f"{what}: writes FASTA files (and the probabilities beside them): --out x.fasta or a folder, "
            f"not {'stdout' if to_stdout else 'a .jsonl'}"
        )
    if is_batch(cfg) and cfg.out_structure:
        raise ConfigError(
            f"--out-structure {cfg.out_structure}: structures are written for one record (--out x.fasta with one "
            "structure), not in batch mode"
        )
    cfg.model = resolve_model(cfg.model, tracking.tracking_uri)
    if context is None:
        return _design(cfg, args, to_stdout, report)
    from invfold.components.tracking import Tracker

    with Tracker(context, "design", params=dataclasses.asdict(cfg)) as tracker:
        code = _design(cfg, args, to_stdout, report)
        tracker.log_metrics(args.figures)
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
    return code


def _design(cfg, args: argparse.Namespace, to_stdout: bool, report) -> int:
    """Design and print what was written; args.result is the --json answer, args.figures what a
    tracked run records (the design pipeline's figures)."""
    import statistics

    from invfold.components.design.batch import design_batch, is_batch
    from invfold.components.design.design import design

    if is_batch(cfg):
        summary = design_batch(cfg)
        print(f"designed {summary.designs} sequences for {summary.designed} records in {summary.seconds:.1f} s")
        if summary.skipped:
            counts = ", ".join(f"{reason} {n}" for reason, n in sorted(summary.skip_counts.items()))
            print(f"skipped {len(summary.skipped)} records ({counts}); see the summary")
        print(f"wrote {cfg.out} (summary: {summary.path})")
        args.result = {"out": cfg.out, "summary": str(summary.path), "designs": summary.designs}
        args.result |= {"records": summary.designed, "skipped": len(summary.skipped)}
        args.figures = {"designs": summary.designs, "structures_designed": summary.designed}
        args.figures["skipped"] = len(summary.skipped)
        return 0
    designs = design(cfg)
    for d in designs:
        line = f"{d.name} sample {d.index} T={d.temperature:g}: mean NLL {d.mean_nll:.3f}, recovery {d.recovery:.3f}"
        print(line, file=report)
    keys = ("name", "index", "seed", "temperature", "sequence", "mean_nll", "recovery")
    args.result = {"out": "-" if to_stdout else cfg.out, "designs": [{k: getattr(d, k) for k in keys} for d in designs]}
    args.figures = {
        "designs": len(designs),
        "structures_designed": 1,
        "skipped": 0,
        "mean_recovery": statistics.fmean(d.recovery for d in designs),
        "mean_design_nll": statistics.fmean(d.mean_nll for d in designs),
    }
    if to_stdout:
        with open(cfg.out) as fh:
            sys.stdout.write(fh.read())
        return 0
    print(f"wrote {len(designs)} sequences to {cfg.out}")
    return 0
