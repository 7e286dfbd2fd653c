"""The dataset card: what prep kept, what it dropped and why, and what the data looks like.

card.json is for programs (MLflow, tests); card.md is the same content for people (the Kubeflow UI
renders it as the prep step's Markdown output).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from invfold.components.protein.alphabet import ALPHABET

HISTOGRAM_WIDTH = 50
CARD_JSON = "card.json"
CARD_MD = "card.md"


class CompositionStats:
    """Running length, residue-composition and missing-coordinate figures over kept chains."""

    def __init__(self):
        self.lengths: list[int] = []
        self.letters = np.zeros(256, dtype=np.int64)
        self.unobserved = 0

    def add(self, seq: str, mask: np.ndarray) -> None:
        self.lengths.append(len(seq))
        self.letters += np.bincount(np.frombuffer(seq.encode("ascii", "replace"), dtype=np.uint8), minlength=256)
        self.unobserved += int(len(mask) - np.count_nonzero(mask))

    def summary(self, max_length: int) -> dict:
        lengths = np.array(self.lengths, dtype=np.int64)
        residues = int(lengths.sum())
        edges = list(range(0, max(max_length, int(lengths.max(initial=0))) + HISTOGRAM_WIDTH, HISTOGRAM_WIDTH))
        counts, _ = np.histogram(lengths, bins=edges)
        return {
            "chains": len(lengths),
            "residues": residues,
            "length": {
                "min": int(lengths.min()) if len(lengths) else 0,
                "median": float(np.median(lengths)) if len(lengths) else 0.0,
                "max": int(lengths.max(initial=0)),
                "histogram": [
                    {"from": int(lo), "to": int(hi), "chains": int(c)}
                    for lo, hi, c in zip(edges[:-1], edges[1:], counts, strict=True)
                ],
            },
            "composition": {a: round(int(self.letters[ord(a)]) / residues, 6) if residues else 0.0 for a in ALPHABET},
            "missing_coordinate_rate": round(self.unobserved / residues, 6) if residues else 0.0,
        }


def write_card(out_dir: Path, card: dict) -> None:
    (out_dir / CARD_JSON).write_text(json.dumps(card, indent=1, sort_keys=True) + "\n")
    (out_dir / CARD_MD).write_text(render_markdown(card))


def render_markdown(card: dict) -> str:
    c = card["counts"]
    lines = [
        "# Dataset card",
        "",
        f"Digest: `{card['digest']}`  ",
        f"Input: `{card['options']['input']}`  ",
        f"Split: {card['split']['method']}" + (f" ({card['split']['tool']})" if card["split"].get("tool") else ""),
        "",
        "## Datasets",
        "",
        "| dataset | chains | residues | median length |",
        "|---|---:|---:|---:|",
    ]
    for name, d in card["datasets"].items():
        lines.append(f"| {name} | {d['chains']} | {d['residues']} | {d['median_length']:g} |")
    lines += [
        "",
        "## Records",
        "",
        f"Read {c['read']} = kept {c['kept']} + skipped {c['skipped']} "
        f"(reader skips {c['reader_skipped']}, filter drops {c['filtered']}).",
        "",
    ]
    dropped = card["dropped"]
    if dropped:
        lines += ["| reason | chains |", "|---|---:|"]
        lines += [f"| {reason} | {n} |" for reason, n in dropped.items()]
        lines.append("")
    absent = {k: v for k, v in card["split"].get("absent_from_set", {}).items() if v}
    if absent:
        lines += [
            "Names in split/subset files but not in the set: " + ", ".join(f"{k} {v}" for k, v in absent.items()),
            "",
        ]
    identity = card["split"].get("highest_train_test_identity")
    if identity and identity["test"]:
        lines += [
            f"Highest train-test identity: {identity['identity']:.3f} "
            f"({identity['test']} vs {identity['train']}, {identity['tool']}).",
            "",
        ]
    elif identity:
        lines += [f"Highest train-test identity: 0 (no test chain aligns with a train chain; {identity['tool']}).", ""]
    bound = card["split"].get("identity_bound")
    if bound:
        dropped = bound["dropped"]
        lines += [
            f"Identity bound: validation/test chains at {bound['threshold']:g} identity or more to a train chain "
            f"dropped ({bound['tool']}): validation {dropped['validation']}, test {dropped['test']}.",
            "",
        ]
    for split, overlap in (card["split"].get("topology_overlap") or {}).items():
        lines += [
            f"CATH topologies shared by train and {split}: {overlap['topologies']}"
            + (f" (e.g. {', '.join(overlap['examples'])})." if overlap["examples"] else "."),
            "",
        ]
    subset_overlap = card["split"].get("subset_overlap") or {}
    if subset_overlap:
        lines += [
            "| subset | chains | train chains | at identity threshold or more to train | highest identity |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {name} | {o['chains']} | {o['in_train']} | {o['above_threshold']} (>= {o['threshold']:g}) | "
            f"{o['highest_identity']['identity']:.3f} |"
            for name, o in subset_overlap.items()
        ]
        lines.append("")
    external = card["split"].get("external_overlap")
    if external:
        lines += [
            f"Checked against the train split of `{external['reference']}` ({external['train_chains']} chains, "
            f"{external['reference_digest']}; {external['tool']}):",
            "",
            "| dataset | chains | train chains there | at identity threshold or more to them | highest identity |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {name} | {o['chains']} | {o['in_train']} | {o['above_threshold']} (>= {o['threshold']:g}) | "
            f"{o['highest_identity']['identity']:.3f} |"
            for name, o in external["datasets"].items()
        ]
        lines.append("")
    stats = card["kept"]
    lines += [
        "## Kept chains",
        "",
        f"Length: min {stats['length']['min']}, median {stats['length']['median']:g}, max {stats['length']['max']}. "
        f"Missing-coordinate rate: {stats['missing_coordinate_rate']:.2%}.",
        "",
        "| length | chains |",
        "|---|---:|",
    ]
    lines += [f"| {b['from']}-{b['to'] - 1} | {b['chains']} |" for b in stats["length"]["histogram"] if b["chains"]]
    lines += [
        "",
        "| residue | " + " | ".join(ALPHABET) + " |",
        "|---|" + "---:|" * len(ALPHABET),
        "| % | " + " | ".join(f"{100 * stats['composition'][a]:.1f}" for a in ALPHABET) + " |",
        "",
    ]
    lines += ["## Options", "", "```json", json.dumps(card["options"], indent=1, sort_keys=True), "```", ""]
    return "\n".join(lines)
