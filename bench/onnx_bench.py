"""onnxruntime against PyTorch eager: single real proteins of 100-500 residues on CPU.

Both run the same model at the same thread count; each protein is timed alternately
(PyTorch, onnxruntime) after a warm-up. The best of the repeats is the headline figure (our
machines are shared, and the minimum is the least disturbed run); medians are reported too.
Reports the speed ratio per protein and overall (sum over proteins), and the max |logit
difference| (the parity bound is 1e-4).

    python bench/onnx_bench.py --preset default --preset proteinmpnn --threads 2

Data: ../shared/data/real_chain_set.jsonl.gz beside the repository when present, else the
bundled sample; or --data PATH. Models: --model model.pt, or randomly initialised presets
(speed and parity do not depend on the weights).
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

REPO = Path(__file__).resolve().parents[1]
REAL_SET = REPO.parent / "shared" / "data" / "real_chain_set.jsonl.gz"


def pick_chains(path: str, count: int, lo: int, hi: int):
    from invfold.components.protein.record import ChainRecord
    from invfold.components.protein.sources import read_protein_set

    records = sorted((r for r in read_protein_set(path) if isinstance(r, ChainRecord) and lo <= len(r) <= hi), key=len)
    if not records:
        sys.exit(f"{path}: no chain with {lo}-{hi} residues")
    picks = np.unique(np.linspace(0, len(records) - 1, min(count, len(records))).round().astype(int))
    return [records[i] for i in picks]


def bench_model(label, model, records, threads: int, repeats: int) -> dict:
    import torch

    from invfold.components.export import write_onnx
    from invfold.components.export.runtime import feeds, session
    from invfold.components.protein.batch import collate

    torch.set_num_threads(threads)
    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        write_onnx(model, onnx_path)
        sess = session(onnx_path, threads)
        rows = []
        for record in records:
            b = collate([record])
            order = torch.rand(b.S.shape, generator=torch.Generator().manual_seed(0))
            inputs = feeds(b.X, b.tokens, b.structure_mask, b.residue_index, order)

            def run_torch(b=b, order=order):
                with torch.inference_mode():
                    return model(b.X, b.tokens, b.structure_mask, b.residue_index, order).numpy()

            def run_ort(inputs=inputs):
                return sess.run(None, inputs)[0]

            ref, got = run_torch(), run_ort()  # warm-up
            t_torch, t_ort = [], []
            for _ in range(repeats):
                for fn, times in ((run_torch, t_torch), (run_ort, t_ort)):
                    start = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - start)
            real = b.structure_mask.numpy() > 0
            rows.append(
                {
                    "name": record.name,
                    "length": len(record),
                    "torch_ms": 1e3 * min(t_torch),
                    "onnxruntime_ms": 1e3 * min(t_ort),
                    "torch_median_ms": 1e3 * statistics.median(t_torch),
                    "onnxruntime_median_ms": 1e3 * statistics.median(t_ort),
                    "max_abs_diff": float(np.abs(got - ref)[real].max()),
                }
            )
    for row in rows:
        row["speedup"] = row["torch_ms"] / row["onnxruntime_ms"]
    return {
        "model": label,
        "parameters": model.num_parameters(),
        "threads": threads,
        "repeats": repeats,
        "speedup": sum(r["torch_ms"] for r in rows) / sum(r["onnxruntime_ms"] for r in rows),
        "median_speedup": (sum(r["torch_median_ms"] for r in rows) / sum(r["onnxruntime_median_ms"] for r in rows)),
        "min_speedup": min(r["speedup"] for r in rows),
        "max_abs_diff": max(r["max_abs_diff"] for r in rows),
        "chains": rows,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], help="model.pt (repeatable)")
    parser.add_argument("--preset", action="append", default=[], help="random-init preset (repeatable)")
    parser.add_argument("--data", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chains", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-length", type=int, default=100)
    parser.add_argument("--max-length", type=int, default=500)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    watch = conditions.start(threads=args.threads)

    import torch

    from invfold.components.export.onnx_export import bundled_sample
    from invfold.components.model import InverseFoldingModel, ModelConfig, load_model

    data = args.data or (str(REAL_SET) if REAL_SET.exists() else bundled_sample())
    records = pick_chains(data, args.chains, args.min_length, args.max_length)
    models = [(Path(p).name, load_model(p)) for p in args.model]
    for name in args.preset or ([] if args.model else ["default", "proteinmpnn"]):
        torch.manual_seed(0)
        models.append((f"preset:{name}", InverseFoldingModel(ModelConfig.preset(name))))
    results = []
    for label, model in models:
        result = bench_model(label, model, records, args.threads, args.repeats)
        results.append(result)
        print(f"\n{label} ({result['parameters']:,} parameters), {args.threads} threads, best of {args.repeats}")
        print(f"{'chain':<16}{'L':>5}{'torch ms':>10}{'ORT ms':>9}{'speedup':>9}{'max|diff|':>11}")
        for r in result["chains"]:
            print(
                f"{r['name']:<16}{r['length']:>5}{r['torch_ms']:>10.1f}{r['onnxruntime_ms']:>9.1f}"
                f"{r['speedup']:>8.2f}x{r['max_abs_diff']:>11.1e}"
            )
        print(
            f"overall speedup {result['speedup']:.2f}x best-of (medians {result['median_speedup']:.2f}x, "
            f"lowest per chain {result['min_speedup']:.2f}x), max |diff| {result['max_abs_diff']:.1e}"
        )
    report = watch.finish()
    conditions.print_report(report)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"data": Path(data).name, "results": results, "conditions": report}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
