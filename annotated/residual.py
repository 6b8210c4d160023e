"""Residual connection with dropout and layer normalization (paper §3.1, §5.4).

Post-norm, as in the paper:  LayerNorm(x + Dropout(Sublayer(x)))
Pre-norm, an option that trains deep stacks more easily:  x + Dropout(Sublayer(LayerNorm(x)))

Notebook: ``06_feed_forward_residual_layer_norm.ipynb``.
"""

from collections.abc import Callable

import torch
import torch.nn as nn

from annotated.layer_norm import LayerNorm


class SublayerConnection(nn.Module):
    """Wrap a sublayer (attention or feed-forward) with the residual path and a norm."""

    def __init__(self, d_model: int, dropout: float = 0.1, norm_first: bool = False):
        super().__init__()
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))
