"""Length-bucketed batches under a residue budget, sharded across ranks, resumable.

Why pools: sorting the whole set by length gives the least padding but the same batches every
epoch; shuffling gives variety but much padding. Sorting inside large shuffled pools keeps
padding small and batches varied. Everything is a function of (seed, epoch), so every rank
computes the same batch list without communication, and a position in it is all a checkpoint
needs to resume.

Why interleaved steps: every step waits for the slowest rank, so the ranks' batches of one step
should cost the same. Each step takes world x rows consecutive chains of the length-sorted pool
and deals them out like cards (rank r gets every world-th), so the ranks' batches have the same
number of rows and longest chains that are neighbours in sorted order: equal padded size, equal
k-NN edges, equal cost under any cost model, not only under the padded-residue one. With one
process this is exactly the greedy packing of pack_by_length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where it runs: TrainConfig reads BALANCE_MODES, and the CLI's
    import numpy as np  # parser (built from TrainConfig) must answer --help without numpy

BALANCE_STEPS = 16
BALANCE_MODES = ("interleaved", "pairs")


def pack_by_length(lengths: np.ndarray, indices, tokens_per_batch: int) -> list[list[int]]:
    """`indices` sorted by length (stable: ties keep their given order) and packed into batches
    whose padded size (rows x longest) stays within the residue budget."""
    import numpy as np

    indices = np.asarray(indices, dtype=np.int64)
    batches, current, longest = [], [], 0
    for index in indices[np.argsort(lengths[indices], kind="stable")].tolist():
        length = int(lengths[index])
        if current and (len(current) + 1) * max(longest, length) > tokens_per_batch:
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        batches.append(current)
    return batches


def pack_steps(lengths: np.ndarray, indices, tokens_per_batch: int, world: int) -> tuple[list[list[int]], list[int]]:
    """`indices` sorted by length (stable) and cut into steps of `world` batches: a step takes
    world x rows consecutive chains, as many rows as the budget allows for the step's longest
    chain, and rank r's batch is every world-th of them. Returns (batches in step order, the
    last < world chains, which make no step)."""
    import numpy as np

    indices = np.asarray(indices, dtype=np.int64)
    ordered = indices[np.argsort(lengths[indices], kind="stable")]
    batches: list[list[int]] = []
    i, n = 0, len(ordered)
    while n - i >= world:
        rows = 1
        while n - i >= world * (rows + 1) and (rows + 1) * int(lengths[ordered[i + world * (rows + 1) - 1]]) <= (
            tokens_per_batch
        ):
            rows += 1
        group = ordered[i : i + world * rows]
        batches.extend(group[rank::world].tolist() for rank in range(world))
        i += world * rows
    return batches, ordered[i:].tolist()


@dataclass
class TokenBudgetSampler:
    """Batches of dataset row indices whose padded size (rows x longest row) fits the budget.

    A single chain longer than the budget makes a batch of its own. Each rank gets the same
    number of batches per epoch. balance "interleaved" (default): each step's batches are dealt
    from the same run of length-sorted chains (same rows, neighbouring lengths; fewer than
    world_size chains per epoch make no step and wait for the next epoch's shuffle). "pairs": the
    earlier scheme, batches packed alone and paired by padded size within BALANCE_STEPS steps
    (the last `len % world_size` batches of an epoch are dropped).
    """

    lengths: np.ndarray
    tokens_per_batch: int
    rank: int = 0
    world_size: int = 1
    seed: int = 0
    pool_batches: int = 50
    shuffle: bool = True
    balance: str = "interleaved"

    def __post_init__(self) -> None:
        import numpy as np

        self.lengths = np.asarray(self.lengths, dtype=np.int64)
        if self.lengths.ndim != 1 or len(self.lengths) == 0:
            raise ValueError("TokenBudgetSampler.lengths: expected a non-empty 1-d array of chain lengths")
        if self.tokens_per_batch < 1 or self.pool_batches < 1:
            raise ValueError("TokenBudgetSampler: tokens_per_batch and pool_batches must be positive")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"TokenBudgetSampler: rank {self.rank} outside world of {self.world_size}")
        if self.balance not in BALANCE_MODES:
            raise ValueError(f"TokenBudgetSampler.balance: expected one of {BALANCE_MODES}, got {self.balance!r}")
        if self.batches_per_rank(0) < 1:
            raise ValueError(
                f"TokenBudgetSampler: {len(self.lengths)} chains make "
                f"{len(self._packed(0)[0])} batches of {self.tokens_per_batch} residues, "
                f"fewer than the {self.world_size} ranks; lower tokens_per_batch"
            )

    def all_batches(self, epoch: int) -> list[list[int]]:
        """Every rank's batches of this epoch, in step order (identical on all ranks)."""
        if self.balance == "interleaved":
            return self._interleaved(epoch)
        batches, rng = self._packed(epoch)
        return self._balance(batches, rng)

    def _pools(self, epoch: int, steps: bool) -> tuple[list[np.ndarray], np.random.Generator]:
        """The epoch's shuffled order cut into pools of about pool_batches x budget residues
        (steps=True: pool_batches steps of world_size batches each)."""
        import numpy as np

        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.lengths)) if self.shuffle else np.arange(len(self.lengths))
        pool_tokens = self.pool_batches * self.tokens_per_batch * (self.world_size if steps else 1)
        pools, start = [], 0
        cumulative = np.cumsum(self.lengths[order])
        while start < len(order):
            base = cumulative[start - 1] if start else 0
            end = int(np.searchsorted(cumulative, base + pool_tokens, side="right"))
            end = max(end, start + 1)
            pools.append(order[start:end])
            start = end
        return pools, rng

    def _interleaved(self, epoch: int) -> list[list[int]]:
        pools, rng = self._pools(epoch, steps=True)
        world, steps, carried = self.world_size, [], []
        for pool in pools:
            batches, carried = pack_steps(self.lengths, [*carried, *pool.tolist()], self.tokens_per_batch, world)
            steps.extend(batches[i : i + world] for i in range(0, len(batches), world))
        order = rng.permutation(len(steps)) if self.shuffle else range(len(steps))
        return self._balance([batch for j in order for batch in steps[j]], rng)

    def _packed(self, epoch: int) -> tuple[list[list[int]], np.random.Generator]:
        pools, rng = self._pools(epoch, steps=False)
        batches = [b for pool in pools for b in pack_by_length(self.lengths, pool, self.tokens_per_batch)]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches, rng

    def _balance(self, batches: list[list[int]], rng: np.random.Generator) -> list[list[int]]:
        """Give the ranks batches of similar padded size at each step, since every step waits
        for the slowest rank: within chunks of BALANCE_STEPS steps, sort by padded size, cut into
        steps of world_size neighbours, and shuffle the steps. The last len % world_size batches
        are dropped."""
        world = self.world_size
        batches = batches[: len(batches) - len(batches) % world]
        if world == 1:
            return batches
        padded = {id(b): len(b) * int(self.lengths[b].max()) for b in batches}
        out: list[list[int]] = []
        chunk = world * BALANCE_STEPS
        for start in range(0, len(batches), chunk):
            ordered = sorted(batches[start : start + chunk], key=lambda b: padded[id(b)])
            steps = [ordered[i : i + world] for i in range(0, len(ordered), world)]
            for j in rng.permutation(len(steps)) if self.shuffle else range(len(steps)):
                out.extend(steps[j])
        return out

    def batches_per_rank(self, epoch: int) -> int:
        return len(self.all_batches(epoch)) // self.world_size

    def rank_batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of the epoch: every world_size-th batch."""
        return self.all_batches(epoch)[self.rank :: self.world_size]

    def iterate(self, epoch: int, position: int):
        """From (epoch, position) onwards, forever: yield (batch, next_epoch, next_position),
        where the next pair is where a checkpoint taken after this batch resumes."""
        while True:
            batches = self.rank_batches(epoch)
            for i in range(position, len(batches)):
                after = (epoch, i + 1) if i + 1 < len(batches) else (epoch + 1, 0)
                yield batches[i], after[0], after[1]
            epoch, position = epoch + 1, 0
