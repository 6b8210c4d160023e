"""Scaled dot-product attention (paper §3.2.1).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Notebook: ``02_scaled_dot_product_attention.ipynb``.
"""

import math

import torch
import torch.nn as nn


def check_mask_shape(mask: torch.Tensor, scores_shape: torch.Size) -> None:
    """Raise a clear error when ``mask`` cannot broadcast to the attention scores."""
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}; "
            "build it with annotated.masks or compare with a condition, e.g. tokens != pad_idx"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores_shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} cannot broadcast to the attention scores of "
            f"shape {tuple(scores_shape)} (..., queries, keys); give it shape (batch, 1, keys) "
            "for padding or (queries, keys) for a causal mask"
        )


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: nn.Dropout | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the attention output and the attention weights.

    Shapes: ``query`` (..., L_q, d_k), ``key`` (..., L_k, d_k), ``value`` (..., L_k, d_v);
    ``mask`` is a bool tensor broadcastable to (..., L_q, L_k), True where a query may
    attend to a key. Output (..., L_q, d_v), weights (..., L_q, L_k).

    A query whose keys are all masked gets all-zero weights (and a zero output), not NaN.
    """
    d_k = query.size(-1)
    if key.size(-1) != d_k:
        raise ValueError(f"query and key must share d_k, got {query.size(-1)} and {key.size(-1)}")
    # Scale so the dot products keep unit variance whatever d_k is (notebook 01).
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., L_q, L_k)
    if mask is not None:
        check_mask_shape(mask, scores.shape)
        # -inf before the softmax gives masked keys exactly zero weight.
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        # A fully masked row is softmax(-inf, ..., -inf) = NaN; such a query sees nothing.
        weights = weights.masked_fill(~mask, 0.0)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights  # (..., L_q, d_v), (..., L_q, L_k)
