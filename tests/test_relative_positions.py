import math
import re

import pytest
import torch

from annotated.multi_head import MultiHeadAttention
from annotated.relative_positions import (RelativeMultiHeadAttention, naive_relative_logits, relative_attention,
                                          relative_positions, skew, skewed_relative_logits)


def relative_attention_loop(q, k, v, w_k, w_v, max_distance):
    """Shaw et al.'s eqs. 2-4, one pair (i, j) at a time. q, k, v (L, d)."""
    L_q, L_k, d = q.size(0), k.size(0), q.size(1)
    out = torch.zeros(L_q, d)
    for i in range(L_q):
        a = [max(-max_distance, min(max_distance, j - i)) + max_distance for j in range(L_k)]
        e = torch.stack([q[i] @ (k[j] + w_k[a[j]]) / math.sqrt(d) for j in range(L_k)])
        alpha = e.softmax(0)
        out[i] = sum(alpha[j] * (v[j] + w_v[a[j]]) for j in range(L_k))
    return out


def test_relative_positions_are_clipped_offsets():
    index = relative_positions(4, 6, max_distance=2) - 2
    assert index[0].tolist() == [0, 1, 2, 2, 2, 2]
    assert index[3].tolist() == [-2, -2, -1, 0, 1, 2]


@pytest.mark.parametrize("L_q, L_k, d, k", [(5, 5, 4, 2), (3, 8, 6, 16)])
def test_relative_attention_equals_the_loop_over_pairs(L_q, L_k, d, k):
    torch.manual_seed(0)
    q, key, v = torch.randn(L_q, d), torch.randn(L_k, d), torch.randn(L_k, d)
    w_k, w_v = torch.randn(2 * k + 1, d), torch.randn(2 * k + 1, d)
    index = relative_positions(L_q, L_k, k)
    out, weights = relative_attention(q, key, v, w_k[index], w_v[index])
    torch.testing.assert_close(out, relative_attention_loop(q, key, v, w_k, w_v, k), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(L_q))


def test_with_zero_relative_vectors_it_is_the_papers_attention():
    torch.manual_seed(0)
    plain = MultiHeadAttention(16, 4, fast=False)
    relative = RelativeMultiHeadAttention(16, 4, max_distance=3)
    relative.load_state_dict(plain.state_dict(), strict=False)
    torch.nn.init.zeros_(relative.w_K.weight)
    torch.nn.init.zeros_(relative.w_V.weight)
    x = torch.randn(2, 7, 16)
    mask = torch.ones(2, 7, 7, dtype=torch.bool).tril()
    torch.testing.assert_close(relative(x, x, x, mask), plain(x, x, x, mask))


@pytest.mark.parametrize("shape", [(6, 3), (2, 4, 13, 8)])
def test_skew_equals_the_naive_relative_logits_on_and_below_the_diagonal(shape):
    torch.manual_seed(0)
    q = torch.randn(shape)
    E = torch.randn(shape[-2], shape[-1])
    L = shape[-2]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    naive, skewed = naive_relative_logits(q, E), skewed_relative_logits(q, E)
    torch.testing.assert_close(skewed[..., causal], naive[..., causal], rtol=1e-5, atol=1e-5)
    # and the naive logits by hand: q_i . E_{j-i+L-1}
    i, j = L - 1, L // 2
    torch.testing.assert_close(naive[..., i, j], q[..., i, :] @ E[j - i + L - 1])


def test_skew_moves_each_offset_column_to_its_key():
    L = 4
    qe = torch.arange(L).float().expand(L, L)  # column r holds r: offset r - (L - 1)
    s = skew(qe)
    offsets = torch.arange(L)[None, :] - torch.arange(L)[:, None]
    causal = offsets <= 0
    assert torch.equal(s[causal], (offsets + L - 1)[causal].float())


def test_skew_with_clipped_table_equals_shaws_key_term():
    torch.manual_seed(0)
    L, d, k = 9, 4, 3
    q, w_k = torch.randn(L, d), torch.randn(2 * k + 1, d)
    E = w_k[(torch.arange(L) - (L - 1)).clamp(-k, k) + k]  # rows: offsets -(L-1) .. 0
    shaw = torch.einsum("id,ijd->ij", q, w_k[relative_positions(L, L, k)])
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    torch.testing.assert_close(skewed_relative_logits(q, E)[causal], shaw[causal])


def test_wrong_sizes_are_clear_errors():
    with pytest.raises(ValueError, match=r"E \(5, 3\) must be \(L, D\) = \(6, 3\)"):
        skewed_relative_logits(torch.randn(6, 3), torch.randn(5, 3))
    with pytest.raises(ValueError, match=r"must be \(L, D\)"):
        naive_relative_logits(torch.randn(6, 3), torch.randn(6, 4))
    with pytest.raises(ValueError, match="a_k"):
        relative_attention(torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3),
                           torch.randn(4, 5, 3), torch.randn(4, 5, 3))
    with pytest.raises(ValueError, match="max_distance must be a positive integer"):
        RelativeMultiHeadAttention(8, 2, max_distance=0)


@pytest.mark.parametrize("qe", [torch.zeros(3, 4), torch.zeros(2, 4, 3), torch.zeros(4)],
                         ids=["3x4", "batch of 4x3", "1-D"])
def test_skew_of_a_non_square_input_is_named_not_a_reshape_traceback(qe):
    # Before the guard: RuntimeError "shape '[5, 4]' is invalid for input of size 15" from inside the reshape.
    with pytest.raises(ValueError, match=rf"qe of shape {re.escape(str(tuple(qe.shape)))} must be square, \(\.\.\., L, L\)"):
        skew(qe)


def test_a_query_without_positions_is_named():
    with pytest.raises(ValueError, match=r"q of shape \(3,\) must be \(\.\.\., L, D\)"):
        skewed_relative_logits(torch.randn(3), torch.randn(1, 3))


@pytest.mark.parametrize("mask, error, message", [
    (torch.ones(2, 4, 5, dtype=torch.bool), ValueError, r"mask of shape \(2, 4, 5\) does not fit the attention scores"),
    (torch.ones(2, 4, 4), TypeError, "mask must be a bool tensor"),  # before: "~ (operator.invert) is only implemented"
    (torch.ones(3, 4, 4, dtype=torch.bool), ValueError, r"mask of shape \(3, 4, 4\) does not fit"),
], ids=["keys", "float", "batch"])
def test_a_mask_that_does_not_fit_is_named(mask, error, message):
    q, a = torch.randn(2, 4, 3), torch.randn(4, 4, 3)
    with pytest.raises(error, match=message):
        relative_attention(q, q, q, a, a, mask)
    relative_attention(q, q, q, a, a, torch.ones(2, 1, 4, dtype=torch.bool))  # one row for every query: accepted
