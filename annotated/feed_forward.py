"""Position-wise feed-forward network (paper §3.3).

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

applied to every position separately and identically.

Notebook: ``06_feed_forward_residual_layer_norm.ipynb``.
"""

import torch
import torch.nn as nn


class PositionwiseFeedForward(nn.Module):
    """Two linear maps with a ReLU between: d_model -> d_ff -> d_model."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        self.W_1 = nn.Linear(d_model, d_ff)
        self.W_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, L, d_model) -> (batch, L, d_model); positions never mix."""
        return self.W_2(self.dropout(self.W_1(x).relu()))
