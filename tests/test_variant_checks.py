"""The input checks of notebooks 13 and 14's attention variants: each passes what its function accepts and
names what is wrong otherwise."""

import pytest
import torch

from annotated.support.variant_checks import (
    check_bigbird_arguments, check_energy, check_learned_positions_input, check_local_attention,
    check_offset_table, check_projections, check_relative_vectors, check_rotary_sizes, check_square_mask,
)


def test_every_check_passes_input_its_function_accepts():
    x = torch.zeros(2, 5, 8)
    check_local_attention(x, x, b=2)
    check_projections(x, torch.zeros(3, 5), torch.zeros(3, 5))
    check_energy(1.0)
    check_bigbird_arguments(n=8, window=3, n_random=0, n_global=8)
    check_square_mask(torch.ones(4, 4, dtype=torch.bool))
    check_learned_positions_input(x, start=5, table=torch.nn.Embedding(10, 8))
    check_relative_vectors(x, x, torch.zeros(5, 5, 8), torch.zeros(5, 5, 8))
    check_offset_table(x, torch.zeros(5, 8))
    check_rotary_sizes(length=0, d=2, start=0)


@pytest.mark.parametrize("call, message", [
    (lambda: check_local_attention(torch.zeros(1, 4, 2), torch.zeros(1, 5, 2), 2), "local attention is self-attention"),
    (lambda: check_local_attention(torch.zeros(1, 4, 2), torch.zeros(1, 4, 2), 0), "b must be a positive integer"),
    (lambda: check_projections(torch.zeros(1, 6, 2), torch.zeros(2, 5), torch.zeros(2, 6)),
     r"E of shape \(2, 5\) must be \(k, n\) = \(k, 6\)"),
    (lambda: check_projections(torch.zeros(1, 6, 2), torch.zeros(2, 6), torch.zeros(6)), r"F of shape \(6,\)"),
    (lambda: check_energy(0.0), "energy=0.0 is a share"),
    (lambda: check_bigbird_arguments(8, 4, 1, 1), "window=4 must be odd"),
    (lambda: check_bigbird_arguments(8, 3, 9, 1), "cannot exceed the n=8 positions"),
    (lambda: check_bigbird_arguments(8, 3, -1, 1), "n_random must be an integer >= 0"),
    (lambda: check_square_mask(torch.ones(3, 4, dtype=torch.bool)), r"must be \(n, n\)"),
    (lambda: check_learned_positions_input(torch.zeros(1, 12, 8), 0, torch.nn.Embedding(10, 8)),
     r"length 12 is longer than the learned table \(max_len=10\)"),
    (lambda: check_learned_positions_input(torch.zeros(1, 4, 6), 0, torch.nn.Embedding(10, 8)), "d_model=8"),
    (lambda: check_learned_positions_input(torch.zeros(1, 4, 8), -1, torch.nn.Embedding(10, 8)),
     "start must be an integer >= 0"),
    (lambda: check_relative_vectors(torch.zeros(3, 2), torch.zeros(4, 2), torch.zeros(3, 3, 2), torch.zeros(3, 3, 2)),
     r"a_k \(3, 3, 2\) and a_v \(3, 3, 2\) must both be \(L_q, L_k, d_k\) = \(3, 4, 2\)"),
    (lambda: check_offset_table(torch.zeros(6, 3), torch.zeros(5, 3)), r"E \(5, 3\) must be \(L, D\) = \(6, 3\)"),
    (lambda: check_rotary_sizes(4, 7, 0), "d=7 must be even"),
    (lambda: check_rotary_sizes(4, 8, -1), "start must be an integer >= 0"),
])
def test_each_check_names_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()
