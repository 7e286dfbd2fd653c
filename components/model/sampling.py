"""Letter picking shared by the PyTorch and onnxruntime design paths, so both turn the same
logits and the same uniforms into the same letters."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from invfold.components.protein.alphabet import ALPHABET, NUM_AA
from invfold.errors import ConfigError


def letter_bias(excluded: str = "") -> torch.Tensor:
    """[20] additive logit bias: -inf for each excluded letter."""
    unknown = sorted(set(excluded.upper()) - set(ALPHABET))
    if unknown:
        raise ConfigError(f"excluded letters {unknown} are not among the 20 amino acids {ALPHABET}")
    bias = torch.zeros(NUM_AA)
    for letter in set(excluded.upper()):
        bias[ALPHABET.index(letter)] = float("-inf")
    if torch.isinf(bias).all():
        raise ConfigError("excluded letters: all 20 amino acids are excluded; nothing can be designed")
    return bias


def letter_probs(logits: torch.Tensor, temperature: float, bias: torch.Tensor) -> torch.Tensor:
    """softmax(logits / T + bias) [..., 20]: the distribution a letter is drawn from."""
    return torch.softmax(logits.float() / temperature + bias.float(), dim=-1)


def pick_letters(logits: torch.Tensor, temperature: float, bias: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling from softmax(logits / T + bias): logits [..., 20], uniforms [...]."""
    return pick_from(letter_probs(logits, temperature, bias), uniforms)


