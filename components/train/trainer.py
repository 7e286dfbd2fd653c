"""The training loop, the same for every strategy and every number of processes.

Exact resume rests on three things: batches are a pure function of (seed, epoch, position)
(see sampler.py), every rank's RNG states travel in the checkpoint, and validation and
checkpointing draw no random numbers from the global generators. A stopped-and-resumed run
therefore ends with the same weights as an uninterrupted one.

Stopping: SIGTERM (preemption) or the time budget (budget.py: counted from the launcher's start,
less what the final validation and saves will take) sets a local flag; before every optimizer step
the ranks exchange their flags in the step's agreement all-reduce (`_agree`, which also carries
the loss sums and every rank's phase times, see timing.py), so they agree on the same step,
checkpoint together after it and leave: exit 143 after SIGTERM (the pod is retried and resumes),
0 after the time budget (a finished run with model.pt).

Non-finite numbers: the same all-reduce carries whether this rank saw a NaN/inf loss (its loss
sums) or gradient (a flag); if any did, every rank skips that update (counted in metrics as
`nonfinite_steps`, logged). `max_nonfinite_steps` of them in a row raise NonFiniteTrainingError
(exit 3) before model.pt is written, and a model with non-finite weights is never written
(model/io.py refuses it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import signal
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from invfold.components.evaluate.metrics import DatasetScores, score_dataset
from invfold.components.model.io import save_model
from invfold.components.model.network import InverseFoldingModel, unknown_last
from invfold.components.model.published import keep_upstream_positions, keeps_upstream_positions
from invfold.components.prep.shards import open_prepared
from invfold.components.protein.alphabet import NUM_AA
from invfold.components.protein.batch import collate
from invfold.components.protein.sampler import TokenBudgetSampler
from invfold.components.train import checkpoint as ckpt
from invfold.components.train.budget import BudgetClock, FinishEstimate, after_job_s, budget_start
from invfold.components.train.config import TrainConfig
from invfold.components.train.distributed import DistInfo
from invfold.components.train.strategies import make_strategy
from invfold.components.train.timing import PHASES, StepClock, summarize
from invfold.errors import ConfigError, InvfoldError
from invfold.options import fields_in

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_DIVERGED = 3  # a run of non-finite steps
EXIT_PREEMPTED = 143  # 128 + SIGTERM, what a pod killed by SIGTERM reports
STOP_TIME_BUDGET, STOP_PREEMPTED = 1, 2


class NonFiniteTrainingError(InvfoldError, RuntimeError):
    """Too many optimizer steps in a row had a NaN or infinite loss or gradient."""

    exit_code = EXIT_DIVERGED


def lr_factor(cfg: TrainConfig, total_steps: int | None):
    """Multiplier of cfg.lr for the step about to be taken (0-based), for LambdaLR."""
    warmup = max(cfg.warmup_steps, 1)

    def noam(step: int) -> float:
        s = step + 1
        return min(s / warmup, math.sqrt(warmup / s))

    def one_cycle(step: int) -> float:
        s = step + 1
        if s <= warmup:
            return s / warmup
        progress = min(1.0, (s - warmup) / max(1, total_steps - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return noam if cfg.schedule == "noam" else one_cycle


STAT_FIELDS = ("nll", "correct", "count", "loss_sum")  # per-step sums over observed residues


def sequence_loss(logits: torch.Tensor, S: torch.Tensor, mask: torch.Tensor, smoothing: float):
    """(label-smoothed mean loss over observed residues, and detached float64 sums on the logits'
    device, in STAT_FIELDS order). Nothing here waits for the device."""
    observed = mask.reshape(-1) > 0
    flat = logits.float().reshape(-1, NUM_AA)[observed]
    target = S.reshape(-1)[observed]
    loss = F.cross_entropy(flat, target, label_smoothing=smoothing)
    with torch.no_grad():
        nll = F.cross_entropy(flat, target, reduction="sum")
        correct = (flat.argmax(-1) == target).sum()
        count = torch.tensor(float(len(target)), dtype=torch.float64, device=flat.device)
        sums = torch.stack([nll.double(), correct.double(), count, loss.detach().double() * count])
    return loss, sums


def _grads_finite(strategy, clock: StepClock) -> bool:
    """This rank's gradients are finite; Horovod waits for its exchange here (moved to sync)."""
    with clock.phase("compute_s"):
        finite = strategy.local_grads_finite()
    clock.move(strategy.sync_seconds(), "compute_s", "sync_s")
    return finite


