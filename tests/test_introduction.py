"""The measuring machinery of notebook 00, ``annotated.support.introduction``: the loop is
``nn.RNN``, restricted attention is full attention under a band mask, and the counts of
FLOPs, chains and paths are the formulas of the paper's Table 1."""

import math

import pytest
import torch
import torch.nn as nn

from annotated.attention import scaled_dot_product_attention
from annotated.support import introduction as intro


def test_the_loop_computes_what_nn_rnn_computes():
    torch.manual_seed(0)
    rnn, cell = nn.RNN(8, 8, batch_first=True), nn.RNNCell(8, 8)
    cell.load_state_dict({name.removesuffix("_l0"): p for name, p in rnn.state_dict().items()})
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(intro.rnn_step_by_step(cell, x), rnn(x)[0].detach())


def test_self_attention_is_the_courses_function_with_q_k_v_all_x():
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(intro.self_attention(x), scaled_dot_product_attention(x, x, x)[0])


def test_restricted_attention_is_full_attention_under_a_band_mask():
    torch.manual_seed(0)
    n, r = 16, 5
    x, i = torch.randn(2, n, 8), torch.arange(n)
    band = ((i[:, None] - i[None, :]).abs() <= r // 2).unsqueeze(0)  # (1, n, n)
    torch.testing.assert_close(intro.restricted_self_attention(x, r), scaled_dot_product_attention(x, x, x, band)[0])
    with pytest.raises(ValueError, match="r must be odd"):
        intro.restricted_self_attention(x, 4)


def test_the_sequence_convolution_keeps_the_length():
    assert intro.SequenceConv(8, 3)(torch.randn(2, 7, 8)).shape == (2, 7, 8)


def test_flop_counts_are_table_1s_formulas():
    k, r = 3, 5
    counts = intro.table1_flops([(8, 16), (16, 16)], k, r)
    for n in (8, 16):
        assert counts["self-attention", n, 16] == 4 * n**2 * 16
        assert counts["recurrent", n, 16] == 4 * n * 16**2
        assert counts[f"convolutional, k={k}", n, 16] == 2 * k * n * 16**2
        assert counts[f"restricted self-attention, r={r}", n, 16] == 4 * r * n * 16


def test_gated_layers_count_three_and_four_times_the_plain_one():
    counts = intro.attention_and_recurrent_flops([4, 8], d=16)
    for i, n in enumerate([4, 8]):
        assert counts["attention alone"][i] == 4 * n**2 * 16
        assert counts["attention layer"][i] == 8 * n * 16**2 + 4 * n**2 * 16
        assert [counts[kind][i] for kind in ("RNN", "GRU", "LSTM")] == [g * 4 * n * 16**2 for g in (1, 3, 4)]


def test_chains_and_paths():
    chains = intro.table1_chains([4, 8], d=8, k=3, r=5)
    assert chains["recurrent"] == [4, 8] and chains["self-attention"] == [2, 2]
    paths = intro.table1_paths(n=9, k=3, r=5)
    assert paths == {"self-attention": 1, "recurrent": 9, "convolutional, k=3": 8,
                     "restricted self-attention, r=5": math.ceil(8 / 2)}


def test_an_unconnected_stack_says_so():
    with pytest.raises(RuntimeError, match="still unconnected"):
        intro.layers_to_connect(lambda: (lambda y: y), n=4, max_layers=3)


def test_rnn_and_gru_batch_their_input_products_and_the_lstm_is_one_fused_call():
    for n in (4, 8):
        for kind in ("RNN", "GRU"):  # W_ih x_t of all n positions in one product, then W_hh h once per step
            ops = intro.recurrent_operators(kind, n, d=16)
            assert (ops["products of all n positions"], ops["products of one position"]) == (1, n), (kind, ops)
            assert ops["fused oneDNN calls"] == 0
        lstm = intro.recurrent_operators("LSTM", n, d=16)
        assert lstm["fused oneDNN calls"] == 1 and lstm["products of one position"] == 0, lstm
    # The plain layers' operator calls grow with every position, the fused LSTM's do not.
    calls = {(kind, n): intro.recurrent_operators(kind, n, d=16)["operator calls"]
             for kind in ("RNN", "LSTM") for n in (4, 8)}
    assert calls["RNN", 8] > calls["RNN", 4] and calls["LSTM", 8] == calls["LSTM", 4], calls


def test_timings_come_for_every_layer_and_length():
    seconds = intro.time_layers([4, 8], d=8)
    assert set(seconds) == {"attention layer", *intro.GATES}
    assert all(len(v) == 2 and all(t > 0 for t in v) for v in seconds.values())
