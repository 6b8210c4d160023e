"""Learned absolute positions: the paper's Table 3 row (E), "positional embedding instead of
sinusoids" (§3.5: "We also experimented with using learned positional embeddings [9] instead,
and found that the two versions produced nearly identical results").

One trained vector per position, added to the token embedding exactly where the sinusoid
was: a drop-in for ``annotated.positional.PositionalEncoding`` (same arguments, same
``forward(x, start)``), so training, the key/value cache and greedy decoding work unchanged.
The price is in the table's size: a position beyond ``max_len`` has no vector, and a
position the training data never reached keeps its random initial one.

Notebook: ``12_positions.ipynb``.
"""

import torch
import torch.nn as nn

from annotated.support.checks import check_features, check_sizes


class LearnedPositionalEncoding(nn.Module):
    """Add a trained vector per position, then apply dropout (paper Table 3, row E).

    The table is an ``nn.Embedding(max_len, d_model)``, initialized N(0, 1) (PyTorch's
    default; the paper states none): about the spread of the scaled token embeddings.
    """

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        check_sizes(d_model=d_model, max_len=max_len)
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)  # row pos: the vector of position pos

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x (batch, L, d_model), the embeddings of positions start .. start + L - 1."""
        check_features(x, self.table.embedding_dim, "LearnedPositionalEncoding")
        check_sizes(allow_zero=True, start=start)
        length = x.size(1)
        if start + length > self.max_len:
            raise ValueError(
                f"sequence of length {start + length} is longer than the learned table "
                f"(max_len={self.max_len}): a learned table has no vector for later positions; "
                f"build it with a larger max_len or truncate the input"
            )
        positions = torch.arange(start, start + length, device=x.device)  # (L,)
        return self.dropout(x + self.table(positions))  # (batch, L, d_model)