def _start_agreement(strategy, info: DistInfo, flags: list[int], sums: torch.Tensor, times: np.ndarray):
    """The loop's one collective per step besides the gradient exchange: every rank puts its stop
    flags, loss sums and phase times in its own row of a [world, fields] matrix, and one SUM
    all-reduce gives every rank every row. Returns the function that waits for it and returns
    every rank's row split in three: [world, flags], [world, STAT_FIELDS] loss sums, [world, phases]
    times."""
    width = len(flags) + len(STAT_FIELDS) + len(PHASES)
    row = torch.cat(
        [
            torch.tensor(flags, dtype=torch.float64),
            sums.to("cpu", torch.float64),
            torch.from_numpy(times),
        ]
    )
    table = torch.zeros(info.world_size, width, dtype=torch.float64)
    table[info.rank] = row
    wait = strategy.start_all_reduce_sum(table)
    stats_end = len(flags) + len(STAT_FIELDS)

    def result():
        agreed = wait().numpy()
        return agreed[:, : len(flags)], agreed[:, len(flags) : stats_end], agreed[:, stats_end:]

    return result


class _Window:
    """Loss sums and per-rank phase times of the steps since the last log line."""

    def __init__(self, world_size: int):
        self.stats = np.zeros(len(STAT_FIELDS))
        self.times = np.zeros((world_size, len(PHASES)))
        self.steps = 0
        self.restart_clock()

    def add(self, stats: np.ndarray, times: np.ndarray) -> None:
        self.stats += stats
        self.times += times
        self.steps += 1

    def residues(self) -> float:
        return float(self.stats[STAT_FIELDS.index("count")])

    def residues_per_s(self) -> float:
        return self.residues() / max(time.monotonic() - self.start, 1e-9)

    def restart_clock(self) -> None:
        self.start = time.monotonic()

    def reset(self) -> None:
        self.stats[:] = 0.0
        self.times[:] = 0.0
        self.steps = 0
        self.restart_clock()


class _Preemption:
    """SIGTERM sets a flag; the loop acts on it at the next step boundary."""

    def __init__(self):
        self.requested = False
        self._previous = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.requested = True

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self._previous)


def _metrics_up_to(path: str, step: int) -> list[str]:
    """The lines of metrics.jsonl up to `step`. A line that is not a complete JSON object (the
    torn last line of a power loss or a full disk) is dropped with a warning: the checkpoint, not
    the log, is the truth of where the run stands."""
    kept, torn = [], []
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                record = json.loads(raw)
                if not isinstance(record, dict) or not isinstance(record.get("step", 0), int):
                    raise ValueError("not a metrics record")
            except ValueError:  # JSONDecodeError, UnicodeDecodeError
                torn.append(number)
                continue
            if record.get("step", 0) <= step:
                kept.append(raw.decode("utf-8").rstrip("\n") + "\n")
    if torn:
        log.warning("%s: dropped %d unreadable line(s) (line %s): a write cut short", path, len(torn), torn[0])
    return kept


class MetricsLog:
    """Rank 0's metrics.jsonl and TensorBoard events. On resume, records past the resumed step
    (written after the checkpoint by the interrupted run) are dropped, so each step appears once."""

    def __init__(self, out: str, resumed_step: int):
        from torch.utils.tensorboard import SummaryWriter

        self.path = os.path.join(out, "metrics.jsonl")
        if resumed_step and os.path.exists(self.path):
            kept = _metrics_up_to(self.path, resumed_step)
            with open(self.path, "w") as fh:
                fh.writelines(kept)
        elif os.path.exists(self.path):
            os.remove(self.path)
        self._file = open(self.path, "a")
        self.tb = SummaryWriter(os.path.join(out, "tensorboard"), purge_step=resumed_step or None)

    def write(self, split: str, step: int, values: dict) -> None:
        record = {"split": split, "step": step, "time": round(time.time(), 3), **values}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        for key, value in values.items():
            if isinstance(value, (int, float)) and key not in ("epoch", "residues"):
                self.tb.add_scalar(f"{split}/{key}", value, step)

    def close(self) -> None:
        self._file.close()
        self.tb.close()


