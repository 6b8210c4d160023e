"""Multi-head attention (paper §3.2.2).

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

The h per-head projections W_i^Q (d_model x d_k) sit side by side in one
d_model x (h * d_k) matrix, so one matrix multiply projects every head at once.

Notebook: ``04_multi_head_attention.ipynb``.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.attention import check_mask_shape, scaled_dot_product_attention
from annotated.support.checks import check_multi_head_inputs, check_probability, check_sizes


class MultiHeadAttention(nn.Module):
    """h attention heads of width d_k = d_model / h, and the output projection W^O.

    Args:
        d_model: width of the inputs and outputs.
        h: number of heads; must divide ``d_model``.
        dropout: dropout on the attention weights. Not in the paper, which drops out only
            sub-layer outputs and embedding sums (§5.4); tensor2tensor and the Harvard
            Annotated Transformer add it. Default 0.0, the paper's model.
        fast: use ``F.scaled_dot_product_attention`` (fused kernels) when the weights
            are not kept: the same outputs as the explicit computation in eval mode (tested);
            with attention dropout in training, the same only in distribution.

    Set ``keep_attention = True`` to store the last weights, (batch, h, L_q, L_k), in
    ``self.attention`` for plotting; it is off by default so it costs nothing.
    """

    def __init__(self, d_model: int, h: int, dropout: float = 0.0, fast: bool = True):
        super().__init__()
        check_sizes(d_model=d_model, h=h)  # positive integers, or a ValueError naming them
        check_probability("dropout", dropout)
        if d_model % h != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by h={h}: each head needs "
                f"d_k = d_model / h columns; pick h among the divisors of d_model "
                f"(e.g. h=8 for d_model=512)"
            )
        self.d_model, self.h, self.d_k = d_model, h, d_model // h
        # All h heads' W_i^Q side by side: (d_model, h * d_k); likewise K and V.
        # nn.Linear adds a bias, which the paper's matrices do not have: the convention of
        # nn.MultiheadAttention (bias=True) and the Harvard notebook; tensor2tensor has none.
        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        self.W_O = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.fast = fast
        self.keep_attention = False
        self.attention: torch.Tensor | None = None

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, L, d_model) -> (batch, h, L, d_k)."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.h, self.d_k).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, h, L, d_k) -> (batch, L, d_model): the concatenation of the heads."""
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.d_model)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """query (batch, L_q, d_model), key and value (batch, L_k, d_model);
        mask bool, 3-D: (batch or 1, L_q or 1, L_k). Returns (batch, L_q, d_model)."""
        if query.size(-1) != self.d_model or key.size(-1) != self.d_model:
            raise ValueError(
                f"expected inputs of width d_model={self.d_model}, got query {tuple(query.shape)} "
                f"and key {tuple(key.shape)}"
            )
        check_multi_head_inputs(query, key, value, self.d_model)  # (batch, L, d_model) each, or a clear error
        if mask is not None:
            check_mask_shape(mask, torch.Size([query.size(0), query.size(1), key.size(1)]))
            mask = mask.unsqueeze(-3)  # the same mask for every head: (batch, 1, L_q, L_k)
        q = self.split_heads(self.W_Q(query))  # (batch, h, L_q, d_k)
        k = self.split_heads(self.W_K(key))  # (batch, h, L_k, d_k)
        v = self.split_heads(self.W_V(value))  # (batch, h, L_k, d_k)
        if self.fast and not self.keep_attention:
            p = self.dropout.p if self.training else 0.0
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            if mask is not None:
                # Whatever the backend, a query that may attend to nothing outputs 0, as in
                # scaled_dot_product_attention.
                x = x.masked_fill(~mask.any(-1, keepdim=True), 0.0)
            self.attention = None  # no weights computed: drop those of an earlier call
        else:
            x, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)
            self.attention = weights.detach() if self.keep_attention else None
        return self.W_O(self.merge_heads(x))  # (batch, L_q, d_model)
