"""Letter picking shared by the PyTorch and onnxruntime design paths, so both turn the same
logits and the same uniforms into the same letters."""

from __future__ import annotations

import torch

from invfold.errors import ConfigError

from ..protein.alphabet import ALPHABET, NUM_AA


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


def pick_letters(logits: torch.Tensor, temperature: float, bias: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling from softmax(logits / T + bias): logits [..., 20], uniforms [...]."""
    probs = torch.softmax(logits.float() / temperature + bias.float(), dim=-1)
    cdf = torch.cumsum(probs, dim=-1)
    u = (uniforms.float() * cdf[..., -1]).unsqueeze(-1)
    letters = torch.searchsorted(cdf.contiguous(), u.contiguous(), right=True).squeeze(-1)
    # rounding at the top end must not land on an excluded (zero-probability) letter
    letters = letters.clamp(max=NUM_AA - 1)
    allowed = probs.gather(-1, letters.unsqueeze(-1)).squeeze(-1) > 0
    return torch.where(allowed, letters, probs.argmax(-1))
