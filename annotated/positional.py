"""Embeddings scaled by sqrt(d_model) and sinusoidal positional encoding (paper §3.4, §3.5).

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Notebook: ``05_positional_encoding.ipynb``.
"""

import math

import torch
import torch.nn as nn

from annotated.support.checks import (
    check_embeddings_call, check_positional_call, check_sinusoidal_table_arguments,
)
from annotated.support.class_guards import check_call, checked


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """(max_len, d_model) table whose row ``pos`` is the encoding of position ``pos``; d_model even."""
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
    # 1 / 10000^(2i / d_model) for i = 0 .. d_model/2 - 1, computed in log space.
    inv_freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(pos * inv_freq)  # even dimensions
    table[:, 1::2] = torch.cos(pos * inv_freq)  # odd dimensions
    return table


class PositionalEncoding(nn.Module):
    """Add the fixed sinusoid of each position, then apply dropout (paper §5.4)."""

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len
        # A buffer: moved with .to(device), never trained, and (persistent=False) not in the
        # state_dict: a checkpoint does not store it; it is rebuilt from the formula.
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x (batch, L, d_model), the embeddings of positions start .. start + L - 1."""
        return self.dropout(x + self.pe[start : start + x.size(1)])


class Embeddings(nn.Module):
    """Token embeddings multiplied by sqrt(d_model) (paper §3.4, which gives no reason;
    notebook 05 measures what the factor does under several initializations)."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model)
        self.d_model = d_model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (batch, L) int64 -> (batch, L, d_model)."""
        return self.lut(tokens) * math.sqrt(self.d_model)


# The input guards, kept out of the code above: bad sizes, a sequence longer than the table or a
# token id outside the vocabulary get a ValueError naming them, before any work.
sinusoidal_table = checked(sinusoidal_table, check_sinusoidal_table_arguments)  # max_len >= 0, d_model even
check_call(PositionalEncoding, check_positional_call)  # (batch, L, d_model), start + L <= max_len
check_call(Embeddings, check_embeddings_call)  # token ids inside the vocabulary
