"""Rotary position embeddings, RoPE (Su et al., 2021, "RoFormer: Enhanced Transformer with
Rotary Position Embedding", §3.2, eq. 34).

Instead of adding a position vector to the input, rotate each query and key: split its d
features into d/2 pairs (x_{2i}, x_{2i+1}) and turn pair i of position m by the angle
m * theta_i, theta_i = 10000^(-2i/d) (the sinusoids' frequencies, §3.5 of the paper). A
rotation keeps lengths, and the dot product of two rotated vectors depends only on the
difference of their angles:

    <R(m) q, R(n) k> = <q, R(n - m) k>

so attention scores see only the offset n - m, not the absolute positions.

Notebook: ``14_positions.ipynb``.
"""

import torch

from annotated.attention import scaled_dot_product_attention
from annotated.multi_head import MultiHeadAttention
from annotated.support.checks import check_mask_shape
from annotated.support.variant_checks import check_rotary_sizes


def rotary_angles(length: int, d: int, start: int = 0, base: float = 10000.0) -> torch.Tensor:
    """(length, d/2) angles m * theta_i for positions m = start .. start + length - 1."""
    check_rotary_sizes(length, d, start)  # sizes >= 0, an even d, or a ValueError
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)  # (d/2,) theta_i
    positions = torch.arange(start, start + length, dtype=torch.float32)  # (length,)
    return positions[:, None] * theta[None, :]  # (length, d/2)


def rotate(x: torch.Tensor, start: int = 0) -> torch.Tensor:
    """Turn each pair (x_{2i}, x_{2i+1}) of position m by m * theta_i. x (..., L, d)."""
    angles = rotary_angles(x.size(-2), x.size(-1), start).to(x.device)  # (L, d/2)
    cos, sin = angles.cos(), angles.sin()
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., L, d/2) each: the two halves of every pair
    # The 2x2 rotation [[cos, -sin], [sin, cos]] applied to every pair.
    turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., L, d/2, 2)
    return turned.flatten(-2)  # (..., L, d), pairs back in place


class RotaryMultiHeadAttention(MultiHeadAttention):
    """Multi-head self-attention whose queries and keys are rotated by their positions.

    Values are not rotated (Su et al. rotate only q and k). Positions count from 0 in both
    the query and the key sequence, which is what self-attention over one sequence needs.
    """

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is not None:
            check_mask_shape(mask, torch.Size([query.size(0), query.size(1), key.size(1)]))
            mask = mask.unsqueeze(-3)  # the same mask for every head: (batch, 1, L_q, L_k)
        q = rotate(self.split_heads(self.W_Q(query)))  # (batch, h, L_q, d_k), turned by position
        k = rotate(self.split_heads(self.W_K(key)))  # (batch, h, L_k, d_k)
        v = self.split_heads(self.W_V(value))  # (batch, h, L_k, d_k)
        x, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)
        self.attention = weights.detach() if self.keep_attention else None
        return self.W_O(self.merge_heads(x))  # (batch, L_q, d_model)
