"""Masks: padding, look-ahead ("subsequent") and their combination (paper §3.2.3).

Every mask is a bool tensor, True where a query may attend to a key, the same
convention as ``F.scaled_dot_product_attention``'s bool ``attn_mask``.
(``nn.Transformer`` uses the opposite: True there means *masked out*.)

Notebook: ``03_masking.ipynb``.
"""

import torch

from annotated.support.checks import check_sizes
from annotated.support.translation_guards import guarded, padding_mask_inputs


def subsequent_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(size, size) mask where query position i may attend to key positions j <= i."""
    check_sizes(allow_zero=True, size=size)
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def padding_mask(tokens: torch.Tensor, pad_idx: int) -> torch.Tensor:
    """(batch, 1, length) mask, False at padding keys; broadcasts over every query."""
    return (tokens != pad_idx).unsqueeze(-2)


def target_mask(tokens: torch.Tensor, pad_idx: int) -> torch.Tensor:
    """(batch, length, length) decoder self-attention mask: no padding and no look-ahead."""
    return padding_mask(tokens, pad_idx) & subsequent_mask(tokens.size(-1), tokens.device)


# The input guard (annotated/support/translation_guards.py), which the notebook's cells leave out: a
# tensor of ids and an integer pad_idx; target_mask calls the guarded padding_mask.
padding_mask = guarded(padding_mask, padding_mask_inputs)
