"""`invfold design MODEL STRUCTURE --out designs.fasta ...` (one record), or
`invfold design MODEL STRUCTURES --out designs/ | designs.jsonl ...` (a batch)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

from invfold import storage
from invfold.errors import ConfigError
from invfold.options import add_command, from_args

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


# exit codes `invfold design` can return (its --help lists these): no training, so no 3 or 143
EXIT_CODES = {"design": (0, 1, 2, 141)}

# protein_mpnn_run.py's flags that have no alias here, and what to type instead (the others are
# aliases on DesignConfig's fields: --num_seq_per_target, --sampling_temp, --omit_AAs, ...)
PROTEINMPNN_SCORING = "use `invfold score MODEL STRUCTURE --fasta designs.fasta --out scores.csv`"
FOREIGN_FLAGS = {
    "design": {
        "--out_folder": "use --out FOLDER (one FASTA per structure; --fasta-layout proteinmpnn for its "
        "seqs/*.fa layout) or --out designs.fasta",
        "--pdb_path": "give the structure as the second argument: invfold design MODEL STRUCTURE --out ...",
        "--jsonl_path": "give the chain set as the second argument: invfold design MODEL chain_set.jsonl --out ...",
        "--pdb_path_chains": "use --design-chains A,B (comma-separated)",
        "--model_name": "give the model as the first argument, e.g. invfold design proteinmpnn:v_48_020 ...",
        "--path_to_model_weights": "give the model as the first argument (a .pt file or proteinmpnn:v_48_020)",
        "--save_probs": "use --save-probs (a switch: no value)",
        "--ca_only": "import the CA-only weights (invfold weights import proteinmpnn-ca:v_48_020 --out ca.pt) "
        "and design with ca.pt",
        "--use_soluble_model": "give proteinmpnn-soluble:v_48_020 as the model",
        "--score_only": PROTEINMPNN_SCORING,
        "--conditional_probs_only": "use invfold score --probs conditional",
        "--unconditional_probs_only": "use invfold score --probs unconditional",
        "--batch_size": "invfold design has no batch size (-n/--num-sequences: sequences per temperature)",
    },
}


def add_parser(subparsers) -> None:
    from invfold.components.design.config import DesignConfig
    from invfold.components.tracking.tracker import CommandTracking

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
    from invfold.components.design.config import DesignConfig
    from invfold.components.model.reference import check_model, resolve
    from invfold.components.tracking.tracker import CommandTracking

    # every input judged before torch is imported: a mistake costs a fraction of a second
    cfg = from_args(DesignConfig, args)
    tracking = from_args(CommandTracking, args)
    context = tracking.context(cfg.model)  # --experiment with nowhere to record: refused first
    check_model(cfg.model)
    storage.require_local(cfg.structure, "an existing structure file or folder")
    from invfold.components.design.option_files import check_option_files

    check_option_files(cfg)  # a malformed file is one error line, not a skip of every record
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
    resolved = resolve(cfg.model, tracking.tracking_uri)  # what the FASTA headers name, and the file
    cfg.model, cfg.model_reference, cfg.model_version = resolved.path, resolved.reference, resolved.version
    if context is None:
        return _design(cfg, args, to_stdout, report)
    from invfold.components.tracking import Tracker

    with Tracker(context, "design", params=dataclasses.asdict(cfg)) as tracker:
        code = _design(cfg, args, to_stdout, report)
        tracker.log_metrics(args.figures)
        out = Path(cfg.out)
        if out.is_dir():  # this run's files only: with --overwrite the folder may hold an earlier run's
            from invfold.components.design.probs import probs_path

            written = [out / name for name in args.written]
            for path in [*written, *(probs_path(p) for p in written), out / "summary.json"]:
                if path.is_file():
                    tracker.log_artifact(path, "designs")
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
        args.written = summary.outputs
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
