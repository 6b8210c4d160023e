"""Learned absolute positions: the paper's Table 3 row (E), "positional embedding instead of
sinusoids" (§3.5: "We also experimented with using learned positional embeddings [9] instead,
and found that the two versions produced nearly identical results").

One trained vector per position, added to the token embedding exactly where the sinusoid
was: a drop-in for ``annotated.positional.PositionalEncoding`` (same arguments, same
``forward(x, start)``), so training, the key/value cache and greedy decoding work unchanged.
The price is in the table's size: a position beyond ``max_len`` has no vector, and a
position the training data never reached keeps its random initial one.

Notebook: ``14_positions.ipynb``.
"""

import torch
import torch.nn as nn

from annotated.support.checks import check_sizes
from annotated.support.variant_checks import check_learned_positions_input


class LearnedPositionalEncoding(nn.Module):
    """Add a trained vector per position, then apply dropout (paper Table 3, row E).

    The table is an ``nn.Embedding(max_len, d_model)``, initialized N(0, 1) (PyTorch's
    default; the paper states none). That is the spread of the scaled token embeddings only for
    a small vocabulary: after ``make_model``'s Glorot initialization and the sqrt(d_model) scaling
    theirs is sqrt(2 d_model / (V + d_model)), 1.21 for notebook 14's copy task (V = 24, d_model = 64)
    but 0.235 at notebook 15's size (V = 4523, d_model = 128) and 0.243 at the shipped model's
    (V = 8413, d_model = 256): there the table starts about 4 times the token signal, where the
    sinusoids' RMS is 0.71.
    """

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        check_sizes(d_model=d_model, max_len=max_len)
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)  # row pos: the vector of position pos

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x (batch, L, d_model), the embeddings of positions start .. start + L - 1."""
        check_learned_positions_input(x, start, self.table)  # (batch, L, d_model) within max_len, or a clear error
        positions = torch.arange(start, start + x.size(1), device=x.device)  # (L,)
        return self.dropout(x + self.table(positions))  # (batch, L, d_model)