@dataclass
class TrainResult:
    exit_code: int
    stop_reason: str  # "finished" | "time_budget" | "preempted"
    step: int
    summary: dict


@dataclass
class _Position:
    step: int = 0
    epoch: int = 0
    position: int = 0
    residues: float = 0.0  # observed residues trained on, all ranks
    nonfinite_steps: int = 0  # updates skipped for a NaN/inf loss or gradient on some rank


# TrainConfig fields that shape the trajectory (group "resume", marked on the fields): a checkpoint
# resumes only under the same values.
# Left out on purpose: where things go (out, checkpoint_dir), how long (max_steps, epochs, budgets;
# a longer run may resume a shorter one, except under one_cycle, whose schedule spans the run, see
# run_settings), how often things are logged, validated or saved, threads and timeouts.
RESUME_FIELDS = fields_in(TrainConfig, "resume")


def run_settings(cfg: TrainConfig, model_cfg, data_digest: str, total_steps: int | None) -> dict:
    """What a checkpoint records about the run that wrote it (JSON values): the data digest, the
    model's architecture, and the RESUME_FIELDS."""
    model = {k: v for k, v in dataclasses.asdict(model_cfg).items() if k != "activation_checkpointing"}
    settings = {"data": data_digest, "model": model, **{name: getattr(cfg, name) for name in RESUME_FIELDS}}
    if cfg.schedule == "one_cycle":
        settings["total_steps"] = total_steps
    return json.loads(json.dumps(settings))  # tuples as lists: equal to what a marker reads back


def _seed_everything(seed: int) -> None:

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class _Run:
    """What one rank holds from build to finish: the data, the wrapped model, the position and the
    loop's running state (clocks, windows, the last validation, why it stopped)."""

    cfg: TrainConfig
    info: DistInfo
    train_set: object
    val_set: object | None
    model_cfg: object
    strategy: object
    pos: _Position
    metrics: MetricsLog | None
    batches: object
    settings: dict  # run_settings: what each checkpoint records and a resume must match
    pruner: ckpt.Pruner | None = None  # old checkpoints deleted after each save (rank 0)
    preemption: _Preemption = dataclasses.field(default_factory=_Preemption)
    finish: FinishEstimate | None = None  # what the time budget keeps in hand (budget.py)
    budget: BudgetClock | None = None
    started_at: float = 0.0  # seconds since the epoch: the budget's clock (launcher's start)
    start: float = dataclasses.field(default_factory=time.monotonic)
    loop_started_at: float = dataclasses.field(default_factory=time.time)
    phases: dict = dataclasses.field(default_factory=dict)  # seconds of each phase after the loop
    step_times: list = dataclasses.field(default_factory=list)  # the last few steps' seconds
    step_residues: float = 0.0  # residues per rank in the last step
    cpu_start: float = dataclasses.field(default_factory=time.process_time)
    clock: StepClock = dataclasses.field(default_factory=StepClock)
    window: _Window | None = None
    stop_reason: str = "finished"
    last_saved: int = -1
    val_summary: dict = dataclasses.field(default_factory=dict)
    grad_norm: float | None = None
    nonfinite_run: int = 0

    @property
    def main(self) -> bool:
        return self.info.is_main

    @property
    def keep_positions(self) -> bool:
        """Project the position table to upstream's rank after each step (published.keep_upstream_
        positions); not under DeepSpeed, whose optimizer steps its own fp32 copy of the weights."""
        return self.cfg.strategy != "deepspeed" and keeps_upstream_positions(self.model_cfg)