def pick_from(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling from probs [..., 20] (letters of probability 0 never picked)."""
    cdf = torch.cumsum(probs, dim=-1)
    u = (uniforms.float() * cdf[..., -1]).unsqueeze(-1)
    letters = torch.searchsorted(cdf.contiguous(), u.contiguous(), right=True).squeeze(-1)
    # rounding at the top end must not land on an excluded (zero-probability) letter
    letters = letters.clamp(max=NUM_AA - 1)
    allowed = probs.gather(-1, letters.unsqueeze(-1)).squeeze(-1) > 0
    return torch.where(allowed, letters, probs.argmax(-1))


@dataclass
class Groups:
    """Positions decoded together (ProteinMPNN's tied positions), one letter per group.

    members: long [G, M], the positions of each group; a group with fewer than M members repeats
        its first member, with weight 0 (the repeat is computed like the first and never counted).
    weights: float [G, M], each member's weight in the group's logits (ProteinMPNN's tied_beta; 0
        for repeats and for members without a backbone).
    bias: float [G, 20], added to logits / T: the mean over the group's members of their
        per-position bias (global + per-residue, already divided by T), -inf for letters omitted at
        any member or excluded everywhere.
    size: float [G], the members listed in each group, weight 0 or not (repeats excluded): the n
        of ProteinMPNN's sum(tied_beta * logits) / n (`tied_sample` divides by len(t_list)). None:
        the members with a nonzero weight.
    pssm_coef, pssm_bias, pssm_weight: ProteinMPNN's PSSM inputs, applied to the probabilities
        (None: none). coef [G] (pssm_multi * pssm_coef; 0 without --pssm_bias_flag), bias [G, 20]
        (the PSSM's distribution), weight [G, 20] (1.001 where the log-odds exceed the threshold,
        0.001 elsewhere; 1 without --pssm_log_odds_flag): p = ((1 - coef) p + coef bias) * weight,
        renormalized, letters whose bias is -inf (omitted, excluded) kept at 0 (group_distribution).
    Every position is in exactly one group; untied positions are groups of one, in position order.
    """

    members: torch.Tensor
    weights: torch.Tensor
    bias: torch.Tensor
    size: torch.Tensor | None = None
    pssm_coef: torch.Tensor | None = None
    pssm_bias: torch.Tensor | None = None
    pssm_weight: torch.Tensor | None = None

    def __post_init__(self):
        if self.size is None:
            self.size = (self.weights != 0).sum(-1).clamp(min=1).to(torch.float32)

    def with_bias(self, extra: torch.Tensor) -> Groups:
        """The same groups with `extra` [20] added to every group's bias."""
        return dataclasses.replace(self, bias=self.bias + extra)

    @staticmethod
    def singletons(length: int, bias: torch.Tensor | None = None, observed: torch.Tensor | None = None) -> Groups:
        members = torch.arange(length).unsqueeze(1)
        weights = torch.ones(length, 1) if observed is None else observed.float().reshape(length, 1)
        bias = torch.zeros(length, NUM_AA) if bias is None else bias.expand(length, NUM_AA)
        return Groups(members, weights, bias.float().contiguous())

    def to(self, device) -> Groups:
        pssm = (None if t is None else t.to(device) for t in (self.pssm_coef, self.pssm_bias, self.pssm_weight))
        return Groups(
            self.members.to(device), self.weights.to(device), self.bias.to(device), self.size.to(device), *pssm
        )


def listed_members(groups: Groups, g: torch.Tensor) -> torch.Tensor:
    """bool [B, M]: which columns of groups g [B] are listed members (the repeats that pad a group
    to M columns are not)."""
    members = groups.members[g]
    listed = members != members[..., :1]
    listed[..., 0] = True
    return listed


def tied_order(decoding_order: torch.Tensor, groups: Groups) -> tuple[torch.Tensor, torch.Tensor]:
    """(order [B, L], steps [B, G]: the groups in decoding order), as ProteinMPNN's `tied_sample`
    decodes tied positions: a group takes its turn at its earliest member's place in the order,
    then its members follow one another in the order the group lists them, so a later member sees
    an earlier one as decoded. Untied positions keep their places. The order's values are ranks
    scaled into [0, 1): what is added to them later (+2: after every other residue) still applies,
    and ordering again gives the same order."""
    first = decoding_order[:, groups.members].amin(-1)  # [B, G]: repeats do not change the minimum
    steps = torch.argsort(first, dim=1, stable=True)
    count, width = groups.members.shape
    rank = torch.empty_like(steps)
    rank.scatter_(1, steps, torch.arange(count, device=steps.device).expand_as(steps))
    order = torch.empty_like(decoding_order)
    for j in reversed(range(width)):  # a repeat (column j > 0) is overwritten by its first member
        order[:, groups.members[:, j]] = ((rank * width + j) / (count * width)).to(order.dtype)
    return order, steps


def group_logits(logits: torch.Tensor, groups: Groups, g: torch.Tensor) -> torch.Tensor:
    """[B, 20] logits of groups g [B] from their members' logits [B, M, 20]: the weighted sum over
    the group's size (the mean when all weights are 1; a member of weight 0 still counts, as in
    ProteinMPNN's tied_sample: sum(tied_beta * logits) / len(group))."""
    w = groups.weights[g].to(logits.dtype)  # [B, M]
    counted = groups.size[g].to(logits.dtype).clamp(min=1).unsqueeze(-1)
    return (logits * w.unsqueeze(-1)).sum(1) / counted


def group_distribution(mixed: torch.Tensor, groups: Groups, g: torch.Tensor, temperature: float) -> torch.Tensor:
    """[B, 20] what groups g [B] draw their letter from, given their combined logits [B, 20]:
    softmax(logits / T + bias), then ProteinMPNN's PSSM steps in its order (`sample`: mix with the
    PSSM's distribution, weight by the log-odds mask, renormalize), omitted letters kept at 0."""
    probs = letter_probs(mixed, temperature, groups.bias[g])
    if groups.pssm_coef is None:
        return probs
    coef = groups.pssm_coef[g].unsqueeze(-1)
    mixed_probs = ((1 - coef) * probs + coef * groups.pssm_bias[g]) * groups.pssm_weight[g]
    mixed_probs = mixed_probs.masked_fill(torch.isneginf(groups.bias[g]), 0.0)
    total = mixed_probs.sum(-1, keepdim=True)
    return torch.where(total > 0, mixed_probs / total.clamp(min=1e-30), probs)  # nothing left: the model's


def group_probs(logits: torch.Tensor, groups: Groups, temperature: float) -> torch.Tensor:
    """[G, 20] the distribution each group's letter is drawn from, given every position's logits
    [L, 20] as the group saw them at its turn (teacher-forced in the decoding order it was sampled in)."""
    g = torch.arange(groups.members.shape[0], device=logits.device)
    return group_distribution(group_logits(logits[groups.members], groups, g), groups, g, temperature)


def pick_group_letters(
    logits: torch.Tensor, groups: Groups, g: torch.Tensor, temperature: float, uniforms: torch.Tensor
) -> torch.Tensor:
    """One letter per sample for groups g [B] from the members' logits [B, M, 20] (group_logits),
    sampled with the uniform of the group's first member (uniforms [B, L])."""
    probs = group_distribution(group_logits(logits, groups, g), groups, g, temperature)
    rows = torch.arange(g.shape[0], device=g.device)
    return pick_from(probs, uniforms[rows, groups.members[g, 0]])
