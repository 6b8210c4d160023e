"""Multi-head attention (paper §3.2.2).

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

The h per-head projections W_i^Q (d_model x d_k) sit side by side in one
d_model x (h * d_k) matrix, so one matrix multiply projects every head at once.

``dropout`` acts on the attention weights and is 0.0 by default, as in the translation models
of §5.4, which specifies dropout in two places only (each sub-layer's output, and the sums of
embeddings and positional encodings). The paper mentions attention dropout once, in §6.3 on
parsing ("the dropout, both attention and residual"), without saying where or how much;
tensor2tensor, the authors' code base, applies its ``attention_dropout`` to the attention weights.

Notebook: ``04_multi_head_attention.ipynb``.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.attention import scaled_dot_product_attention
from annotated.support.checks import check_multi_head_arguments, check_multi_head_call
from annotated.support.class_guards import check_arguments, check_call


class MultiHeadAttention(nn.Module):
    """h heads of width d_k = d_model / h, and the output projection W^O (paper §3.2.2). ``fast``:
    F.scaled_dot_product_attention when the weights are not kept (the same outputs, tested)."""

    def __init__(self, d_model: int, h: int, dropout: float = 0.0, fast: bool = True):
        super().__init__()
        self.d_model, self.h, self.d_k = d_model, h, d_model // h  # h divides d_model
        # All h heads' W_i^Q side by side: (d_model, h * d_k); likewise K, V. nn.Linear adds biases.
        self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(dropout)  # on the attention weights: off by default, as in §5.4
        self.fast, self.keep_attention, self.attention = fast, False, None  # keep_attention: below

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, L, d_model) -> (batch, h, L, d_k)."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.h, self.d_k).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, h, L, d_k) -> (batch, L, d_model): the concatenation of the heads."""
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.d_model)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """query (batch, L_q, d_model), key and value (batch, L_k, d_model); mask bool (True = may
        attend), (batch or 1, L_q or 1, L_k), the same for every head. Returns (batch, L_q, d_model)."""
        mask = None if mask is None else mask.unsqueeze(-3)  # (batch or 1, 1, L_q or 1, L_k)
        q = self.split_heads(self.W_Q(query))  # (batch, h, L_q, d_k)
        k = self.split_heads(self.W_K(key))  # (batch, h, L_k, d_k)
        v = self.split_heads(self.W_V(value))  # (batch, h, L_k, d_k)
        if self.fast and not self.keep_attention:
            p = self.dropout.p if self.training else 0.0
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            if mask is not None:  # a query that may attend to nothing outputs 0, as in notebook 02
                x = x.masked_fill(~mask.any(-1, keepdim=True), 0.0)
            self.attention = None  # no weights computed: drop those of an earlier call
        else:
            x, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)
            self.attention = weights.detach() if self.keep_attention else None
        return self.W_O(self.merge_heads(x))  # (batch, L_q, d_model)


# The input guards, kept out of the class: bad sizes or shapes get a ValueError naming them.
check_arguments(MultiHeadAttention, check_multi_head_arguments)  # h divides d_model, 0 <= dropout < 1
check_call(MultiHeadAttention, check_multi_head_call)  # inputs (batch, L, d_model), a mask that fits
