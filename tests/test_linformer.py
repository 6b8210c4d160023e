"""Linformer: attention over projected keys and values, and the low-rank measure."""

import pytest
import torch
import torch.nn.functional as F

from annotated.linformer import linformer_attention, rank_for_energy, singular_values


@pytest.mark.parametrize("shape, d_v", [((2, 3, 10, 8), 6), ((1, 7, 5), 5)])
def test_with_k_equal_n_and_identity_projections_it_is_attention(shape, d_v):
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    v = torch.randn(*shape[:-1], d_v, generator=g)
    eye = torch.eye(shape[-2])
    out, weights = linformer_attention(q, k, v, eye, eye)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    assert weights.shape == (*shape[:-1], shape[-2])


@pytest.mark.parametrize("n, k", [(12, 3), (20, 5)])
def test_projected_attention_has_n_by_k_weights_and_matches_by_hand(n, k):
    g = torch.Generator().manual_seed(1)
    q, key, v = (torch.randn(2, n, 4, generator=g) for _ in range(3))
    E, F_ = torch.randn(k, n, generator=g), torch.randn(k, n, generator=g)
    out, weights = linformer_attention(q, key, v, E, F_)
    assert weights.shape == (2, n, k)
    by_hand = torch.softmax(q @ (E @ key).transpose(-2, -1) / 2.0, dim=-1) @ (F_ @ v)
    torch.testing.assert_close(out, by_hand)


def test_a_projection_of_the_wrong_length_is_named():
    q = torch.randn(1, 6, 4)
    with pytest.raises(ValueError, match=r"E of shape \(2, 5\) must be \(k, n\) = \(k, 6\)"):
        linformer_attention(q, q, q, torch.randn(2, 5), torch.randn(2, 6))


def test_singular_values_match_numpy():
    w = torch.softmax(torch.randn(3, 6, 6), -1)
    import numpy as np
    expected = torch.from_numpy(np.linalg.svd(w.double().numpy(), compute_uv=False))
    torch.testing.assert_close(singular_values(w), expected)


def test_rank_for_energy_counts_what_a_low_rank_matrix_needs():
    assert rank_for_energy(torch.eye(7)).item() == 7  # every direction holds 1/7 of the energy
    assert rank_for_energy(torch.eye(10), 0.5).item() == 5
    assert rank_for_energy(torch.full((5, 5), 0.2)).item() == 1  # uniform attention: rank 1
    g = torch.Generator().manual_seed(0)
    low = torch.randn(2, 30, 3, generator=g) @ torch.randn(2, 3, 30, generator=g)  # rank 3
    assert (rank_for_energy(low, 1.0) == 3).all()
    assert (rank_for_energy(low, 0.9) <= 3).all()


def test_energy_outside_zero_one_is_refused():
    with pytest.raises(ValueError, match="energy=1.5"):
        rank_for_energy(torch.eye(3), 1.5)


@pytest.mark.parametrize("weights, message", [
    # before the guard: torch's LinAlgError "failed to converge because the input matrix contained non-finite values"
    (torch.full((3, 3), float("nan")), "weights holds NaN or infinite values"),
    (torch.tensor([[0.5, float("inf")], [1.0, 0.0]]), "weights holds NaN or infinite values"),
    # before the guard: rank 1 for a matrix of zeros, whose energy is 0 (0 / 0 kept)
    (torch.stack([torch.eye(3), torch.zeros(3, 3)]), "weights holds a matrix of zeros"),
    (torch.rand(3), r"weights of shape \(3,\) must be matrices"),
    (torch.rand(0, 3), r"weights of shape \(0, 3\) must be matrices"),
], ids=["nan", "inf", "zeros", "1-D", "empty"])
def test_weights_that_are_not_finite_matrices_are_named(weights, message):
    with pytest.raises(ValueError, match=message):
        rank_for_energy(weights)


def test_singular_values_of_nan_weights_are_named():
    with pytest.raises(ValueError, match="weights holds NaN"):
        singular_values(torch.full((2, 2), float("nan")))
    with pytest.raises(ValueError, match="energy='0.9' is a share of the spectrum"):
        rank_for_energy(torch.eye(3), "0.9")


def test_projections_or_keys_that_are_not_tensors_are_named():
    q = torch.randn(5, 4)
    with pytest.raises(TypeError, match=r"E must be a \(k, 5\) tensor, got list"):
        linformer_attention(q, q, q, [[1.0] * 5], torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"key of shape \(4,\) must be \(\.\.\., n, d_k\)"):
        linformer_attention(q, torch.randn(4), q, torch.randn(2, 5), torch.randn(2, 5))
