"""Linformer: keys and values projected along the sequence axis (Wang et al., 2020,
"Linformer: Self-Attention with Linear Complexity").

The premise (their Figure 1 and Theorem 1): the n × n attention matrix P = softmax(QK^T / sqrt(d_k)) is
close to low-rank, most of its spectrum in a few singular values. So project the n keys and
the n values down to k rows with learned (k, n) matrices E and F,

    head = softmax(Q (E K)^T / sqrt(d_k)) (F V),

an n × k matrix of weights instead of n × n: O(n · k · d) time and memory. With k = n and
E = F = I it is attention exactly (tested). The premise can be measured on any trained model:
``singular_values`` of its attention matrices and ``rank_for_energy``, the smallest rank r
whose best rank-r approximation keeps a given share of the energy (the sum of squared
singular values, Eckart–Young).

Notebook: ``13_the_cost_of_attention.ipynb``.
"""

import torch

from annotated.attention import scaled_dot_product_attention
from annotated.support.class_guards import checked
from annotated.support.variant_checks import (check_attention_matrices, check_energy, check_projections,
                                              check_rank_inputs)


def linformer_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        E: torch.Tensor, F: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over k projected keys and values.

    Shapes: query (..., n, d_k), key (..., n, d_k), value (..., n, d_v), E and F (k, n).
    Returns the output (..., n, d_v) and the weights (..., n, k).
    """
    check_projections(key, E, F)  # E and F (k, n) for the n positions of the keys, or a clear error
    projected_key = E @ key  # (k, n) @ (..., n, d_k) -> (..., k, d_k)
    projected_value = F @ value  # (..., k, d_v)
    return scaled_dot_product_attention(query, projected_key, projected_value)


def singular_values(weights: torch.Tensor) -> torch.Tensor:
    """Singular values of each attention matrix (..., L_q, L_k), largest first: (..., min(L_q, L_k))."""
    return torch.linalg.svdvals(weights.double())


def rank_for_energy(weights: torch.Tensor, energy: float = 0.9) -> torch.Tensor:
    """The smallest rank r whose best rank-r approximation keeps ``energy`` of each matrix's
    squared singular values: (...,) integers between 1 and min(L_q, L_k)."""
    check_energy(energy)  # a share in (0, 1], or a ValueError
    s2 = singular_values(weights) ** 2  # (..., r_max)
    kept = s2.cumsum(-1) / s2.sum(-1, keepdim=True)  # share kept by ranks 1, 2, ...
    # Ranks whose share is still short of the goal, plus one (a small slack for rounding).
    return (kept < energy - 1e-9).sum(-1) + 1


# The input guards the notebook's cells leave out: matrices of finite weights (NaN would stop the singular
# value decomposition with LinAlgError), none all zeros (no energy to keep: its rank would read as 1).
singular_values = checked(singular_values, check_attention_matrices)
rank_for_energy = checked(rank_for_energy, check_rank_inputs)
