"""Scaled dot-product attention (paper §3.2.1).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Notebook: ``02_scaled_dot_product_attention.ipynb``. The input checks live in
``annotated.support.checks`` (``check_mask_shape`` is imported here too, for older imports).
"""

import math

import torch
import torch.nn as nn

from annotated.support.checks import check_attention_inputs, check_mask_shape  # noqa: F401


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: nn.Dropout | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the attention output and the attention weights.

    Shapes: ``query`` (..., L_q, d_k), ``key`` (..., L_k, d_k), ``value`` (..., L_k, d_v);
    ``mask`` a bool tensor (..., L_q or 1, L_k) with as many dimensions as the scores,
    True where a query may attend to a key. Output (..., L_q, d_v), weights (..., L_q, L_k).

    A query whose keys are all masked gets all-zero weights (and a zero output), not NaN.
    ``dropout`` on the weights is tensor2tensor's ``attention_dropout``, not one of §5.4's two
    dropout sites (notebook 02); ``TransformerConfig.attention_dropout`` is 0 unless asked for.
    """
    check_attention_inputs(query, key, value, mask)  # shapes that fit, or a clear error
    # Scale: unit-variance scores for unit-variance queries and keys, whatever d_k (notebook 01).
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., L_q, L_k)
    if mask is not None:
        # -inf before the softmax gives masked keys exactly zero weight.
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        # A fully masked row is softmax(-inf, ..., -inf) = NaN; such a query sees nothing.
        weights = weights.masked_fill(~mask, 0.0)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights  # (..., L_q, d_v), (..., L_q, L_k)