def train(cfg: TrainConfig, info: DistInfo) -> TrainResult:
    """Run (or resume) training on this rank; every rank of the job calls this."""
    run = _build(cfg, info)
    try:
        while not _done(cfg, run.pos):
            began = time.monotonic()
            stop = _step(run)
            _time_step(run, time.monotonic() - began)
            if _after_step(run, stop):
                break
    finally:
        run.preemption.restore()
    return _finish_run(run)


def _build(cfg: TrainConfig, info: DistInfo) -> _Run:
    """Data, sampler, model (initial weights alike on every rank), strategy, and the resumed
    position; the budget's clocks start when this returns."""
    torch.set_num_threads(cfg.threads)
    if info.is_main:
        os.makedirs(cfg.out, exist_ok=True)
    data = open_prepared(cfg.data)
    train_set = data.open(cfg.train_dataset)
    val_set = (
        data.open(cfg.validation_dataset)
        if cfg.validation_dataset and cfg.validation_dataset in data.datasets
        else None
    )
    sampler = TokenBudgetSampler(
        train_set.lengths,
        cfg.tokens_per_batch,
        info.rank,
        info.world_size,
        cfg.seed,
        cfg.pool_batches,
        balance=cfg.balance,
    )
    steps_per_epoch = max(1, sampler.batches_per_rank(0) // cfg.grad_accum)
    total_steps = cfg.max_steps or (cfg.epochs * steps_per_epoch if cfg.epochs else None)

    _seed_everything(cfg.seed)  # identical initial weights on every rank
    initial = cfg.initial_model()
    model_cfg = cfg.model_config(initial.cfg if initial is not None else None)
    model = InverseFoldingModel(model_cfg)
    if initial is not None:
        model.load_state_dict(initial.state_dict())
        if cfg.freeze_encoder:
            for param in encoder_parameters(model):
                param.requires_grad_(False)
    strategy = make_strategy(cfg, info)
    factor = lr_factor(cfg, total_steps)
    strategy.wrap(model, lambda optimizer: torch.optim.lr_scheduler.LambdaLR(optimizer, factor))
    _seed_everything(cfg.seed + 1000 * (info.rank + 1))  # per-rank noise, dropout and order streams

    started_at = budget_start()
    pos = _Position()
    settings = run_settings(cfg, model_cfg, data.digest, total_steps)
    latest = ckpt.latest_complete(cfg.checkpoint_dir)
    if latest and not cfg.resume:
        raise ConfigError(
            f"{cfg.checkpoint_dir} holds checkpoints of an earlier run (newest {latest}) and "
            "resume is off: remove them or choose another checkpoint_dir"
        )
    if latest:
        pos = _resume(strategy, latest, cfg, info, settings)
    metrics = MetricsLog(cfg.out, pos.step) if info.is_main else None
    if info.is_main:
        log.info(
            "training %s (%d parameters, %d trainable) with %s on %d process(es) x %d thread(s); "
            "%d train chains, %d steps/epoch%s",
            f"from {cfg.init_from}" if cfg.init_from else cfg.preset,
            model.num_parameters(),
            sum(p.numel() for p in model.parameters() if p.requires_grad),
            cfg.strategy,
            info.world_size,
            cfg.threads,
            len(train_set),
            steps_per_epoch,
            f"; resumed from {latest}" if latest else "",
        )
    return _Run(
        cfg,
        info,
        train_set,
        val_set,
        model_cfg,
        strategy,
        pos,
        metrics,
        sampler.iterate(pos.epoch, pos.position),
        settings,
        pruner=ckpt.Pruner(cfg.checkpoint_dir, cfg.keep_checkpoints),
        window=_Window(info.world_size),
        last_saved=pos.step if latest else -1,
        finish=FinishEstimate(
            state_bytes=3 * 4 * model.num_parameters(),  # fp32 weights and AdamW's two moments
            validation_residues=_validation_residues(val_set, info),
            after_job_s=after_job_s(),
        ),
        budget=BudgetClock(cfg.time_budget_s, started_at) if cfg.time_budget_s is not None else None,
        started_at=started_at,
    )


def _validation_residues(val_set, info: DistInfo) -> int:
    """Residues this rank scores in a validation (its every world_size-th chain)."""
    if val_set is None:
        return 0
    return int(sum(val_set.lengths[i] for i in range(info.rank, len(val_set), info.world_size)))


STEP_TIMES_KEPT = 10  # the reserve holds the slowest of the last this many steps


def _time_step(run: _Run, seconds: float) -> None:
    """Feed the budget's estimate: the slowest recent step and this rank's training rate."""
    run.step_times = [*run.step_times[-(STEP_TIMES_KEPT - 1) :], seconds]
    run.finish.step_s = max(run.step_times)
    if seconds > 0 and run.step_residues > 0:
        run.finish.train_residues_per_s = run.step_residues / seconds


def _step(run: _Run) -> int:
    """One optimizer step on every rank: accumulate micro-batches, agree on the stop flags and on
    finiteness, then update (or skip alike everywhere). Returns the agreed stop flag."""
    cfg, info, strategy, pos, clock = run.cfg, run.info, run.strategy, run.pos, run.clock
    sums = torch.zeros(len(STAT_FIELDS), dtype=torch.float64, device=info.device)
    for micro in range(cfg.grad_accum):
        with clock.phase("data_s"):
            rows, pos.epoch, pos.position = next(run.batches)
            batch = collate([run.train_set[i] for i in rows]).to(info.device)
        with clock.phase("compute_s"), strategy.accumulating(sync=micro == cfg.grad_accum - 1):
            X = batch.X
            if cfg.backbone_noise > 0:
                X = X + cfg.backbone_noise * torch.randn_like(X)
            order = unknown_last(torch.rand(batch.mask.shape, device=info.device), batch)
            logits = strategy.forward(X, batch.tokens, batch.structure_mask, batch.residue_index, order)
            loss, micro_sums = sequence_loss(logits, batch.S, batch.mask, cfg.label_smoothing)
            strategy.backward(loss)
        sums += micro_sums
    # Replicated gradients are judged after the exchange, alike on every rank, so the
    # agreement can start first (Horovod sends it in the gradients' cycle); ZeRO's
    # partitions are judged before it and put to the vote.
    vote = not strategy.replicated_grads
    if vote:
        grads_finite = _grads_finite(strategy, clock)
    else:  # DDP waited inside backward: book it before this step's lap
        clock.move(strategy.sync_seconds(), "compute_s", "sync_s")
    flags = [
        STOP_PREEMPTED if run.preemption.requested else 0,
        STOP_TIME_BUDGET if _over_budget(cfg, run) else 0,
        0 if not vote or grads_finite else 1,
    ]
    with clock.phase("sync_s"):
        agreement = _start_agreement(strategy, info, flags, sums, clock.lap())
    if not vote:
        grads_finite = _grads_finite(strategy, clock)
    with clock.phase("sync_s"):
        rank_flags, rank_stats, step_times = agreement()
    if not grads_finite:
        rank_flags[:, 2] = np.maximum(rank_flags[:, 2], 1)
    run.step_residues = float(rank_stats[:, STAT_FIELDS.index("count")].mean())
    nonfinite_ranks = int(((rank_flags[:, 2] > 0) | ~np.isfinite(rank_stats).all(axis=1)).sum())
    if nonfinite_ranks:
        strategy.step(skip=True)
        pos.nonfinite_steps += 1
        run.nonfinite_run += 1
        _report_nonfinite(cfg, info, pos, nonfinite_ranks, run.nonfinite_run)
        run.window.add(np.zeros(len(STAT_FIELDS)), step_times)
    else:
        with clock.phase("compute_s"):
            run.grad_norm = strategy.step()
            if run.keep_positions:  # a model of upstream's architecture stays exportable to it
                keep_upstream_positions(strategy.module)
        run.nonfinite_run = 0
        run.window.add(rank_stats.sum(axis=0), step_times)
    pos.step += 1
    return int(rank_flags[:, :2].max())


def _after_step(run: _Run, stop: int) -> bool:
    """Log, validate and checkpoint on their schedules; True when the ranks agreed to stop (a
    checkpoint of this step is then written)."""
    cfg, pos = run.cfg, run.pos
    if stop and run.budget is not None:  # what the loop kept in hand, alike on every rank
        run.phases["reserve_at_stop"] = {**run.finish.parts(), "left_s": round(run.budget.remaining(), 3)}
    if cfg.log_every and pos.step % cfg.log_every == 0 or stop or _done(cfg, pos):
        pos.residues += run.window.residues()
        if run.main:
            _log_train(run.metrics, pos, run.window, run.strategy.current_lr(), run.grad_norm)
        run.window.reset()
    if run.val_set is not None and cfg.validate_every and pos.step % cfg.validate_every == 0:
        began = time.monotonic()
        run.val_summary = _validate(run.strategy, run.val_set, cfg, run.info, run.metrics, pos.step)
        run.finish.validation_s = time.monotonic() - began
        run.window.restart_clock()  # throughput counts training time only
        run.clock.restart()
    if stop or (cfg.checkpoint_every and pos.step % cfg.checkpoint_every == 0):
        began = time.monotonic()
        _save(run.strategy, cfg, run.info, pos, run.settings, run.pruner)
        run.finish.save_s = time.monotonic() - began
        if stop:
            run.phases["final_checkpoint_s"] = round(run.finish.save_s, 3)
        run.last_saved = pos.step
        run.window.restart_clock()
        run.clock.restart()
    if stop:
        run.stop_reason = "preempted" if stop == STOP_PREEMPTED else "time_budget"
    return bool(stop)


def _timed(run: _Run, phase: str, work):
    """Run work(), recording its seconds as run.phases[phase]."""
    began = time.monotonic()
    result = work()
    run.phases[phase] = round(time.monotonic() - began, 3)
    return result


def _finish_run(run: _Run) -> TrainResult:
    """After SIGTERM: summary only, exit 143 (the retried pod resumes). Otherwise the last
    checkpoint and validation, model.pt (fp32, consolidated from the checkpoint) and summary.json."""
    cfg, info, strategy, pos = run.cfg, run.info, run.strategy, run.pos
    run.phases["loop_s"] = round(time.time() - run.loop_started_at, 3)
    if run.stop_reason == "preempted":
        if run.main:
            log.warning("SIGTERM: checkpointed step %d on all ranks; exiting %d", pos.step, EXIT_PREEMPTED)
        summary = _summary(cfg, info, strategy, pos, run, None)
        _close(strategy, run.metrics, summary, cfg, run.main)
        return TrainResult(EXIT_PREEMPTED, run.stop_reason, pos.step, summary)

    if run.last_saved != pos.step:
        _timed(run, "final_checkpoint_s", lambda: _save(strategy, cfg, info, pos, run.settings, run.pruner))
    if run.val_set is not None and not (cfg.validate_every and pos.step % cfg.validate_every == 0):
        run.val_summary = _timed(
            run, "final_validation_s", lambda: _validate(strategy, run.val_set, cfg, info, run.metrics, pos.step)
        )
    model_path = os.path.join(cfg.out, "model.pt")
    if run.main:
        began = time.monotonic()
        final = InverseFoldingModel(dataclasses.replace(run.model_cfg, activation_checkpointing=False))
        final.load_state_dict(strategy.fp32_state_dict(ckpt.step_dir(cfg.checkpoint_dir, pos.step)))
        save_model(model_path, final, {"init_from": cfg.init_from} if cfg.init_from else None)
        run.phases["model_write_s"] = round(time.monotonic() - began, 3)
    summary = _summary(cfg, info, strategy, pos, run, model_path)
    _close(strategy, run.metrics, summary, cfg, run.main)
    return TrainResult(EXIT_OK, run.stop_reason, pos.step, summary)


def encoder_parameters(model: InverseFoldingModel) -> list[torch.nn.Parameter]:
    """Everything that reads structure: edge/node embeddings and the encoder layers (what
    freeze_encoder keeps fixed); the decoder, letter embedding and read-out stay trainable."""
    trainable_heads = ("decoder.", "seq_embed.", "readout.")
    return [p for name, p in model.named_parameters() if not name.startswith(trainable_heads)]


def _done(cfg: TrainConfig, pos: _Position) -> bool:
    if cfg.max_steps is not None:
        return pos.step >= cfg.max_steps
    return cfg.epochs is not None and pos.epoch >= cfg.epochs


def _report_nonfinite(cfg: TrainConfig, info: DistInfo, pos: _Position, ranks: int, run: int) -> None:
    """Log a skipped update; raise (on every rank alike) once `max_nonfinite_steps` come in a row."""
    if info.is_main:
        log.warning(
            "step %d: NaN or infinite loss or gradient on %d of %d rank(s): update skipped on all "
            "(%d skipped in all, %d in a row; the job fails at %d in a row)",
            pos.step + 1,
            ranks,
            info.world_size,
            pos.nonfinite_steps,
            run,
            cfg.max_nonfinite_steps,
        )
    if run >= cfg.max_nonfinite_steps:
        raise NonFiniteTrainingError(
            f"{run} optimizer steps in a row (up to step {pos.step + 1}) had a NaN or infinite loss or "
            "gradient; model.pt was not written. Check the data (invfold prep drops implausible chains), "
            "lower --lr or raise --grad-clip"
        )


def _over_budget(cfg: TrainConfig, run: _Run) -> bool:
    """Wall-clock budget (from the launcher's start, keeping in hand what the run needs after
    the loop: budget.py), or CPU-time budget of this process (all its threads): the latter
    trains the same amount on a loaded machine, only slower."""
    if run.budget is not None and run.budget.must_stop(run.finish.reserve()):
        return True
    return cfg.cpu_time_budget_s is not None and time.process_time() - run.cpu_start >= cfg.cpu_time_budget_s


def _log_train(metrics: MetricsLog, pos: _Position, window: _Window, lr: float, grad_norm: float | None) -> None:
    nll, correct, count, smoothed = (float(x) for x in window.stats)
    count = max(count, 1.0)
    values = {
        "loss": smoothed / count,
        "nll": nll / count,
        "perplexity": math.exp(min(nll / count, 700.0)),  # float overflow past e^709
        "accuracy": correct / count,
        "lr": lr,
        "grad_norm": grad_norm,
        "residues": count,
        "residues_per_s": window.residues_per_s(),
        "epoch": pos.epoch,
        "nonfinite_steps": pos.nonfinite_steps,
    }
    metrics.write("train", pos.step, values)
    timing = summarize(window.times, window.steps)
    metrics.write("time", pos.step, timing)
    log.info(
        "step %d | epoch %d | loss %.4f | ppl %.2f | acc %.3f | lr %.2e | %.0f res/s | "
        "per step: data %.3fs compute %.3fs sync %.3fs (slowest rank %d, +%.0f%%)",
        pos.step,
        pos.epoch,
        values["loss"],
        values["perplexity"],
        values["accuracy"],
        lr,
        values["residues_per_s"],
        timing["data_s"],
        timing["compute_s"],
        timing["sync_s"],
        timing["slowest_rank"],
        100 * timing["compute_imbalance"],
    )


def _validate(strategy, val_set, cfg: TrainConfig, info: DistInfo, metrics: MetricsLog | None, step: int) -> dict:
    """Each rank scores every world_size-th chain with complete fp32 weights; per-protein sums
    are all-reduced, so the median recovery is over the whole set."""
    model = strategy.eval_module()
    rows = list(range(info.rank, len(val_set), info.world_size))
    scores = score_dataset(model, val_set, rows, cfg.tokens_per_batch, cfg.seed, info.device)
    stacked = torch.from_numpy(np.stack([scores.nll, scores.count, scores.correct]))
    total = strategy.all_reduce(stacked, "sum").numpy()
    summary = DatasetScores(total[0], total[1], total[2]).summary()
    if metrics is not None:
        metrics.write("validation", step, summary)
        log.info(
            "step %d | validation | loss %.4f | ppl %.2f | recovery %.3f",
            step,
            summary.get("loss", float("nan")),
            summary.get("perplexity", float("nan")),
            summary.get("recovery", float("nan")),
        )
    return summary


def _save(
    strategy, cfg: TrainConfig, info: DistInfo, pos: _Position, settings: dict, pruner: ckpt.Pruner | None = None
) -> None:
    """Collective: every rank writes its part, a barrier, then rank 0 writes COMPLETE (with the
    run's settings, which a resume must match) and prunes (a store that refuses deletes stops the
    pruning, not the run: ckpt.Pruner)."""
    directory = ckpt.step_dir(cfg.checkpoint_dir, pos.step)
    trainer_state = {
        **dataclasses.asdict(pos),
        "world_size": info.world_size,
        "rng": strategy.all_gather_object(ckpt.capture_rng()),
    }
    strategy.save(directory, trainer_state)
    strategy.barrier()
    if info.is_main:
        ckpt.mark_complete(
            directory,
            {
                "step": pos.step,
                "strategy": cfg.strategy,
                "zero_stage": cfg.zero_stage,
                "world_size": info.world_size,
                "settings": settings,
            },
        )
        (pruner or ckpt.Pruner(cfg.checkpoint_dir, cfg.keep_checkpoints))()
        log.info("checkpoint %s", directory)
    strategy.barrier()


def _resume(strategy, directory: str, cfg: TrainConfig, info: DistInfo, settings: dict) -> _Position:
    marker = ckpt.read_marker(directory)
    if (marker.get("strategy"), marker.get("zero_stage")) != (cfg.strategy, cfg.zero_stage):
        raise ConfigError(
            f"{directory}: written by strategy {marker.get('strategy')!r} (ZeRO stage "
            f"{marker.get('zero_stage')}), cannot resume with {cfg.strategy!r} "
            f"(ZeRO stage {cfg.zero_stage}); use a new checkpoint_dir or resume=False"
        )
    ckpt.check_resumable(directory, marker, settings)
    ckpt.check_world_size(directory, marker.get("world_size"), info.world_size)
    state = strategy.load(directory)
    ckpt.check_world_size(directory, state["world_size"], info.world_size)
    ckpt.restore_rng(state["rng"][info.rank])
    return _Position(
        state["step"], state["epoch"], state["position"], state["residues"], state.get("nonfinite_steps", 0)
    )


def _summary(cfg, info, strategy, pos, run: _Run, model_path) -> dict:
    """summary.json: the outcome, throughput, and where the time went: `phases` (from the budget's
    clock start: start-up until the first step, the loop, the final checkpoint, validation and
    model.pt) and, under --time-budget, `budget` (seconds given, spent by this summary, and what
    the loop kept in hand when it stopped)."""
    digests = strategy.all_gather_object(strategy.params_digest())
    elapsed = time.monotonic() - run.start
    since_start = time.time() - run.started_at
    phases = {"startup_s": round(run.loop_started_at - run.started_at, 3), **run.phases}
    phases.pop("reserve_at_stop", None)
    budget = None
    if run.budget is not None:
        budget = {
            "budget_s": run.budget.budget_s,
            "started_at": run.started_at,
            "elapsed_s": round(since_start, 3),
            "kept_in_hand": run.phases.get("reserve_at_stop"),
        }
    return {
        "stop_reason": run.stop_reason,
        "phases": phases,
        "budget": budget,
        "step": pos.step,
        "epoch": pos.epoch,
        "world_size": info.world_size,
        "strategy": cfg.strategy,
        "zero_stage": cfg.zero_stage,
        "precision": cfg.precision,
        "elapsed_s": round(elapsed, 3),
        "process_cpu_s": round(time.process_time(), 3),
        "residues": pos.residues,
        "residues_per_s": round(pos.residues / max(elapsed, 1e-9), 1),
        "nonfinite_steps": pos.nonfinite_steps,
        "validation": run.val_summary,
        "model": model_path,
        "checkpoint": ckpt.latest_complete(cfg.checkpoint_dir),
        "checkpoint_pruning": run.pruner.refused if run.pruner and run.pruner.refused else "on",
        "params_digests": digests,
        "config": cfg.to_dict(),
    }


def _close(strategy, metrics, summary: dict, cfg: TrainConfig, main: bool) -> None:
    if main:
        metrics.close()
        with open(os.path.join(cfg.out, "summary.json"), "w") as fh:
            json.dump(summary, fh, indent=2, sort_keys=True)
            fh.write("\n")
    strategy.close()
