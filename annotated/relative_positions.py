"""Relative position self-attention (Shaw, Uszkoreit and Vaswani, 2018, "Self-Attention with
Relative Position Representations", §3) and the "skewing" of Music Transformer (Huang et al.,
2018, "Music Transformer", §3.4.1).

Shaw et al. give the edge from position i to position j two learned vectors, a^K_ij and
a^V_ij (d_k wide), that depend only on the clipped offset clip(j - i, -k, k): 2k + 1 vectors
of each kind, shared by every head. Attention becomes (their eqs. 3 and 4)

    e_ij = q_i (k_j + a^K_ij)^T / sqrt(d_k),     z_i = sum_j alpha_ij (v_j + a^V_ij).

Computed this way, the a^K_ij of every pair make an (L, L, d_k) tensor: O(L^2 D) memory.
Huang et al. keep only the key term, one vector E_r per offset r = -(L-1) .. 0 (a decoder
looks back only), and get the L x L relative logits S_rel[i, j] = q_i . E_{j-i} from the
L x L product Q E^T by a "skew": pad a zero column on the left, reshape to (L + 1, L), drop
the first row. The memory is O(L D) for E plus the L x L logits the attention has anyway.

Notebook: ``14_positions.ipynb``.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from annotated.multi_head import MultiHeadAttention
from annotated.support.checks import check_mask_shape, check_sizes
from annotated.support.class_guards import checked
from annotated.support.variant_checks import (check_offset_table, check_relative_attention_inputs,
                                              check_relative_vectors, check_skew_input)


def relative_positions(length_q: int, length_k: int, max_distance: int) -> torch.Tensor:
    """(length_q, length_k) row indices clip(j - i, -k, k) + k into a table of 2k + 1 vectors."""
    check_sizes(allow_zero=True, length_q=length_q, length_k=length_k, max_distance=max_distance)
    offsets = torch.arange(length_k)[None, :] - torch.arange(length_q)[:, None]  # (L_q, L_k): j - i
    return offsets.clamp(-max_distance, max_distance) + max_distance  # 0 .. 2k


def relative_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, a_k: torch.Tensor,
                       a_v: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Shaw et al.'s eqs. 3 and 4. query (..., L_q, d_k), key and value (..., L_k, d_k),
    a_k and a_v (L_q, L_k, d_k), mask bool (..., L_q or 1, L_k). Returns output and weights."""
    check_relative_vectors(query, key, a_k, a_v)  # both (L_q, L_k, d_k), or a ValueError
    content = query @ key.transpose(-2, -1)  # (..., L_q, L_k): q_i . k_j
    position = torch.einsum("...id,ijd->...ij", query, a_k)  # (..., L_q, L_k): q_i . a^K_ij
    scores = (content + position) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # a query that sees nothing: zeros, not NaN
    out = weights @ value + torch.einsum("...ij,ijd->...id", weights, a_v)  # (..., L_q, d_k)
    return out, weights


class RelativeMultiHeadAttention(MultiHeadAttention):
    """Multi-head self-attention with Shaw et al.'s relative positions, clipped at
    ``max_distance`` (their k; they use k = 16 and find no gain beyond 2 in their Table 4).
    The 2k + 1 vectors w^K and w^V are shared by all heads, as in the paper."""

    def __init__(self, d_model: int, h: int, max_distance: int = 16, dropout: float = 0.0):
        super().__init__(d_model, h, dropout, fast=False)
        check_sizes(max_distance=max_distance)
        self.max_distance = max_distance
        self.w_K = nn.Embedding(2 * max_distance + 1, self.d_k)  # a^K_ij = w_K[clip(j - i) + k]
        self.w_V = nn.Embedding(2 * max_distance + 1, self.d_k)  # a^V_ij = w_V[clip(j - i) + k]

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is not None:
            check_mask_shape(mask, torch.Size([query.size(0), query.size(1), key.size(1)]))
            mask = mask.unsqueeze(-3)  # the same mask for every head: (batch, 1, L_q, L_k)
        q = self.split_heads(self.W_Q(query))  # (batch, h, L_q, d_k)
        k = self.split_heads(self.W_K(key))  # (batch, h, L_k, d_k)
        v = self.split_heads(self.W_V(value))  # (batch, h, L_k, d_k)
        index = relative_positions(q.size(-2), k.size(-2), self.max_distance).to(q.device)  # (L_q, L_k)
        x, weights = relative_attention(q, k, v, self.w_K(index), self.w_V(index), mask)
        self.attention = weights.detach() if self.keep_attention else None
        return self.W_O(self.merge_heads(x))  # (batch, L_q, d_model)


def naive_relative_logits(q: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """S_rel[i, j] = q_i . E_{j - i} for j <= i (0 above the diagonal), by building the
    (L, L, D) tensor R[i, j] = E_{j - i}: O(L^2 D) memory. q (..., L, D); E (L, D), row r
    the vector of offset r - (L - 1), i.e. offsets -(L-1) .. 0."""
    check_offset_table(q, E)  # (L, D), or a ValueError
    L = q.size(-2)
    offsets = torch.arange(L)[None, :] - torch.arange(L)[:, None]  # (L, L): j - i
    R = E[(offsets + L - 1).clamp(max=L - 1)]  # (L, L, D), the memory the skew avoids
    R = R * (offsets <= 0)[..., None]  # no offset > 0 in a decoder: zero there
    return torch.einsum("...id,ijd->...ij", q, R)  # (..., L, L)


def skew(qe: torch.Tensor) -> torch.Tensor:
    """(..., L, L) Q E^T, column r for offset r - (L - 1), -> (..., L, L) S_rel, column j for
    key j: pad a column on the left, reshape to (L + 1, L), drop the first row."""
    L = qe.size(-1)
    padded = F.pad(qe, (1, 0))  # (..., L, L + 1)
    reshaped = padded.reshape(*qe.shape[:-2], L + 1, L)  # (..., L + 1, L)
    return reshaped[..., 1:, :]  # (..., L, L); entries above the diagonal are leftovers, masked later


def skewed_relative_logits(q: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """The same S_rel as ``naive_relative_logits`` on and below the diagonal, from the
    (L, L) product Q E^T: O(L D) memory beyond the logits."""
    check_offset_table(q, E)  # (L, D), or a ValueError
    return skew(q @ E.transpose(-2, -1))  # (..., L, L)


# The input guards the notebook's cells leave out: a square (..., L, L) input for the skew, or the reshape
# fails; a bool mask that fits the scores, or the masked_fill fails deep inside PyTorch.
skew = checked(skew, check_skew_input)
relative_attention = checked(relative_attention, check_relative_attention_inputs)
