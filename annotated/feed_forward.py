"""Position-wise feed-forward network (paper §3.3).

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

applied to every position separately and identically.

The paper's formula has no dropout inside the network, and the paper never mentions one there
(§5.4 specifies dropout for the translation models at the sub-layer outputs and the embedding
sums only). ``dropout`` here acts on the ReLU's output, as tensor2tensor's later
``relu_dropout`` setting and the Harvard Annotated Transformer do; it defaults to 0.0, the
paper's network.

Notebook: ``06_feed_forward_residual_layer_norm.ipynb``.
"""

import torch
import torch.nn as nn

from annotated.support.checks import check_feed_forward_arguments
from annotated.support.class_guards import check_arguments


class PositionwiseFeedForward(nn.Module):
    """Two linear maps with a ReLU between: d_model -> d_ff -> d_model.
    ``dropout`` on the hidden layer is not in the paper (0.0 by default)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.W_1 = nn.Linear(d_model, d_ff)
        self.W_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, L, d_model) -> (batch, L, d_model); positions never mix."""
        return self.W_2(self.dropout(self.W_1(x).relu()))


# The input guard, kept out of the class: sizes that are not positive integers, or a dropout
# outside [0, 1), get a ValueError naming them before any weight is built.
check_arguments(PositionwiseFeedForward, check_feed_forward_arguments)
