"""The measuring tools of notebook 13: peak memory, FLOPs, power-law fits, crossovers, path counters."""

import math

import pytest
import torch
import torch.nn as nn

from annotated.attention import scaled_dot_product_attention
from annotated.model import TransformerConfig, make_model
from annotated.support.attention_cost import (
    crossover, encoder_mask, fit_power_law, flops, keys_by_kind, layers_to_connect, longest_chain, peak_memory,
    time_call,
)


def test_peak_memory_counts_tensors_alive_together_not_all_ever_made():
    def two_at_once():
        a = torch.ones(1000)  # 4000 bytes
        b = torch.ones(500)  # 2000 more, while a lives
        return a.sum() + b.sum()

    def one_after_another():
        for _ in range(5):
            _ = torch.ones(1000)  # each freed before the next
        return None

    assert 6000 <= peak_memory(two_at_once) < 6100
    assert 4000 <= peak_memory(one_after_another) < 8000


@pytest.mark.parametrize("n", [32, 64])
def test_peak_memory_of_attention_holds_the_n_by_n_scores(n):
    q = torch.randn(1, n, 8)
    with torch.no_grad():
        peak = peak_memory(lambda: scaled_dot_product_attention(q, q, q))
    assert 4 * n * n <= peak <= 4 * 4 * n * n


def test_flops_of_a_matrix_product():
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    assert flops(lambda: a @ b) == 2 * 5 * 7 * 3


def test_power_law_fit_recovers_exponent_and_coefficient():
    a, c = fit_power_law([10, 20, 40, 80], [3 * x**1.5 for x in [10, 20, 40, 80]])
    assert math.isclose(a, 1.5) and math.isclose(c, 3.0)
    with pytest.raises(ValueError, match="positive"):
        fit_power_law([1, 0], [1, 2])


def test_crossover_interpolates_where_one_curve_overtakes_the_other():
    x = [1, 2, 4, 8]
    assert math.isclose(crossover(x, [4 * v for v in x], [v * v for v in x]), 4.0)
    assert crossover(x, [100] * 4, [1] * 4) is None


def test_time_call_is_positive():
    assert time_call(lambda: sum(range(100)), repeats=3, min_seconds=0.001) > 0


def test_notebook_00_counters():
    cell = nn.RNNCell(4, 4)
    x = torch.randn(1, 6, 4, requires_grad=True)
    h = torch.zeros(1, 4)
    for t in range(6):
        h = cell(x[:, t], h)
    assert longest_chain(h, {"TanhBackward0"}) == 6
    window = lambda: (lambda y: y + torch.roll(y, 1, dims=1))  # noqa: E731 each layer reaches one further
    assert layers_to_connect(window, 5) == 4


def test_encoder_mask_applies_inside_the_block_only():
    model = make_model(TransformerConfig(9, 9, N=1, d_model=8, d_ff=16, h=2, dropout=0.0)).eval()
    src = torch.randint(1, 9, (2, 6))
    full = model.encode(src, None)
    with encoder_mask(model, lambda n: torch.eye(n, dtype=torch.bool)):
        local = model.encode(src, torch.ones(2, 1, 6, dtype=torch.bool))
    assert not torch.allclose(full, local)
    torch.testing.assert_close(model.encode(src, None), full)


def test_encoder_mask_draws_each_sentence_at_its_own_length():
    model = make_model(TransformerConfig(9, 9, N=1, d_model=8, d_ff=16, h=2, dropout=0.0)).eval()
    src = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 2, 3, 0, 0, 0]])  # 6 tokens, then 3 and padding
    src_mask = (src != 0).unsqueeze(1)  # (batch, 1, L)
    asked, drawn = [], []

    def band(n):  # each token sees itself and its neighbours
        asked.append(n)
        position = torch.arange(n)
        return (position[:, None] - position[None, :]).abs() <= 1

    with encoder_mask(model, band, drawn):
        masked = model.encode(src, src_mask)
    assert asked[:2] == [6, 3] and [tuple(m.shape) for m in drawn] == [(6, 6), (3, 3)]
    # The padded sentence alone, with its own 3 x 3 mask, gives the same states as in the batch.
    with encoder_mask(model, band):
        alone = model.encode(src[1:, :3], None)
    torch.testing.assert_close(masked[1, :3], alone[0])
    with pytest.raises(ValueError, match="must be"):
        with encoder_mask(model, lambda n: torch.ones(8, 8, dtype=torch.bool)):
            model.encode(src, src_mask)


def test_keys_by_kind_counts_window_global_and_random_apart():
    mask = torch.zeros(5, 5, dtype=torch.bool)
    position = torch.arange(5)
    mask[(position[:, None] - position[None, :]).abs() <= 1] = True  # window 3
    mask[0, :] = mask[:, 0] = True  # one global token
    mask[4, 2] = True  # one random key, for query 4
    mask[3, 1] = True  # another, for query 3
    kinds = keys_by_kind([mask], window=3, n_global=1)
    # Ordinary queries 1-4: window keys 3, 3, 3, 2; global (key 0 outside the window) 0, 1, 1, 1; random 0, 0, 1, 1.
    assert kinds == {"window": 11 / 4, "global": 3 / 4, "random": 2 / 4, "all": 16 / 4}
